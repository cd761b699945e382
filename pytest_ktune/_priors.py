"""Device priors: configurations worth timing first, from what the device is known to like.

Two rules, both read from the device and the target's own launch arithmetic, never from timings:

1. **16-byte vector loads.** A parameter named like ``VEC`` is set so that one vector is 16 bytes of
   the key's dtype (8 halves, 4 floats): the widest load a GPU thread issues in one instruction.
2. **Blocks that fill the SMs.** The target's function is run against a probe that records the
   launch instead of running it (inputs are unallocated ``np.empty`` arrays, so even a large case
   costs nothing). When the prior of rule 1 leaves SMs without a block or the device short of
   threads (a launch-bound shape), the configuration with the same vector width that gives the most
   SMs a block, then keeps the most threads resident, is timed first, and rule 1's after it.

The tuner enqueues these after the warm starts; the sampler takes over from there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._space import Value
from ._target import Target

THREADS_PER_SM = 2048  # resident threads per SM on NVIDIA GPUs since Volta (sm_70 .. sm_90)
VECTOR_BYTES = 16


def _itemsize(key: Mapping[str, Any]) -> int | None:
    for v in key.values():
        if isinstance(v, str):
            try:
                return int(np.dtype(v).itemsize)
            except TypeError:
                continue
    return None


def _vector_params(target: Target) -> list[str]:
    return [n for n in target.space.params if "VEC" in n.upper()]


class _Probe:
    """Stands in for a Kernel: hands out unallocated outputs and records launches."""

    def __init__(self, params: Mapping[str, Value]) -> None:
        self.params = params
        self.launches: list[tuple[int, int]] = []  # (blocks, threads per block)

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        return np.empty((shape,) if isinstance(shape, int) else tuple(shape), dtype)

    def empty_like(self, a: Any) -> Any:
        return np.empty(tuple(a.shape), a.dtype)

    def launch(self, grid: Any, block: Any, args: Sequence[Any], *, name: str | None = None) -> None:
        g = (grid,) if isinstance(grid, int) else tuple(grid)
        b = (block,) if isinstance(block, int) else tuple(block)
        self.launches.append((math.prod(int(x) for x in g), math.prod(int(x) for x in b)))


def occupancy(target: Target, case_args: Mapping[str, Any], config: Mapping[str, Value],
              device: Any) -> tuple[int, int] | None:
    """For the config's largest launch: how many SMs get a block, and how many of its threads the
    device holds at once; None when the launch cannot be probed."""
    from ._target import Tensor

    args = {k: np.empty(v.shape, v.dtype) if isinstance(v, Tensor) else v for k, v in case_args.items()}
    probe = _Probe(config)
    try:
        target.fn(probe, **args)
    except Exception:  # a launcher that needs real data cannot be probed; the prior is skipped
        return None
    if not probe.launches:
        return None
    blocks, threads = max(probe.launches, key=lambda bt: bt[0] * bt[1])
    per_sm = max(1, THREADS_PER_SM // max(threads, 1))
    return min(blocks, device.compute_units), int(min(blocks, device.compute_units * per_sm) * threads)


def device_priors(target: Target, key: Mapping[str, Any], case_indices: Sequence[int],
                  device: Any) -> list[tuple[str, dict[str, Value]]]:
    """The priors for this key on this device, in the order to time them (invalid ones left out)."""
    size = _itemsize(key)
    vec_names = _vector_params(target)
    if size is None or not vec_names:
        return []
    want = VECTOR_BYTES // size
    first = dict(target.default)
    for n in vec_names:
        if want in target.space.params[n]:
            first[n] = want
    if not target.space.valid(first, key):
        return []
    out: list[tuple[str, dict[str, Value]]] = [(f"prior: {VECTOR_BYTES}-byte vectors", first)]
    if not case_indices or device.backend != "cuda":
        return out
    case = max((target.cases[i] for i in case_indices), key=lambda c: c.input_bytes)
    args = target.case_args(case)
    capacity = device.compute_units * THREADS_PER_SM
    held = occupancy(target, args, first, device)
    if held is None or (held[0] >= device.compute_units and held[1] >= capacity):
        return out
    same_vec = [p for p in target.space.feasible(key) if all(p[n] == first[n] for n in vec_names) and p != first]
    scored = [(occupancy(target, args, p, device) or (0, 0), -_distance(p, first, target), p) for p in same_vec]
    if scored:
        # Every SM busy first, then the most resident threads, then the fewest steps from the default.
        best_held, _, best = max(scored, key=lambda s: (s[0], s[1]))
        if best_held > held:
            # Launch-bound: filling the SMs matters more than keeping the default's block size.
            out.insert(0, (f"prior: {VECTOR_BYTES}-byte vectors, blocks that fill the SMs", best))
    return out


def _distance(a: Mapping[str, Value], b: Mapping[str, Value], target: Target) -> int:
    """How many steps apart two configurations are along each parameter's listed values."""
    return sum(abs(target.space.params[n].index(a[n]) - target.space.params[n].index(b[n])) for n in a)
