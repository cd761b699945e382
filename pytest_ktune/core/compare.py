"""Comparing a kernel's output with the reference: on the host in numpy, or with any array module on the device."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_ktune.core.case import Tolerance, ToleranceSpec, tolerance_for


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


def assert_close(out: Any, ref: Any, tolerance: ToleranceSpec | None = None) -> None:
    """Raise AssertionError unless ``out`` agrees with ``ref`` as ktune judges a kernel's outputs (both
    tests of ``Tolerance``; the dtype's default where ``tolerance`` is None): for ``check=`` functions
    that compare what they computed from the outputs, e.g. ``assert_close(np.sort(out), np.sort(ref))``."""
    o, r = np.asarray(out), np.asarray(ref)
    if o.shape != r.shape:
        raise AssertionError(f"shape {o.shape} differs from the reference's {r.shape}")
    tol = tolerance_for(o.dtype, tolerance)
    c = compare_one(o, r, 0, tol)
    if not c.ok:
        raise AssertionError(f"{c.mismatched} of {o.size} elements out of tolerance; relative norm {c.rel_norm:.3g} "
                             f"(limit {tol.norm:g}); worst at index {c.worst_index}: got {c.worst_value!r}, "
                             f"expected {c.worst_expected!r} (atol {tol.atol:g}, rtol {tol.rtol:g})")


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
