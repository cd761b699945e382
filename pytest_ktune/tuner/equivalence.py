"""Equivalent configurations: two that build the same program and make the same launches are one point.

A parameter reaches the kernel in two ways: as a ``-D`` macro of its source, and through the target's
function, which computes the launches from it. A macro whose name the source (with the files it
includes) never mentions cannot change what the compiler builds; and the function's launches are
recorded without running them, against unallocated inputs (as the device priors probe them). Two
configurations that agree on every parameter the source mentions and make the same launches (the
same kernels, grids, blocks and arguments) for every case of the key build one program and run it
the same way: timing both measures one thing twice. A parameter that sets a grid size, at a shape
where the grid is ``min(GY, T)``, is the common case: every ``GY`` at or above ``T`` is one point.

``classes`` gives each feasible configuration its class; the tuner's loop answers a configuration
whose class was timed already from that timing, as it answers a repeat, and ``bo`` proposes one
configuration of each class. A configuration whose launches cannot be recorded is its own class.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pytest_ktune.core.case import Tensor
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.target import Target
from pytest_ktune.measure.runtime import identifiers


def program_params(target: Target, backend: str) -> list[str]:
    """The parameters whose names the backend's source, or a file it includes, mentions (every one where
    a text pastes tokens, which can spell any name; ``measure.runtime.identifiers``)."""
    try:
        named = identifiers(target.source_text(backend), *(p.read_text() for p in target.includes(backend)))
    except (KtuneError, OSError):
        named = None  # unreadable: every parameter may matter
    return [n for n in target.space.params if named is None or n in named]


class _Recorder:
    """Stands in for a Kernel: hands out unallocated outputs and records whole launches."""

    def __init__(self, params: Mapping[str, Value], backend: str) -> None:
        self.params = params
        self.backend_name = backend
        self.launches: list[Any] = []
        self._arrays: dict[int, int] = {}  # id of an array handed out or passed in -> its number

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        return self._own(np.empty((shape,) if isinstance(shape, int) else tuple(shape), dtype))

    def empty_like(self, a: Any) -> Any:
        return self._own(np.empty(tuple(a.shape), a.dtype))

    def _own(self, a: np.ndarray) -> np.ndarray:
        self._arrays.setdefault(id(a), len(self._arrays))
        return a

    def launch(self, grid: Any, block: Any, args: Sequence[Any], *, name: str | None = None) -> None:
        dims = [[int(x) for x in ((d,) if isinstance(d, int) else tuple(d))] for d in (grid, block)]
        self.launches.append([name, *dims, [self._arg(a) for a in args]])

    def _arg(self, a: Any) -> Any:
        if isinstance(a, np.ndarray):
            return ["array", self._arrays.setdefault(id(a), len(self._arrays)), list(a.shape), a.dtype.name]
        if isinstance(a, np.generic):
            a = a.item()
        if isinstance(a, float) and not math.isfinite(a):
            return repr(a)
        return a if isinstance(a, (int, float, str, bool)) or a is None else repr(a)


def launches_of(target: Target, backend: str, case_args: Sequence[Mapping[str, Any]],
                config: Mapping[str, Value]) -> list[Any] | None:
    """The launches ``config`` makes for each case, as recorded; None when they cannot be recorded."""
    out = []
    for args in case_args:
        rec = _Recorder(config, backend)
        bound = {k: rec._own(np.empty(v.shape, v.dtype)) if isinstance(v, Tensor) else v for k, v in args.items()}
        try:
            target.fn(rec, **bound)
        except Exception:  # a launcher that needs real data cannot be recorded: no class shared
            return None
        if not rec.launches:
            return None
        out.append(rec.launches)
    return out


def classes(target: Target, backend: str, case_indices: Sequence[int],
            feasible: Sequence[Mapping[str, Value]]) -> dict[str, str]:
    """Each feasible configuration's class (``config_key`` -> a text naming the program and the
    launches); configurations of one class are equivalent. Empty without cases to record."""
    if not case_indices:
        return {}
    case_args = [target.case_args(target.cases[i]) for i in case_indices]
    used = program_params(target, backend)
    out: dict[str, str] = {}
    for cfg in feasible:
        ck = config_key(cfg)
        launches = launches_of(target, backend, case_args, cfg)
        if launches is None:
            out[ck] = ck
            continue
        out[ck] = json.dumps([{n: cfg[n] for n in used}, launches], sort_keys=True, default=str)
    return out


def representatives(feasible: Sequence[Mapping[str, Value]], cls: Mapping[str, str]) -> list[Mapping[str, Value]]:
    """The first configuration of each class, in ``feasible``'s order."""
    if not cls:  # each configuration its own class (a space lists each once): no key to make for each
        return list(feasible)
    seen: set[str] = set()
    out = []
    for cfg in feasible:
        ck = config_key(cfg)
        c = cls.get(ck, ck)
        if c not in seen:
            seen.add(c)
            out.append(cfg)
    return out
