"""A production call of a target: the recorded parameters for this device and key, compiled once.

``@ktune.target`` (``target`` here) declares a ``LaunchTarget``: the core's ``Target`` that also
runs when called, with the parameters the params file (``core.paths``) records for the device of
its arrays and the call's key, or the default where none is recorded.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ktune import backends
from pytest_ktune.backends.base import DeviceInfo
from pytest_ktune.core.errors import StoreError
from pytest_ktune.core.paths import params_path
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Store, target_id
from pytest_ktune.core.target import Target, declare
from pytest_ktune.measure.runtime import run


@dataclass(frozen=True)
class LaunchTarget(Target):
    """A target that runs its kernel when called (what ``@ktune.target`` makes)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call_target(self, args, kwargs)


def target(**options: Any) -> Callable[[Callable[..., Any]], LaunchTarget]:
    """Mark a kernel launcher as a pytest-ktune target (see ``core.target.declare`` for the options).

    The decorated function takes a ``kernel`` handle first (``kernel.params``, ``kernel.empty``,
    ``kernel.launch``) and then the kernel's arguments. ``sources`` maps ``"cuda"`` and/or
    ``"opencl"`` to source files; the space's parameters (and ``defines``) reach the source as
    ``-D`` macros. Calling the result runs the kernel in production.
    """
    return declare(LaunchTarget, **options)


def call_target(target: Target, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A production call: the recorded parameters for this device and key, else the default."""
    backend = backends.backend_for(tuple(args) + tuple(kwargs.values()))
    target = target.for_backend(backend.name)
    bound = target.bind(*args, **kwargs).arguments
    key = target.key(bound)
    params = params_for(target, backend.device, key)
    target.check_config(params, key, "recorded configuration")
    result, _ = run(backend, target, params, bound)
    return result


class KtuneWarning(UserWarning):
    """A problem that does not stop a production call, but makes it slower than it could be."""


_PRODUCTION: dict[Path, tuple[float, Store | None]] = {}


def params_for(target: Target, device: DeviceInfo, key: Mapping[str, Any]) -> dict[str, Value]:
    """The parameters recorded for this target, device and key; the default where none is.

    The params file is found by the rule of ``core.paths``, starting at the target's file.
    """
    path = params_path(target.file.parent)
    if not path.exists():
        return dict(target.default)
    mtime = path.stat().st_mtime
    cached = _PRODUCTION.get(path)
    if cached is None or cached[0] != mtime:
        try:
            store: Store | None = Store.load(path)
        except StoreError as exc:
            warnings.warn(f"{exc}\nUsing default parameters for {target.name}.", KtuneWarning, stacklevel=3)
            store = None
        _PRODUCTION[path] = (mtime, store)
        cached = _PRODUCTION[path]
    store = cached[1]
    if store is None:
        return dict(target.default)
    record = store.find(target_id(target, path.parent), device.id, key)
    return dict(record.params) if record else dict(target.default)
