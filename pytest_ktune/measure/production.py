"""A production call of a target: the recorded parameters for this device and key, compiled once.

``@ktune.target`` (``target`` here) declares a ``LaunchTarget``: the core's ``Target`` that also runs when
called, with the parameters the params file (``core.paths``) records for the device of its arrays and the
call's key, or the default where none is recorded. The call itself is ``measure.fastpath``'s: after the
first call for a device and key it binds, computes the key, looks up once and launches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_ktune.core.errors import KtuneWarning
from pytest_ktune.core.target import Target, declare
from pytest_ktune.measure.fastpath import _PLANS, CallPlan, reload

__all__ = ["KtuneWarning", "LaunchTarget", "call_target", "reload", "target"]


@dataclass(frozen=True)
class LaunchTarget(Target):
    """A target that runs its kernel when called (what ``@ktune.target`` makes)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plan = _PLANS.get(id(self))
        if plan is None or plan.target is not self:
            plan = _PLANS[id(self)] = CallPlan(self)
        return plan(args, kwargs)


def target(**options: Any) -> Callable[[Callable[..., Any]], LaunchTarget]:
    """Mark a kernel launcher as a pytest-ktune target (see ``core.target.declare`` for the options).

    The decorated function takes a ``kernel`` handle first (``kernel.params``, ``kernel.empty``,
    ``kernel.launch``) and then the kernel's arguments. ``sources`` maps ``"cuda"`` and/or
    ``"opencl"`` to source files; the space's parameters (and ``defines``) reach the source as
    ``-D`` macros. Calling the result runs the kernel in production.
    """
    return declare(LaunchTarget, **options)


def call_target(target: Target, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A production call of any target (a ``LaunchTarget`` is called the same way by calling it)."""
    plan = _PLANS.get(id(target))
    if plan is None or plan.target is not target:
        plan = _PLANS[id(target)] = CallPlan(target)
    return plan(args, kwargs)
