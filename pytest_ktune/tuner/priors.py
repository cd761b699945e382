"""Device priors: configurations worth timing first, from what the device is known to like.

Three rules, read from the device and the target's own launch arithmetic, never from timings. The
target's function is run against a probe that records the launch instead of running it (inputs are
unallocated ``np.empty`` arrays, so even a large case costs nothing): the probe gives each
configuration's grid and block, and the size of the largest array the function returns, the work
(or what the target's ``work=`` says, for a kernel whose output is much smaller than what its
threads share out, such as a top-k over rows).

1. **One vector per thread.** A parameter named like ``VEC``, ``VECTOR`` or ``PACK`` by whole words,
   or ``WIDTH`` alone (``core.words``; or listed in the target's ``vectors=``) sets how many elements
   a thread loads at once. For a vector width, the
   configuration that launches the most threads while every thread still gets a whole vector of the
   work (work ÷ threads ≥ VEC) has no idle thread and no second pass: the most loads in flight at
   once for that width. Of those that tie, the one that changes the fewest of the default's
   parameters, then by the fewest steps, is taken (the default's other parameters are what the
   author chose). Widths, in order: 16 bytes of the element type (8 halves, 4 floats: the widest
   load a GPU thread issues in one instruction), the widest the space lists when it is wider (two
   such loads in flight per thread), and 8 bytes (twice the threads where a 16-byte vector leaves
   too few of them, or leaves threads of a group idle). The element type is the key's first
   dimension that names a dtype, else that of the cases' largest input.

   When one 16-byte vector per thread means more threads than two full waves of the device, the
   configuration with two vectors per thread (half the threads, still filling every SM, each
   thread's fixed cost paid once for twice the work) is timed first, and the same launch with
   8-byte vectors, four per thread, second: the grid and each thread's share of the work stay, and
   only the width of each load changes, which is the choice the launch arithmetic cannot make (how
   the kernel holds what it loaded decides it). When it is less than one wave and 8-byte vectors
   give more blocks of the same size, the 8-byte one is timed first (twice the warps resident to
   hide a launch-bound shape's latency, half the serial work per thread).
2. **Blocks that fill the SMs.** When the default with 16-byte vectors leaves SMs without a block
   or the device short of threads (a launch-bound shape), the configuration with the same vector
   width that gives the most SMs a block, then keeps the most threads resident.
3. **16-byte vector loads** with the default's other parameters.

The tuner (``tune_key``) times the leading ones first for a key not tuned yet (``leading``: the
first, with its 8-byte twin when it has one), before the default; for a key tuned before, after the
parameters in use and the default. Then the results recorded for keys of the same element types,
then the rest of these, then the results recorded for keys of other element types (their vector
widths carried over in bytes, ``in_bytes``); the sampler takes over from there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_ktune.core.case import Tensor
from pytest_ktune.core.dtypes import as_dtype
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Value, config_key, steps
from pytest_ktune.core.target import Target

TWIN = "prior: 8-byte vectors, four per thread"  # the two-per-thread launch with 8-byte loads


THREADS_PER_SM = 2048  # resident threads per SM on NVIDIA GPUs since Volta (sm_70 .. sm_90)


VECTOR_BYTES = 16  # the widest load one instruction of a GPU thread issues


NARROW_BYTES = 8


def _dtypes(key: Mapping[str, Any]) -> dict[str, np.dtype[Any]]:
    """The key's dimensions that name a dtype (bfloat16 included), in the key's order."""
    out = {}
    for k, v in key.items():
        if isinstance(v, str):
            try:
                out[k] = as_dtype(v)
            except (TypeError, KtuneError):
                continue
    return out


def _itemsize(key: Mapping[str, Any]) -> int | None:
    """The item size of the key's first dtype dimension."""
    return next((int(dt.itemsize) for dt in _dtypes(key).values()), None)


def element_types(key: Mapping[str, Any]) -> dict[str, str]:
    """The key's dimensions that name a dtype (what a record of another key shares or not)."""
    return {k: dt.name for k, dt in _dtypes(key).items()}


def _element_size(target: Target, key: Mapping[str, Any], case_indices: Sequence[int]) -> int | None:
    """The item size vector widths count in: the key's first dtype dimension; for a key that names
    no dtype, that of the largest array among the cases' inputs."""
    size = _itemsize(key)
    if size is not None or not case_indices:
        return size
    tensors = [t for i in case_indices for t in target.cases[i].tensors.values()]
    if not tensors:
        return None
    big = max(tensors, key=lambda t: t.nbytes)
    return int(as_dtype(big.dtype).itemsize)


def in_bytes(target: Target, params: Mapping[str, Value], source: Mapping[str, Any],
             key: Mapping[str, Any]) -> dict[str, Value]:
    """Parameters found for the key ``source``, carried over to ``key``: a vector width (elements)
    scaled so each load moves as many bytes with ``key``'s element size (8 halves become 4 floats),
    when the space lists that width; the rest as they are."""
    was, now = _itemsize(source), _itemsize(key)
    out = dict(params)
    if was is None or now is None or was == now:
        return out
    for n in target.vector_params():
        v = out.get(n)
        if isinstance(v, int) and not isinstance(v, bool) and (v * was) % now == 0 \
                and (v * was) // now in target.space.params[n]:
            out[n] = (v * was) // now
    return out


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

    def constant(self, name: str, array: Any) -> Any:
        return array

    def launch(self, grid: Any, block: Any, args: Sequence[Any], *, name: str | None = None, shared: Any = 0) -> None:
        g = (grid,) if isinstance(grid, int) else tuple(grid)
        b = (block,) if isinstance(block, int) else tuple(block)
        self.launches.append((math.prod(int(x) for x in g), math.prod(int(x) for x in b)))


@dataclass(frozen=True)
class Launch:
    """A configuration's largest launch, as the probe saw it."""

    blocks: int
    threads: int  # per block
    work: int | None  # elements of the largest array the function returns; None: it returns none

    @property
    def total(self) -> int:
        return self.blocks * self.threads


def launch_of(target: Target, case_args: Mapping[str, Any], config: Mapping[str, Value]) -> Launch | None:
    """The config's largest launch and the work it produces; None when the launch cannot be probed."""
    args = {k: np.empty(v.shape, v.dtype) if isinstance(v, Tensor) else v for k, v in case_args.items()}
    probe = _Probe(config)
    try:
        result = target.fn(probe, **args)
    except Exception:  # a launcher that needs real data cannot be probed; the prior is skipped
        return None
    if not probe.launches:
        return None
    blocks, threads = max(probe.launches, key=lambda bt: bt[0] * bt[1])
    declared = target.work_for(args)
    if declared is not None:
        return Launch(blocks, threads, declared)
    outs = result if isinstance(result, (tuple, list)) else (result,)
    sizes = [int(a.size) for a in outs if isinstance(a, np.ndarray)]
    return Launch(blocks, threads, max(sizes) if sizes else None)


def occupancy(target: Target, case_args: Mapping[str, Any], config: Mapping[str, Value],
              device: Any) -> tuple[int, int] | None:
    """For the config's largest launch: how many SMs get a block, and how many of its threads the
    device holds at once; None when the launch cannot be probed."""
    got = launch_of(target, case_args, config)
    return None if got is None else _held(got, device)


def _cached_launch(target: Target, case_args: Mapping[str, Any], config: Mapping[str, Value],
                   cache: dict[str, Launch | None]) -> Launch | None:
    """``launch_of``, each configuration probed once per ``cache``."""
    ck = config_key(config)
    if ck not in cache:
        cache[ck] = launch_of(target, case_args, config)
    return cache[ck]


def _held(got: Launch, device: Any) -> tuple[int, int]:
    per_sm = max(1, THREADS_PER_SM // max(got.threads, 1))
    return min(got.blocks, device.compute_units), int(min(got.blocks, device.compute_units * per_sm) * got.threads)


def _widths(target: Target, vec_names: Sequence[str], size: int) -> list[int]:
    """The vector widths (elements) of rule 1, in order: 16 bytes, the widest listed, 8 bytes."""
    listed = sorted({int(v) for n in vec_names for v in target.space.params[n] if isinstance(v, int)})
    out = []
    for w in (VECTOR_BYTES // size, max(listed, default=0), NARROW_BYTES // size):
        if w >= 1 and w in listed and w not in out and (w * size >= VECTOR_BYTES or w == NARROW_BYTES // size):
            out.append(w)
    return out


def one_per_thread(target: Target, key: Mapping[str, Any], case_args: Mapping[str, Any],
                   vec_names: Sequence[str], width: int, *, vectors: int = 1,
                   probed: dict[str, Launch | None] | None = None) -> dict[str, Value] | None:
    """Rule 1 for one vector width: the most threads while each has ``vectors`` whole vectors of the
    work, then the fewest of the default's parameters changed, then the fewest steps from it; None
    when the launches cannot be probed."""
    probed = {} if probed is None else probed
    best: tuple[tuple[int, int, int], dict[str, Value]] | None = None
    for p in target.space.feasible(key):
        if any(p[n] != width for n in vec_names):
            continue
        got = _cached_launch(target, case_args, p, probed)
        if got is None or got.work is None:
            return None
        if got.work < got.total * width * vectors:
            continue  # some threads would get less than that
        changed = sum(p[n] != target.default[n] for n in p)
        score = (got.total, -changed, -steps(p, target.default, target.space.params))
        if best is None or score > best[0]:
            best = (score, p)
    return None if best is None else best[1]


def device_priors(target: Target, key: Mapping[str, Any], case_indices: Sequence[int],
                  device: Any) -> list[tuple[str, dict[str, Value]]]:
    """The priors for this key on this device, in the order to time them (invalid ones left out)."""
    size = _element_size(target, key, case_indices)
    vec_names = target.vector_params()
    if size is None or not vec_names:
        return []
    want = VECTOR_BYTES // size
    first = dict(target.default)
    for n in vec_names:
        if want in target.space.params[n]:
            first[n] = want
    if not target.space.valid(first, key):
        return []
    tail: list[tuple[str, dict[str, Value]]] = [(f"prior: {VECTOR_BYTES}-byte vectors", first)]
    if not case_indices or device.backend != "cuda":
        return tail
    case = max((target.cases[i] for i in case_indices), key=lambda c: c.input_bytes)
    args = target.case_args(case)
    probed: dict[str, Launch | None] = {}
    head: list[tuple[str, dict[str, Value]]] = []
    capacity = device.compute_units * THREADS_PER_SM
    one: dict[int, tuple[str, dict[str, Value]]] = {}  # the one-per-thread prior of each vector size in bytes
    for w in _widths(target, vec_names, size):
        cfg = one_per_thread(target, key, args, vec_names, w, probed=probed)
        if cfg is None:
            continue
        head.append((f"prior: {w * size}-byte vectors, one per thread", cfg))
        one[w * size] = head[-1]
        got = probed.get(config_key(cfg))
        if w * size == VECTOR_BYTES and got is not None and got.total >= 2 * capacity:
            # More threads than two full waves: half as many, with two vectors each, still fill the
            # device, and each thread's fixed cost is paid once for twice the work.
            two = one_per_thread(target, key, args, vec_names, w, vectors=2, probed=probed)
            if two is not None:
                head.insert(0, (f"prior: {w * size}-byte vectors, two per thread", two))
                # The same launch with 8-byte loads, four per thread: only the load width changes.
                half = NARROW_BYTES // size
                if half in _widths(target, vec_names, size):
                    four = one_per_thread(target, key, args, vec_names, half, vectors=4, probed=probed)
                    if four is not None and probed.get(config_key(four)) == probed.get(config_key(two)):
                        head.insert(1, (TWIN, four))
    wide, narrow = (probed.get(config_key(one[b][1])) if b in one else None for b in (VECTOR_BYTES, NARROW_BYTES))
    if wide is not None and narrow is not None and wide.total < capacity \
            and narrow.threads == wide.threads and narrow.blocks > wide.blocks:
        # Less than one wave, and 8-byte vectors give more blocks of the same size: more warps resident
        # to hide a launch-bound shape's latency, half the serial work per thread.
        head.remove(one[NARROW_BYTES])
        head.insert(0, one[NARROW_BYTES])

    def held_by(p: Mapping[str, Value]) -> tuple[int, int] | None:  # occupancy, probing each point once
        got = _cached_launch(target, args, p, probed)
        return None if got is None else _held(got, device)

    held = held_by(first)
    if held is None or (held[0] >= device.compute_units and held[1] >= capacity):
        return head + tail
    same_vec = [p for p in target.space.feasible(key) if all(p[n] == first[n] for n in vec_names) and p != first]
    scored = [(held_by(p) or (0, 0), -steps(p, first, target.space.params), p) for p in same_vec]
    if scored:
        # Every SM busy first, then the most resident threads, then the fewest steps from the default.
        best_held, _, best = max(scored, key=lambda s: (s[0], s[1]))
        if best_held > held:
            # Launch-bound: filling the SMs matters more than keeping the default's block size.
            tail.insert(0, (f"prior: {VECTOR_BYTES}-byte vectors, blocks that fill the SMs", best))
    return head + tail


def leading(priors: Sequence[tuple[str, Mapping[str, Value]]]) -> int:
    """How many of ``priors`` a key never tuned times before the default: the first, and the 8-byte
    twin that follows a two-per-thread first prior (the same launch: together, one guess)."""
    return 2 if len(priors) > 1 and priors[1][0] == TWIN else min(len(priors), 1)
