"""Space values as Optuna parameters, and back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target


def _numeric(values: Sequence[Value]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


class Encoding:
    """Space values <-> Optuna parameters: numeric parameters as ordered indices (so samplers can
    use their order), others as categories."""

    def __init__(self, target: Target) -> None:
        import optuna

        self.values: dict[str, tuple[Value, ...]] = {}
        self.distributions: dict[str, Any] = {}
        for name, values in target.space.params.items():
            if _numeric(values):
                ordered = tuple(sorted(values, key=float))
                self.values[name] = ordered
                self.distributions[name] = optuna.distributions.IntDistribution(0, len(ordered) - 1)
            else:
                self.values[name] = tuple(values)
                self.distributions[name] = optuna.distributions.CategoricalDistribution(list(values))
        self.numeric = all(_numeric(v) for v in target.space.params.values())

        self._indexed = {n for n, v in self.values.items() if _numeric(v)}

    def decode(self, params: Mapping[str, Any]) -> dict[str, Value]:
        return {n: self.values[n][int(raw)] if n in self._indexed else raw for n, raw in params.items()}

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any]:
        return {n: self.values[n].index(v) if n in self._indexed else v for n, v in config.items()}
