"""Per-backend spaces: what one backend changes in a target's shared Space and default.

A CUDA and an OpenCL version of one kernel often tune different things (``read_only`` is a CUDA
idea, and an OpenCL keyword). The parameters both share are declared once, in ``space=`` and
``default=``; ``per_backend={"cuda": ktune.BackendSpace(...)}`` says what one backend adds, drops or
sets otherwise. ``Target.for_backend`` applies it; the tuner, the gate, the params file, landscapes
and the agent all work on the target as it runs on their backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_ktune.core.errors import SpaceError
from pytest_ktune.core.space import Space, Value


@dataclass(frozen=True)
class BackendSpace:
    """How one backend's space differs from the shared one.

    ``ktune.BackendSpace(read_only=[0, 1], default={"read_only": 1}, drop=["TILE_Y"])``: keyword
    parameters are added to the space (or replace the values of a shared parameter of that name);
    ``drop`` removes shared parameters, and the shared constraints that name them; ``default`` gives
    the added parameters their values and may change shared ones; ``constraints`` are added.
    """

    params: Mapping[str, tuple[Value, ...]]
    drop: tuple[str, ...]
    default: Mapping[str, Value]
    constraints: tuple[str, ...]

    def __init__(self, *, drop: Sequence[str] = (), default: Mapping[str, Value] | None = None,
                 constraints: Sequence[str] = (), **params: Sequence[Value]) -> None:
        if isinstance(drop, str):
            raise SpaceError(f"BackendSpace(drop={drop!r}) is a string", hint=f"write drop=[{drop!r}]")
        if isinstance(constraints, str):
            raise SpaceError(f"BackendSpace(constraints={constraints!r}) is a string",
                             hint=f"write constraints=[{constraints!r}]")
        for name, values in params.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise SpaceError(f"parameter {name} must be given a list of values, got {values!r}",
                                 hint=f"write {name}=[...]")
        object.__setattr__(self, "params", {n: tuple(v) for n, v in params.items()})
        object.__setattr__(self, "drop", tuple(drop))
        object.__setattr__(self, "default", dict(default or {}))
        object.__setattr__(self, "constraints", tuple(constraints))


def resolve(shared: Space, default: Mapping[str, Value], variant: BackendSpace | None, *, where: str,
            backend: str) -> tuple[Space, dict[str, Value]]:
    """The Space and default on ``backend``: ``shared`` and ``default`` with ``variant`` applied.
    Raises a SpaceError naming ``where`` (the target) and the backend when they do not fit."""
    if variant is None:
        return shared, dict(default)
    what = f"per_backend[{backend!r}]"
    unknown = [n for n in variant.drop if n not in shared.params]
    if unknown:
        raise SpaceError(f"{what} drops {unknown}, which the shared space does not have "
                         f"({', '.join(shared.names)})", where=where,
                         hint="drop only parameters of space=; add new ones as keyword arguments")
    both = sorted(set(variant.drop) & set(variant.params))
    if both:
        raise SpaceError(f"{what} both drops and adds {both}", where=where,
                         hint="to give a shared parameter other values on this backend, add it without dropping it")
    params = {n: v for n, v in shared.params.items() if n not in variant.drop}
    params.update(variant.params)
    if not params:
        raise SpaceError(f"{what} drops every parameter", where=where,
                         hint="a target needs at least one parameter on each backend it has a source for")
    dropped = set(variant.drop)
    constraints = [c.text for c in shared.constraints if not c.names & dropped] + list(variant.constraints)
    values = {k: v for k, v in default.items() if k not in dropped}
    values.update(variant.default)
    extra = sorted(set(values) - set(params))
    missing = sorted(set(params) - set(values))
    if extra or missing:
        raise SpaceError(
            f"the default on {backend} {values} does not match its parameters ({', '.join(params)})"
            + (f": missing {missing}" if missing else "") + (f": unknown {extra}" if extra else ""),
            where=where, hint=f"give each parameter {what} adds a value in its default=, and drop none it sets")
    try:
        space = Space(constraints=constraints, **{n: list(v) for n, v in params.items()})
    except SpaceError as exc:
        raise SpaceError(f"{what}: {exc.message}", where=where, hint=exc.hint) from None
    return space, values
