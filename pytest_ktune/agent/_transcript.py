"""The run's transcript: every request, answer, retry and tool result, one JSON object a line, in
``.ktune/agent/<run-id>.jsonl``, with secrets redacted before anything reaches the disk."""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Environment variables whose values are secrets wherever they turn up (in a prompt, a header, an error).
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|PRIVATE)", re.IGNORECASE)
# Dictionary keys whose values are never written, whatever they hold.
_SECRET_FIELD = re.compile(r"^(authorization|proxy-authorization|api[-_]?key|x-api-key|cookie|set-cookie|"
                           r"password|secret|token|access[-_]token)$", re.IGNORECASE)
_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),  # Authorization header values
    re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"),  # OpenAI-style keys
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),  # Slack tokens
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face tokens
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
)
_URL_CREDS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/\s:@?#]+):([^\s@/?#]+)@")
REDACTED = "***"
MIN_SECRET = 6  # shorter values (like "1" or "true") would redact ordinary text


def env_secrets(env: Mapping[str, str] | None = None) -> set[str]:
    """The values of environment variables named like secrets (…_KEY, …_TOKEN, …PASSWORD…)."""
    env = os.environ if env is None else env
    return {v for k, v in env.items() if _SECRET_ENV.search(k) and len(v) >= MIN_SECRET}


class Redactor:
    """Removes known secret values, credential-looking tokens and URL passwords from text and JSON."""

    def __init__(self, extra: Iterable[str] = (), env: Mapping[str, str] | None = None) -> None:
        self._values: set[str] = set(env_secrets(env))
        for value in extra:
            self.add(value)

    def add(self, value: str | None) -> None:
        if value and len(value) >= MIN_SECRET:
            self._values.add(value)

    def text(self, s: str) -> str:
        for value in sorted(self._values, key=len, reverse=True):  # longest first: no partial leftovers
            s = s.replace(value, REDACTED)
        s = _URL_CREDS.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", s)
        for pattern in _PATTERNS:
            s = pattern.sub(lambda m: (m.group(1) + " " + REDACTED) if m.groups() else REDACTED, s)
        return s

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, Mapping):
            return {str(k): REDACTED if _SECRET_FIELD.match(str(k)) and v[k] else self.value(v[k]) for k in v}
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        if v is None or isinstance(v, (bool, int, float)):
            return v
        return self.text(str(v))


def new_run_id(label: str = "") -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")[:40]
    return "-".join(p for p in (stamp, slug, secrets.token_hex(3)) if p)


class Transcript:
    """Appends redacted records to ``<folder>/<run_id>.jsonl``."""

    def __init__(self, folder: Path, run_id: str, *, redactor: Redactor | None = None) -> None:
        self.run_id = run_id
        self.path = folder / f"{run_id}.jsonl"
        self.redactor = redactor or Redactor()
        folder.mkdir(parents=True, exist_ok=True)

    def add_secret(self, value: str | None) -> None:
        self.redactor.add(value)

    def write(self, kind: str, data: Mapping[str, Any]) -> None:
        record = {"t": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
                  "kind": kind, **self.redactor.value(dict(data))}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
