"""The one redactor: secrets taken out of text before it is printed, written or stored.

What goes: known secret values (the API key, the GitHub token, values of environment variables
named like secrets), credential-looking tokens (bearer headers, ``sk-…`` keys, GitHub, Slack,
Hugging Face and AWS tokens), and the password of a URL (``scheme://user:password@host`` keeps the
user), or, where a URL's user may itself be a token (a git remote's), all of its credentials. Every
step runs in time linear in the text: a text made to be slow (a megabyte of letters, say) costs
what a megabyte costs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "***"
MIN_SECRET = 6  # shorter values (like "1" or "true") would redact ordinary text

# Environment variables whose values are secrets wherever they turn up (in a prompt, a header, an error).
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|PRIVATE)", re.IGNORECASE)
# Dictionary keys whose values are never written, whatever they hold.
_SECRET_FIELD = re.compile(r"^(authorization|proxy-authorization|api[-_]?key|x-api-key|cookie|set-cookie|"
                           r"password|secret|token|access[-_]token)$", re.IGNORECASE)
# Each starts with a literal (or a word boundary then a literal) and has one bounded repetition: a
# failed attempt at one position costs a constant, so a scan is linear.
_TOKENS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),  # Authorization header values
    re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"),  # OpenAI-style keys
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),  # Slack tokens
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face tokens
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
)
_SCHEME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_AUTHORITY_END = frozenset("/?#")


def env_secrets(env: Mapping[str, str] | None = None) -> set[str]:
    """The values of environment variables named like secrets (…_KEY, …_TOKEN, …PASSWORD…)."""
    env = os.environ if env is None else env
    return {v for k, v in env.items() if _SECRET_ENV.search(k) and len(v) >= MIN_SECRET}


def url_credentials(text: str, *, whole: bool = False) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` masked, in one pass; with
    ``whole``, every URL's credentials, the user too (``scheme://***@host``).

    The credentials run from '://' to the last '@' before the first '/', '?', '#' or whitespace
    that follows the first '@': an '@' or a '/' left unencoded in a password does not show the rest
    of it, and an '@' further on (in a query, say) is not taken for their end. Each character is
    looked at a bounded number of times.
    """
    n = len(text)
    out: list[str] = []
    done = 0  # text[:done] is in out already
    i = text.find("://")
    while i >= 0:
        start = i
        while start > done and text[start - 1] in _SCHEME:
            start -= 1
        auth = i + 3
        if start == i or not text[start].isalpha():
            i = text.find("://", auth)
            continue
        j = auth  # the first '@' of this URL, before whitespace or the next URL
        while j < n and text[j] != "@" and not text[j].isspace() and not text.startswith("://", j):
            j += 1
        if j >= n or text[j] != "@":
            i = text.find("://", j)
            continue
        end = j
        while end < n and not text[end].isspace() and text[end] not in _AUTHORITY_END:
            end += 1
        at = text.rfind("@", j, end)
        user, colon, _ = text[auth:at].partition(":")
        if colon or whole:  # a user without a password hides nothing
            out.append(text[done:auth])
            out.append(REDACTED if whole else f"{user}:{REDACTED}")
            done = at
        i = text.find("://", end)
    out.append(text[done:])
    return "".join(out)


class Redactor:
    """Removes known secret values, credential-looking tokens and URL passwords from text and JSON."""

    def __init__(self, extra: Iterable[str] = (), env: Mapping[str, str] | None = None, *,
                 whole_credentials: bool = False) -> None:
        self._values: set[str] = set(env_secrets(env))
        self._whole = whole_credentials
        self._pattern: re.Pattern[str] | None = None
        for value in extra:
            self.add(value)

    def add(self, value: str | None) -> None:
        if value and len(value) >= MIN_SECRET and value not in self._values:
            self._values.add(value)
            self._pattern = None

    @property
    def values(self) -> frozenset[str]:
        return frozenset(self._values)

    def text(self, s: str) -> str:
        if self._values:
            if self._pattern is None:
                # One alternation, longest first: a value inside another is never left half-masked.
                ordered = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
            s = self._pattern.sub(REDACTED, s)
        s = url_credentials(s, whole=self._whole)
        for pattern in _TOKENS:
            s = pattern.sub(lambda m: (m.group(1) + " " + REDACTED) if m.groups() else REDACTED, s)
        return s

    def value(self, v: Any) -> Any:
        """``v`` (text, or JSON made of dicts, lists and scalars) redacted; a secret-named field's value goes whole."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, Mapping):
            return {str(k): REDACTED if _SECRET_FIELD.match(str(k)) and v[k] else self.value(v[k]) for k in v}
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        if v is None or isinstance(v, (bool, int, float)):
            return v
        return self.text(str(v))


    def strings(self, v: Any) -> Any:
        """``v`` (JSON) with every string in it redacted, dictionary keys too; unlike ``value``, no field
        is dropped for its name (a model's tool arguments keep their shape)."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, Mapping):
            return {self.text(str(k)): self.strings(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [self.strings(x) for x in v]
        return v


def redact(text: str, secrets: Iterable[str] = (), *, whole_credentials: bool = False) -> str:
    """``text`` without ``secrets``, credential-looking tokens and URL passwords (all of a URL's
    credentials with ``whole_credentials``); environment values are not looked up (``Redactor``
    does that)."""
    return Redactor(secrets, env={}, whole_credentials=whole_credentials).text(text)
