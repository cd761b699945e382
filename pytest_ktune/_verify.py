"""Correctness: fresh seeded inputs, and outputs compared with the reference."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._errors import MismatchError, ReferenceShapeError
from ._target import Case, Target, Tensor, Tolerance, dtype_family, tolerance_for


def case_seed(base: int, target: Target, case_id: str, purpose: str = "check") -> int:
    """A seed for one check, derived from the session's base seed, so each check draws its own inputs."""
    h = hashlib.sha256(f"{base}:{target.name}:{case_id}:{purpose}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def draw_inputs(case: Case, seed: int) -> dict[str, Any]:
    """Host values for a case: tensors drawn from ``seed``, other arguments as given."""
    rng = np.random.default_rng(seed)
    return {k: (v.draw(rng) if isinstance(v, Tensor) else v) for k, v in case.args.items()}


def as_outputs(value: Any) -> list[np.ndarray]:
    """The reference's (or the kernel's, on the host) outputs as a list of arrays."""
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
    # device_close below must pass and fail exactly where this does: change both together.
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


#: Array kinds ``device_close`` judges (bool, integers, floats); others are compared on the host,
#: bfloat16 among them (ml_dtypes gives it kind "V").
DEVICE_KINDS = "biuf"


def device_close(xp: Any, out: Any, ref: Any, tol: Tolerance, *, chunk: int = 1 << 24) -> bool:
    """Whether ``out`` agrees with ``ref``: the verdict of ``compare_one(out, ref, i, tol).ok``, computed
    with the array module ``xp`` (numpy, or cupy on the device's own arrays) without copying either
    to the host, and without the worst element and counts a failure message needs.

    Every element must be finite in both (a non-finite output is bad, and a non-finite reference
    would need an equal, so non-finite, output), within ``atol + rtol * |ref|``, and the relative
    norm of the error within ``tol.norm``; all in float64, operation by operation as ``_compare``
    does, so the rounding is the same. It works through flat chunks of ``chunk`` elements, which
    bounds the float64 temporaries; the sums of squares are then added chunk by chunk, which may
    round their last bits differently from numpy's single dot product.
    """
    o_all, r_all = out.reshape(-1), ref.reshape(-1)
    if o_all.size != r_all.size:
        raise ValueError(f"output has {o_all.size} elements but the reference {r_all.size}")
    sq_err = sq_ref = 0.0
    # As in compare_one: numpy must not warn on overflowing differences (cupy never does).
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for start in range(0, int(o_all.size), chunk):
            o = o_all[start:start + chunk].astype(xp.float64, copy=False)
            r = r_all[start:start + chunk].astype(xp.float64, copy=False)
            if not bool(xp.isfinite(o).all()) or not bool(xp.isfinite(r).all()):
                return False
            err = o - r
            del o
            limit = xp.abs(r)
            limit *= tol.rtol
            limit += tol.atol
            if bool((xp.abs(err) > limit).any()):
                return False
            del limit
            sq_err += float(xp.dot(err, err))
            sq_ref += float(xp.dot(r, r))
    rel = math.sqrt(sq_err) / (math.sqrt(sq_ref) or 1.0) if o_all.size else 0.0
    return rel <= tol.norm


def check_structure(target: Target, case_id: str, outs: Sequence[Any], refs: Sequence[Any]) -> None:
    """Raise ReferenceShapeError unless the outputs and the reference's agree in number, shapes and
    dtype families. Reads only ``shape`` and ``dtype``, so ``outs`` may be device arrays."""
    if len(outs) != len(refs):
        raise ReferenceShapeError(
            f"case {case_id}: the kernel function returned {len(outs)} output(s), the reference "
            f"{len(refs)}", where=target.where,
            hint="return the same outputs, in the same order, from both")
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        o_shape, o_dtype = tuple(int(n) for n in o.shape), np.dtype(o.dtype)
        if o_shape != r.shape:
            raise ReferenceShapeError(
                f"case {case_id}: output {i} has shape {o_shape} but the reference's has {r.shape}",
                where=target.where, hint="make the reference return arrays shaped like the kernel's outputs")
        # bfloat16 (ml_dtypes; numpy's kind "V") is a float: a float64 reference matches it.
        o_kind, r_kind = dtype_family(o_dtype), dtype_family(r.dtype)
        if o_kind != r_kind and not (o_kind in "iu" and r_kind in "iu"):
            raise ReferenceShapeError(
                f"case {case_id}: output {i} is {o_dtype} but the reference's is {r.dtype}",
                where=target.where,
                hint="return the reference in the output's dtype family (compute in float64, "
                     "then cast)")


def check_outputs(target: Target, case_id: str, got: Any, expected: Any, *, seed: int,
                  backend: str, repro: str = "") -> list[Comparison]:
    """Compare the kernel's outputs with the reference's; raise MismatchError on disagreement."""
    outs, refs = as_outputs(got), as_outputs(expected)
    check_structure(target, case_id, outs, refs)
    results = []
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
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
