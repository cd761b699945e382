"""A stand-in target for a landscape recorded elsewhere (a Kernel Tuner cache file), so that the live
tuner's own ``tune_key`` can replay it.

The stand-in has the landscape's parameters, and its feasible configurations are exactly the
landscape's rows: the tool that recorded it ruled out the rest with restrictions it did not write
down. It has no source, no case and no launch: nothing of it can run, so whatever needs the launch
(the device priors) is off for it, and it has no default configuration either (the strategies
start from their own first proposals).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Config, Space, Value, config_key
from pytest_ktune.core.target import Target
from pytest_ktune.lab.landscape import Landscape

NOT_LISTED = "not among the configurations the landscape lists"


class ListedSpace(Space):
    """A Space whose feasible configurations are listed, not described by constraints."""

    def __init__(self, listed: list[dict[str, Value]], **params: list[Value]) -> None:
        super().__init__((), **params)
        object.__setattr__(self, "_listed", tuple(listed))
        object.__setattr__(self, "_keys", frozenset(config_key(c) for c in listed))

    def violated(self, config: Config, key: Mapping[str, Any]) -> list[str]:
        broken = super().violated(config, key)
        if broken:
            return broken
        return [] if config_key(config) in self._keys else [NOT_LISTED]  # type: ignore[attr-defined]

    def feasible(self, key: Mapping[str, Any]) -> Iterator[dict[str, Value]]:
        for c in self._listed:  # type: ignore[attr-defined]
            yield dict(c)


def _cannot_run(*args: Any, **kwargs: Any) -> Any:
    raise KtuneError("a landscape recorded elsewhere has no kernel to run",
                     hint="replay it (ktune bench-search), or record the kernel with ktune record")


def stand_in(land: Landscape, root: Path) -> Target:
    """The stand-in target of an imported landscape; ``target_id(stand_in(land, root), root)`` is
    ``land.target``, so records made for it are found again."""
    prefix, _, name = land.target.rpartition("::")
    space = ListedSpace([dict(p.params) for p in land.points], **land.space_params())
    return Target(name=name or land.name, fn=_cannot_run, sources={}, space=space, default={},
                  key_fn=lambda **_: dict(land.key), cases=(), reference=_cannot_run,
                  file=root.resolve() / (prefix or "imported"), module="", kernel_name=land.name)
