"""The run's transcript: every request, answer, retry and tool result, one JSON object a line, in
``.ktune/agent/<run-id>.jsonl``, with secrets redacted before anything reaches the disk."""

from __future__ import annotations

import datetime
import json
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.core.redact import Redactor


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
