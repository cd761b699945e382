"""Samplers: the built-in ones (``bo``, Optuna's TPE, random, grid, CMA-ES and GP) and how a plugin's
are made (``pytest_ktune_sampler``): a factory that takes a ``SamplerRequest``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import SAMPLERS
from pytest_ktune.core.space import Value

if TYPE_CHECKING:
    from pytest_ktune.tuner.encoding import Encoding


@dataclass(frozen=True)
class SamplerRequest:
    """What a sampler is made for: one study of one key."""

    name: str
    seed: int | None
    encoding: Encoding  # the space's values as Optuna parameters
    feasible: tuple[Mapping[str, Value], ...]  # the key's configurations that meet the constraints


#: Makes an Optuna sampler (an ``optuna.samplers.BaseSampler``) for one study.
SamplerFactory = Callable[[SamplerRequest], Any]


def builtin_factory(name: str) -> SamplerFactory | None:
    """The built-in sampler called ``name``, as a factory; None for a name it does not know."""
    if name not in SAMPLERS:
        return None
    return lambda request: make_sampler(request.name, request.seed, request.encoding, request.feasible)


def unknown(name: str) -> KtuneError:
    return KtuneError(f"unknown sampler {name!r}",
                      hint=f"use one of {', '.join(SAMPLERS)}, or a name a plugin supplies through the "
                           "pytest_ktune_sampler hook")


def missing_modules(*names: str) -> list[str]:
    """Those of ``names`` that cannot be imported here, in the order given (found without importing them)."""
    import importlib.util

    return [n for n in names if importlib.util.find_spec(n) is None]


def make_sampler(name: str, seed: int | None, encoding: Encoding,
                 feasible: Sequence[Mapping[str, Value]] = ()) -> Any:
    """The named sampler; ``bo`` proposes among ``feasible``, the key's configurations."""
    import optuna

    if name == "bo":
        from pytest_ktune.tuner.bo import BoSampler

        return BoSampler(encoding, feasible, seed)
    if name == "tpe":
        # Four random points (the warm starts among them) before the model takes over: kernel spaces
        # are small, and on landscapes recorded on an H200 this reached 3 % of the optimum in fewer
        # trials than Optuna's default of ten, or than random search (benchmarks/bench_tuner.py).
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True, n_startup_trials=4,
                                          multivariate=True)
    if name in ("random", "grid"):
        # grid: every feasible point is enqueued in order; the sampler only fills in after that.
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        if not encoding.numeric:
            raise KtuneError("CMA-ES needs a numeric space, and this one has non-numeric parameters",
                             hint="use --ktune-sampler tpe, or make every parameter's values numbers")
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise KtuneError("the CMA-ES sampler needs the cmaes package",
                             hint="pip install cmaes") from None
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":
        missing = missing_modules("torch", "scipy")
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise KtuneError(f"the GP sampler needs {' and '.join(missing)}, which {verb} not installed",
                             hint=f"pip install {' '.join(missing)}, or use --ktune-sampler tpe")
        return optuna.samplers.GPSampler(seed=seed)
    raise unknown(name)
