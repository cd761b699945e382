"""Tuning keys: how a record, a study and a test id name one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import Target


def key_string(key: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={key[k]}" for k in sorted(key))


def key_label(key: Mapping[str, Any]) -> str:
    return "-".join(f"{k}{v}" if isinstance(v, (int, float)) else str(v) for k, v in key.items())


def parse_key(items: Sequence[str]) -> dict[str, str]:
    """``["T=64", "H=4096"]`` -> ``{"T": "64", "H": "4096"}`` (matched to a case's key as text)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise KtuneError(f"--key {item!r} is not NAME=VALUE", hint="e.g. --key T=64 --key dtype=float16")
        out[name.strip()] = value.strip()
    return out


def key_matches(key: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether ``key`` has every dimension of ``want``, with the same value written as text."""
    return all(k in key and str(key[k]) == str(v) for k, v in want.items())


def case_ids(target: Target) -> list[str]:
    """The id of each of the target's cases, in order; a KtuneError, naming the target and saying how
    to name the cases, when two have the same id (their baselines would overwrite each other in the
    params file, and ``-k`` could not tell them apart)."""
    ids = [target.case_id(c) for c in target.cases]
    error = clash(target, list(enumerate(ids)))
    if error is not None:
        raise error
    return ids


def clash(target: Target, ids: Sequence[tuple[int, str]]) -> KtuneError | None:
    """The error ``case_ids`` raises when two of ``ids`` (case index, id) are the same; None when none are."""
    seen: dict[str, list[int]] = {}
    for i, ident in ids:
        seen.setdefault(ident, []).append(i)
    clashes = {ident: idx for ident, idx in seen.items() if len(idx) > 1}
    if not clashes:
        return None
    lines = []
    for ident, idx in clashes.items():
        shown = "; ".join(f"case {i}: {_case_text(target, i)}" for i in idx)
        lines.append(f"cases {', '.join(map(str, idx))} all have the id {ident!r} ({shown})")
    ident, idx = next(iter(clashes.items()))
    return KtuneError(
        "two cases have the same id, so their baselines would overwrite each other and -k could not tell "
        "them apart: " + "; ".join(lines), where=target.where,
        hint=f"name them, e.g. ktune.Case(id='{ident}-{idx[0]}', ...) and ktune.Case(id='{ident}-{idx[1]}', "
             "...), or add to key= the dimension that sets them apart")


def _case_text(target: Target, i: int) -> str:
    case = target.cases[i]
    parts = [f"{k}={v.shape} {v.dtype.name}" for k, v in case.tensors.items()]
    return ", ".join(parts) or ", ".join(f"{k}={v!r}" for k, v in case.args.items())


def cases_by_key(target: Target, backend: str) -> dict[str, tuple[dict[str, Any], list[int]]]:
    """The target's keys on this backend, each with the indices of its cases (whose ids must be
    unique: ``case_ids``)."""
    case_ids(target)
    out: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for i, case in enumerate(target.cases):
        if not case.runs_on(backend):
            continue
        key = target.case_key(case)
        out.setdefault(key_string(key), (key, []))[1].append(i)
    return out
