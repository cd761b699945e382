"""The dispatch cache's signature of a production call: everything its key and defines functions may read.

The contract (docs/production.md): a target's ``key`` and ``defines`` are pure functions of the call's
signature, that is, for each array argument its library (type), dtype, shape, strides and device (a PyOpenCL
array's queue, a torch tensor's device), and for each other argument those functions take, its type and
value. So the first call of a signature runs them, checks every array and resolves the kernel; a later call
with the same signature builds this tuple and finds all of that with one lookup. Because the tuple holds what
the checks read, a hit needs no check of its own: a changed dtype, a non-contiguous view, an array of another
library or on another queue is another signature, and its first call checks it.

A target whose key reads more (a global setting, the time, an array's values) declares ``key_cache=False``.
``KTUNE_CHECK_DISPATCH=1`` runs key and defines on every call anyway and fails one whose answer differs from
what the cache holds for its signature (``CallPlan._check_pure``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

# How many signatures one target's cache holds before it starts again (a server whose token counts vary holds
# one per count it has seen; the bound keeps a pathological caller from growing it without end).
LIMIT = 4096
ENV = "KTUNE_CHECK_DISPATCH"


def checking() -> bool:
    """Whether every call checks the cache against its key and defines functions (``KTUNE_CHECK_DISPATCH=1``)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


class Uncacheable(Exception):
    """A call whose signature cannot be a dictionary key (an argument of a type the cache does not read)."""


def value(v: Any) -> Any:
    """What the signature reads of a scalar: the value itself (the call's fast path appends it in place)."""
    return v


def _refuse(v: Any) -> Any:
    raise Uncacheable(type(v).__name__)


# What the signature reads of an argument, by its type: arrays' layouts, scalars' values; found once per type.
READERS: dict[type, Callable[[Any], Any]] = {
    int: value, float: value, bool: value, str: value, type(None): value,
}


# torch tensor types seen so far: kept out of READERS, so that the positional fast path (``plan.call``) reads
# a tensor's layout in place (what ``call.torchio.layout`` gives) rather than through a Python function.
TENSORS: set[type] = set()


def reader(t: type) -> Callable[[Any], Any]:
    """What the signature reads of an argument of type ``t``."""
    found = READERS.get(t)
    if found is not None:
        return found
    mod = t.__module__
    if t in TENSORS or (mod.startswith("torch") and any(c.__name__ == "Tensor" for c in t.__mro__)):
        from pytest_ktune.call.torchio import layout  # torch is imported here, not before

        TENSORS.add(t)
        return layout
    if mod.startswith("pyopencl"):
        found = attrgetter("dtype", "shape", "strides", "queue")
    elif mod.startswith("cupy"):
        found = attrgetter("dtype", "shape", "strides")
    elif issubclass(t, np.generic):
        found = value
    else:  # a host array, a tuple, an object: nothing the cache can compare cheaply
        found = _refuse
    READERS[t] = found
    return found


class Signature:
    """Builds the signature tuple of a call from its bound arguments."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def __call__(self, bound: Mapping[str, Any]) -> tuple[Any, ...]:
        """The call's signature; ``Uncacheable`` (or ``AttributeError``) for a call that has none."""
        parts: list[Any] = []
        readers = READERS
        for name in self.names:
            v = bound.get(name)
            t = type(v)
            read = readers.get(t) or reader(t)
            parts.append(t)
            parts.append(read(v))
        return tuple(parts)


def read_by(fns: Sequence[tuple[bool, tuple[str, ...]]], names: Sequence[str]) -> list[str]:
    """The argument names that functions taking ``(takes everything, the names they take)`` read, in the
    signature's order."""
    return [n for n in names if any(every or n in taken for every, taken in fns)]
