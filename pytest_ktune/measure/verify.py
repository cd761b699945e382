"""Correctness: fresh seeded inputs, and outputs compared with the reference."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pytest_ktune.core.case import Case, Tensor, ToleranceSpec, tolerance_for
from pytest_ktune.core.compare import Comparison, compare_one
from pytest_ktune.core.dtypes import dtype_family
from pytest_ktune.core.errors import KtuneError, MismatchError, ReferenceShapeError
from pytest_ktune.core.target import Target
from pytest_ktune.measure.guards import Guards


def case_seed(base: int, target: Target, case_id: str, purpose: str = "check") -> int:
    """A seed for one check, derived from the session's base seed, so each check draws its own inputs."""
    h = hashlib.sha256(f"{base}:{target.name}:{case_id}:{purpose}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def tensor_seed(seed: int, name: str) -> int:
    """The seed of one tensor argument on a device that draws each tensor apart: derived from the
    case's seed and the argument's name, so that adding an argument changes no other one's values."""
    h = hashlib.sha256(f"{seed}:{name}".encode()).digest()
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
                  backend: str, repro: str = "", tolerance: ToleranceSpec | None = None) -> list[Comparison]:
    """Compare the kernel's outputs with the reference's; raise MismatchError on disagreement.
    ``tolerance``: the case's (``Target.tolerance_of``); None: the target's, where it is not a function."""
    if tolerance is None and not callable(target.tolerance):
        tolerance = target.tolerance
    outs, refs = as_outputs(got), as_outputs(expected)
    check_structure(target, case_id, outs, refs)
    results = []
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        tol = tolerance_for(o.dtype, tolerance)
        results.append(compare_one(o, r, i, tol))
    failed = [c for c in results if not c.ok]
    if failed:
        lines = [f"case {case_id} on {backend}: output disagrees with the reference (seed {seed})"]
        for c in failed:
            tol = tolerance_for(outs[c.index].dtype, tolerance)
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


def run_check(target: Target, case_id: str, got: Any, expected: Sequence[np.ndarray], *, seed: int,
              backend: str, repro: str = "") -> None:
    """The target's ``check=`` on the kernel's outputs and the reference's, on the host, each as the
    function and the reference return them (one array, or a tuple); a MismatchError when it raises
    AssertionError or returns False."""
    assert target.check_fn is not None
    ref: Any = expected[0] if len(expected) == 1 and not isinstance(got, (tuple, list)) else tuple(expected)
    try:
        verdict = target.check_fn(got, ref)
    except AssertionError as exc:
        why = str(exc) or "its assertion failed"
    except KtuneError:
        raise
    except Exception as exc:
        raise KtuneError(f"the check function failed: {type(exc).__name__}: {exc}", where=target.where,
                         hint="check= takes the outputs and the reference's outputs; it fails a case by raising "
                              "AssertionError (an assert) or returning False") from exc
    else:
        if verdict is not False:
            return
        why = "it returned False"
    raise MismatchError(f"case {case_id} on {backend}: check= rejected the outputs (seed {seed}): {why}",
                        where=target.where, hint=repro or "fix the kernel, or the check if it is the one at fault")


def call_reference(target: Target, inputs: Mapping[str, Any], *, copy: bool = True) -> Any:
    """The reference's outputs for these inputs (with ``copy``, it gets its own copies of host
    arrays, so it may modify them; without, the caller's arrays are its own already)."""
    if copy:
        inputs = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    return target.reference(**inputs)


def upload(backend: Any, host_inputs: Mapping[str, Any], guards: Guards | None = None) -> dict[str, Any]:
    """The host inputs on the device (arrays only), each in a guarded buffer with ``guards``."""
    if guards is not None:
        return {k: (guards.upload(k, v) if isinstance(v, np.ndarray) else v) for k, v in host_inputs.items()}
    return {k: (backend.to_device(v) if isinstance(v, np.ndarray) else v) for k, v in host_inputs.items()}
