"""Correctness: fresh seeded inputs, and outputs compared with the reference."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._errors import MismatchError, ReferenceShapeError
from ._target import Case, Target, Tensor, Tolerance, tolerance_for


def case_seed(base: int, target: Target, case_id: str, purpose: str = "check") -> int:
    """A seed for one check, derived from the session's base seed, so each check draws its own inputs."""
    h = hashlib.sha256(f"{base}:{target.name}:{case_id}:{purpose}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def draw_inputs(case: Case, seed: int) -> dict[str, Any]:
    """Host values for a case: tensors drawn from ``seed``, other arguments as given."""
    rng = np.random.default_rng(seed)
    return {k: (v.draw(rng) if isinstance(v, Tensor) else v) for k, v in case.args.items()}


def _as_outputs(value: Any) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [np.asarray(v) for v in value]
    return [np.asarray(value)]


@dataclass(frozen=True)
class Comparison:
    """How one output compared: the worst element and the relative norm of the error."""

    index: int
    rel_norm: float
    worst_index: tuple[int, ...]
    worst_value: float
    worst_expected: float
    mismatched: int
    ok: bool


def compare_one(out: np.ndarray, ref: np.ndarray, index: int, tol: Tolerance) -> Comparison:
    # Inf and NaN outputs are judged below; numpy must not warn (or raise, under -W error) on them.
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _compare(out, ref, index, tol)


def _compare(out: np.ndarray, ref: np.ndarray, index: int, tol: Tolerance) -> Comparison:
    tol_norm, atol, rtol = tol.norm, tol.atol, tol.rtol
    o = out.astype(np.float64)
    r = ref.astype(np.float64)
    diff = np.abs(o - r)
    bad = ~np.isfinite(o) | (diff > atol + rtol * np.abs(r))
    bad |= ~np.isfinite(r) & (o != r)  # a non-finite reference value must be matched exactly
    finite = np.isfinite(o) & np.isfinite(r)
    denom = float(np.linalg.norm(r[finite])) or 1.0
    rel = float(np.linalg.norm((o - r)[finite])) / denom if finite.any() else 0.0
    if not np.isfinite(o).all():
        rel = float("inf")
    score = np.where(np.isfinite(o), diff / (atol + rtol * np.abs(r) + 1e-300), np.inf)
    flat = int(np.argmax(score)) if score.size else 0
    worst = tuple(int(i) for i in np.unravel_index(flat, o.shape)) if o.size else ()
    return Comparison(
        index=index, rel_norm=rel, worst_index=worst,
        worst_value=float(o.flat[flat]) if o.size else float("nan"),
        worst_expected=float(r.flat[flat]) if r.size else float("nan"),
        mismatched=int(bad.sum()), ok=not bad.any() and rel <= tol_norm,
    )


def check_outputs(target: Target, case_id: str, got: Any, expected: Any, *, seed: int,
                  backend: str, repro: str = "") -> list[Comparison]:
    """Compare the kernel's outputs with the reference's; raise MismatchError on disagreement."""
    outs, refs = _as_outputs(got), _as_outputs(expected)
    if len(outs) != len(refs):
        raise ReferenceShapeError(
            f"case {case_id}: the kernel function returned {len(outs)} output(s), the reference "
            f"{len(refs)}", where=target.where,
            hint="return the same outputs, in the same order, from both")
    results = []
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        if o.shape != r.shape:
            raise ReferenceShapeError(
                f"case {case_id}: output {i} has shape {o.shape} but the reference's has {r.shape}",
                where=target.where, hint="make the reference return arrays shaped like the kernel's outputs")
        if o.dtype.kind != r.dtype.kind and not (o.dtype.kind in "iu" and r.dtype.kind in "iu"):
            raise ReferenceShapeError(
                f"case {case_id}: output {i} is {o.dtype} but the reference's is {r.dtype}",
                where=target.where,
                hint="return the reference in the output's dtype family (compute in float64, "
                     "then cast)")
        tol = tolerance_for(o.dtype, target.tolerance)
        results.append(compare_one(o, r, i, tol))
    failed = [c for c in results if not c.ok]
    if failed:
        lines = [f"case {case_id} on {backend}: output disagrees with the reference (seed {seed})"]
        for c in failed:
            tol = tolerance_for(outs[c.index].dtype, target.tolerance)
            lines.append(
                f"  output {c.index}: {c.mismatched} of {outs[c.index].size} elements out of tolerance; "
                f"relative norm {c.rel_norm:.3g} (limit {tol.norm:g}); worst at index {c.worst_index}: "
                f"got {c.worst_value!r}, expected {c.worst_expected!r} "
                f"(atol {tol.atol:g}, rtol {tol.rtol:g})")
            if np.isnan(c.worst_value):
                lines.append("  NaN where a value was expected: the kernel may not write every element "
                             "(outputs are poisoned with NaN before each run)")
        raise MismatchError("\n".join(lines), where=target.where,
                            hint=repro or "fix the kernel, or the reference if it is the one at fault")
    return results


def call_reference(target: Target, host_inputs: Mapping[str, Any]) -> Any:
    """The reference's outputs for these inputs (it gets its own copies, so it may modify them)."""
    copies = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in host_inputs.items()}
    return target.reference(**copies)


def upload(backend: Any, host_inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (backend.to_device(v) if isinstance(v, np.ndarray) else v) for k, v in host_inputs.items()}
