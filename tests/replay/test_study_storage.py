"""What a tune leaves in its Optuna storage, read as optuna-dashboard and optuna.visualization read it:
the parameters' real values and a metric name; a study of the earlier encoding (positions) still loads
and goes on; a study made for another space is refused with what to do."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import cases_by_key, key_string
from pytest_ktune.core.space import Space
from pytest_ktune.core.store import target_id
from pytest_ktune.core.target import Target
from pytest_ktune.lab.landscape import Landscape
from pytest_ktune.lab.replay import ReplayPool
from pytest_ktune.measure.worker import WorkerSpec
from pytest_ktune.tuner.encoding import ATTR, METRIC, POSITIONS, Encoding
from pytest_ktune.tuner.settings import TuneContext, TuneSettings
from pytest_ktune.tuner.storage import legacy_study_name, open_storage, study_name
from pytest_ktune.tuner.tune import tune_key

from ._data import RMSNORM, landscape, target


def _tune(tmp_path: Path, t: Target, land: Landscape, *, trials: int, sampler: str = "bo") -> Any:
    """A replayed tune whose study lives where a real one does: the journal under ``tmp_path/.ktune``."""
    def pool(spec: WorkerSpec, *, trial_timeout_s: float) -> ReplayPool:
        return ReplayPool(spec, trial_timeout_s=trial_timeout_s, landscape=land, seed=1)

    settings = TuneSettings(trials=trials, sampler=sampler, seed=1)
    ctx = TuneContext(root=tmp_path, params_path=tmp_path / "ktune-params.json", backend=land.backend,
                      settings=settings, pool_factory=functools.partial(pool), reports=False)
    return tune_key(ctx, t, land.key, cases_by_key(t, land.backend)[key_string(land.key)][1])


def _storage(tmp_path: Path) -> Any:
    return open_storage(None, tmp_path / ".ktune")[0]


def _name(tmp_path: Path, t: Target, land: Landscape) -> str:
    return study_name(target_id(t, tmp_path), land.device_id, land.key)


def _study(tmp_path: Path, t: Target, land: Landscape) -> Any:
    return optuna.load_study(study_name=_name(tmp_path, t, land), storage=_storage(tmp_path))


def test_a_study_holds_the_real_values_and_names_its_metric(tmp_path: Path) -> None:
    t, land = target("rmsnorm"), landscape(RMSNORM)
    _tune(tmp_path, t, land, trials=6)
    study = _study(tmp_path, t, land)
    assert study.metric_names == [METRIC] and study.user_attrs[ATTR] == "values"
    done = [tr for tr in study.trials if tr.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) >= 6
    for trial in done:
        assert trial.params["BLOCK"] in t.space.params["BLOCK"] and trial.params["VEC"] in t.space.params["VEC"]
    # optuna-dashboard shows the block sizes themselves, and names the objective.
    shown = dashboard_api(study, _storage(tmp_path))
    assert shown["objective_names"] == [METRIC]
    blocks = {p["param_external_value"] for tr in shown["trials"] for p in tr["params"] if p["name"] == "BLOCK"}
    assert blocks and blocks <= {str(b) for b in t.space.params["BLOCK"]}
    (space,) = [s for s in shown["union_search_space"] if s["name"] == "BLOCK"]
    assert sorted(int(c["value"]) for c in space["distribution"]["choices"]) == sorted(t.space.params["BLOCK"])


def dashboard_api(study: Any, storage: Any) -> dict[str, Any]:
    """What optuna-dashboard's page loads for the study: its JSON API, called through its WSGI app."""
    from wsgiref.util import setup_testing_defaults

    import optuna_dashboard

    app = optuna_dashboard.wsgi(storage)
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    study_id = storage.get_study_id_from_name(study.study_name)
    environ.update(PATH_INFO=f"/api/studies/{study_id}", REQUEST_METHOD="GET")
    status: list[str] = []
    body = b"".join(app(environ, lambda s, headers, exc=None: status.append(s)))
    assert status == ["200 OK"], body[:500]
    data: dict[str, Any] = json.loads(body)
    return data


def test_a_study_of_the_earlier_encoding_and_name_still_loads_and_goes_on(tmp_path: Path) -> None:
    t, land = target("rmsnorm"), landscape(RMSNORM)
    # As pytest-ktune 0.1 left it: numeric parameters as positions, no encoding attribute, and the
    # long name with "|" in it.
    legacy = legacy_study_name(target_id(t, tmp_path), land.device_id, land.key)
    assert "|" in legacy and legacy != _name(tmp_path, t, land)
    old = optuna.create_study(study_name=legacy, storage=_storage(tmp_path))
    positions = Encoding(t, POSITIONS)
    trial = old.ask(positions.distributions)
    old.tell(trial, 1e6)  # slower than anything: the tune must go on past it
    out = _tune(tmp_path, t, land, trials=4)
    assert out.study == legacy  # resumed under its old name, not started afresh under the new one
    assert [s.study_name for s in optuna.get_all_study_summaries(_storage(tmp_path))] == [legacy]
    study = optuna.load_study(study_name=legacy, storage=_storage(tmp_path))
    assert study.user_attrs[ATTR] == POSITIONS
    assert all(isinstance(d, optuna.distributions.IntDistribution)
               for tr in study.trials for name, d in tr.distributions.items() if name == "BLOCK")
    # The budget counts the study's trial of the earlier run; this run's count does not.
    assert out.earlier == 1 and out.timed == 3 and out.asked == 4
    assert out.best_params["BLOCK"] in t.space.params["BLOCK"]


def test_a_new_study_has_a_short_filesystem_safe_name(tmp_path: Path) -> None:
    t, land = target("rmsnorm"), landscape(RMSNORM)
    out = _tune(tmp_path, t, land, trials=2)
    assert re.fullmatch(r"rmsnorm-[A-Za-z0-9._-]+-[0-9a-f]{10}", out.study) and len(out.study) <= 60
    assert out.study == _name(tmp_path, t, land) and (out.earlier, out.timed) == (0, 2)
    again = _tune(tmp_path, t, land, trials=2)  # resumed: nothing more to time for a budget of 2
    assert (again.study, again.earlier, again.timed) == (out.study, 2, 0)
    assert again.trials_cell() == "0 (+2 earlier)"


def test_a_study_made_for_another_space_is_refused_with_the_next_step(tmp_path: Path) -> None:
    t, land = target("rmsnorm"), landscape(RMSNORM)
    _tune(tmp_path, t, land, trials=2)
    narrower = replace(t, space=Space(**{**t.space.params, "BLOCK": [128, 256]}, constraints=[
        c.text for c in t.space.constraints]))
    with pytest.raises(KtuneError, match="was made for other values of BLOCK") as info:
        _tune(tmp_path, narrower, land, trials=2)
    assert "delete-study" in info.value.hint and "rmsnorm" in info.value.where
