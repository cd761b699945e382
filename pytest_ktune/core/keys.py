"""Tuning keys: how a record, a study and a test id name one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ktune.core.target import Target


def key_string(key: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={key[k]}" for k in sorted(key))


def key_label(key: Mapping[str, Any]) -> str:
    return "-".join(f"{k}{v}" if isinstance(v, (int, float)) else str(v) for k, v in key.items())


def cases_by_key(target: Target, backend: str) -> dict[str, tuple[dict[str, Any], list[int]]]:
    """The target's keys on this backend, each with the indices of its cases."""
    out: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for i, case in enumerate(target.cases):
        if not case.runs_on(backend):
            continue
        key = target.case_key(case)
        out.setdefault(key_string(key), (key, []))[1].append(i)
    return out
