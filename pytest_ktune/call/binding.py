"""A target's arguments, bound to names once per call without ``inspect``: what production calls use.

``Target.bind`` runs ``inspect.Signature.bind`` (several microseconds); a production call runs
``Binder.bind``, which looks at a signature taken apart once, and falls back to ``Target.bind`` only to
raise the same ``TypeError`` for a call that does not fit. ``Caller`` calls a target's key (or defines)
function with the arguments it names, found once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pytest_ktune.core.case import Tensor
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import Target

_P = inspect.Parameter


class Binder:
    """Binds a target's call arguments (without the kernel handle) to its function's parameter names."""

    def __init__(self, target: Target) -> None:
        self._target = target
        params = list(target.signature.parameters.values())
        self._simple = all(p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY) for p in params)
        self.positional = tuple(p.name for p in params if p.kind is _P.POSITIONAL_OR_KEYWORD)
        self.names = frozenset(p.name for p in params)
        self.order = tuple(p.name for p in params)
        self.defaults = {p.name: p.default for p in params if p.default is not _P.empty}
        self._all_positional = self._simple and len(self.positional) == len(params)
        # For a call of k positional arguments and no keywords: the defaults of the rest, where they all have one.
        self._tails: dict[int, dict[str, Any]] = {}
        if self._all_positional:
            for k in range(len(self.positional)):
                rest = self.positional[k:]
                if all(n in self.defaults for n in rest):
                    self._tails[k] = {n: self.defaults[n] for n in rest}

    def positional_counts(self) -> tuple[int, ...]:
        """The numbers of positional arguments a call without keywords may give, every parameter taking one
        and those left out their defaults: then the function takes the call's arguments as they are."""
        if not self._all_positional:
            return ()
        return (*self._tails, len(self.positional))

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments by name, defaults filled in; a call that does not fit raises ``TypeError``."""
        if not kwargs and self._all_positional:
            if len(args) == len(self.positional):
                return dict(zip(self.positional, args, strict=True))
            tail = self._tails.get(len(args))
            if tail is not None:
                bound = dict(zip(self.positional, args, strict=False))
                bound.update(tail)
                return bound
        if self._simple and len(args) <= len(self.positional):
            bound = dict(zip(self.positional, args, strict=False))
            if kwargs:
                for k in kwargs:
                    if k in bound or k not in self.names:
                        return self._slow(args, kwargs)
                bound.update(kwargs)
            if len(bound) < len(self.names):
                for k, v in self.defaults.items():
                    bound.setdefault(k, v)
                if len(bound) < len(self.names):
                    return self._slow(args, kwargs)
            return bound
        return self._slow(args, kwargs)

    def _slow(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._target.bind(*args, **kwargs).arguments)


class Caller:
    """Calls one of a target's functions of its arguments (``key``, ``defines``) with those it names."""

    def __init__(self, fn: Callable[..., Any], target: Target, what: str) -> None:
        params = inspect.signature(fn).parameters
        self._fn = fn
        self.takes_all = any(p.kind is _P.VAR_KEYWORD for p in params.values())
        self.names = tuple(params)
        self._where = target.where
        self._what = what

    def __call__(self, bound: Mapping[str, Any]) -> Any:
        kwargs = dict(bound) if self.takes_all else {k: bound[k] for k in self.names if k in bound}
        try:
            return self._fn(**kwargs)
        except KtuneError:
            raise
        except Exception as exc:
            raise KtuneError(f"the {self._what} function failed: {type(exc).__name__}: {exc}", where=self._where,
                             hint=f"its parameters must be named like the kernel function's ({', '.join(bound)})"
                             ) from exc


def array_arguments(target: Target) -> dict[str, frozenset[np.dtype[Any]]]:
    """The arguments the target's cases give as tensors, each with the dtypes they declare for it."""
    out: dict[str, set[np.dtype[Any]]] = {}
    for case in target.cases:
        for name, spec in case.args.items():
            if isinstance(spec, Tensor):
                out.setdefault(name, set()).add(np.dtype(spec.dtype))
    order = [n for n in target.signature.parameters if n in out]
    return {n: frozenset(out[n]) for n in order}
