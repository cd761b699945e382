"""Space values as Optuna parameters, and back.

A study stores each parameter's real values (``BLOCK`` as 64 ... 1024, not 0 ... 4) as a categorical
distribution, so optuna-dashboard and ``optuna.visualization`` plot in the kernel's own units. The
default sampler ``bo`` and the device priors work on configurations, never on Optuna's internals,
so this costs them nothing.

Samplers that search by the order of a parameter's values keep it: CMA-ES (it samples a
categorical parameter at random, independently of the others), TPE (on the 25 committed landscapes,
5 seeds, its median trials to within 3 % of the optimum summed to 229 on positions against 261 on
categories; 75 against 82 after the warm starts and priors) and Optuna's GP store a numeric
parameter as its position among the sorted values (``POSITIONS``), as every study of pytest-ktune
0.1 did. A study says which it uses in its user
attribute ``ktune_encoding``; one written before that attribute existed is read by the
distributions of its trials, so an existing journal goes on loading as it was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ktune.core.space import Value
from pytest_ktune.core.target import Target

VALUES = "values"  # every parameter a categorical distribution of its values
POSITIONS = "positions"  # numeric parameters as their positions among the sorted values
ATTR = "ktune_encoding"  # the study's user attribute that records which
METRIC = "time per call, µs (sum over the key's cases)"  # the study's metric name, as dashboards show it

# Samplers that use a numeric parameter's order to search: given positions, not categories.
ORDERED_SAMPLERS = ("cmaes", "tpe", "gp")


def _numeric(values: Sequence[Value]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


class Encoding:
    """Space values <-> Optuna parameters, by ``mode`` (``VALUES`` or ``POSITIONS``)."""

    def __init__(self, target: Target, mode: str = VALUES) -> None:
        import optuna

        if mode not in (VALUES, POSITIONS):
            raise ValueError(f"unknown encoding {mode!r}")
        self.mode = mode
        self.values: dict[str, tuple[Value, ...]] = {}
        self.distributions: dict[str, Any] = {}
        for name, values in target.space.params.items():
            if _numeric(values):
                ordered = tuple(sorted(values, key=float))
                self.values[name] = ordered
                self.distributions[name] = (optuna.distributions.IntDistribution(0, len(ordered) - 1)
                                            if mode == POSITIONS else
                                            optuna.distributions.CategoricalDistribution(list(ordered)))
            else:
                self.values[name] = tuple(values)
                self.distributions[name] = optuna.distributions.CategoricalDistribution(list(values))
        self.numeric = all(_numeric(v) for v in target.space.params.values())
        self._indexed = {n for n, v in self.values.items() if _numeric(v)} if mode == POSITIONS else set()

    @classmethod
    def for_sampler(cls, target: Target, sampler: str, stored: str | None = None) -> Encoding:
        """The encoding of a study: the one it was stored with (``stored``), else the one ``sampler``
        needs."""
        mode = stored or (POSITIONS if sampler in ORDERED_SAMPLERS else VALUES)
        return cls(target, mode)

    def decode(self, params: Mapping[str, Any]) -> dict[str, Value]:
        return {n: self.values[n][int(raw)] if n in self._indexed else raw for n, raw in params.items()}

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any]:
        return {n: self.values[n].index(v) if n in self._indexed else v for n, v in config.items()}


def stored_mode(storage: Any, study_name: str) -> str | None:
    """How an existing study stores its parameters; None for a study not created yet (or one whose
    parameters read the same either way)."""
    import optuna

    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:
        return None
    mode = storage.get_study_user_attrs(study_id).get(ATTR)
    if mode in (VALUES, POSITIONS):
        return str(mode)
    for trial in storage.get_all_trials(study_id, deepcopy=False):
        for dist in trial.distributions.values():
            if isinstance(dist, optuna.distributions.IntDistribution):
                return POSITIONS  # written by pytest-ktune 0.1, which stored positions
            if isinstance(dist, optuna.distributions.CategoricalDistribution) and \
                    all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in dist.choices):
                return VALUES
    return None


def label_study(study: Any, encoding: Encoding) -> None:
    """Record the encoding and the metric's name on the study, for the next run and for dashboards."""
    import warnings

    study.set_user_attr(ATTR, encoding.mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # set_metric_names is marked experimental
        study.set_metric_names([METRIC])


def check_space(storage: Any, study_name: str, encoding: Encoding, target: Target, storage_name: str) -> None:
    """A KtuneError, naming the study and what to do, when an existing study was made for other
    values of a parameter (the target's Space changed since): Optuna would refuse its next trial."""
    import optuna
    from optuna.distributions import check_distribution_compatibility

    from pytest_ktune.core.errors import KtuneError

    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:
        return
    for trial in storage.get_all_trials(study_id, deepcopy=False):
        if not trial.distributions:
            continue
        for name, old in trial.distributions.items():
            new = encoding.distributions.get(name)
            try:
                if new is not None:
                    check_distribution_compatibility(old, new)
                    if isinstance(old, optuna.distributions.CategoricalDistribution) and old.choices != new.choices:
                        raise ValueError("other values")
            except ValueError:
                raise KtuneError(
                    f"the study {study_name!r} in {storage_name} was made for other values of {name} than the "
                    f"space now has ({', '.join(map(str, encoding.values[name]))})", where=target.where,
                    hint=f"start it afresh: optuna delete-study --study-name '{study_name}' --storage URL "
                         "(for the default journal, delete .ktune/studies.journal)") from None
        return  # every trial of a study is asked with the same distributions
