"""The tuner's pure parts, without a worker or a device: the parameter encoding, configuration keys,
the A/B decision, URL redaction, the settings' checks and the warm-start list."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.storages.journal import JournalFileBackend, JournalStorage

from pytest_ktune import Case, KtuneError, Space, Tensor, target
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.redact import redact
from pytest_ktune.core.space import Value, config_key
from pytest_ktune.core.store import Record, Store, target_id
from pytest_ktune.measure.ab import FASTER, MAX_SAMPLES
from pytest_ktune.measure.worker import ABOutcome, CaseTime
from pytest_ktune.tuner.decide import decide
from pytest_ktune.tuner.encoding import POSITIONS, VALUES, Encoding
from pytest_ktune.tuner.settings import TuneSettings
from pytest_ktune.tuner.tune import warm_starts


def _launch(kernel: Any, x: Any) -> Any:
    return x


def _reference(x: np.ndarray) -> np.ndarray:
    return x


# Never compiled or run: only its space, default and file matter here.
TARGET = target(
    name="unit", sources={"opencl": "unit.cl"},
    space=Space(BLOCK=[256, 64, 128], VEC=[4, 1, 2], ALPHA=[0.5, 0.25], LAYOUT=["row", "col"], FAST=[True, False],
                constraints=["N % (BLOCK * VEC) == 0"]),
    default={"BLOCK": 128, "VEC": 1, "ALPHA": 0.5, "LAYOUT": "row", "FAST": False},
    key=lambda x: {"N": x.shape[0]},
    cases=[Case(x=Tensor((512,)))],
    reference=_reference,
)(_launch)

NUMERIC_TARGET = target(
    name="numeric", sources={"opencl": "unit.cl"}, space=Space(BLOCK=[128, 64], VEC=[1, 2]),
    default={"BLOCK": 64, "VEC": 1}, key=lambda x: {"N": x.shape[0]}, cases=[Case(x=Tensor((512,)))],
    reference=_reference,
)(_launch)

ROOT = Path(__file__).resolve().parent
DEVICE = "Unit Device [opencl]"
KEY = {"N": 512}


def config(**changes: Value) -> dict[str, Value]:
    return {**TARGET.default, **changes}


# -- the encoding ------------------------------------------------------------------------------


def test_studies_store_the_parameters_real_values() -> None:
    enc = Encoding(TARGET)
    assert enc.mode == VALUES
    assert enc.values == {"BLOCK": (64, 128, 256), "VEC": (1, 2, 4), "ALPHA": (0.25, 0.5),
                          "LAYOUT": ("row", "col"), "FAST": (True, False)}
    assert enc.distributions["BLOCK"] == CategoricalDistribution([64, 128, 256])
    assert enc.distributions["ALPHA"] == CategoricalDistribution([0.25, 0.5])
    assert enc.distributions["LAYOUT"] == CategoricalDistribution(["row", "col"])
    assert enc.distributions["FAST"] == CategoricalDistribution([True, False])  # bools are not numbers here
    point = config(BLOCK=256, VEC=1, ALPHA=0.25, LAYOUT="col", FAST=True)
    assert enc.encode(point) == point == enc.decode(point)


def test_cmaes_studies_store_numeric_parameters_as_their_positions() -> None:
    enc = Encoding.for_sampler(TARGET, "cmaes")
    assert enc.mode == POSITIONS and Encoding.for_sampler(TARGET, "bo").mode == VALUES
    assert enc.distributions["BLOCK"] == IntDistribution(0, 2)
    assert enc.distributions["VEC"] == IntDistribution(0, 2)
    assert enc.distributions["ALPHA"] == IntDistribution(0, 1)
    assert enc.distributions["LAYOUT"] == CategoricalDistribution(["row", "col"])
    assert not enc.numeric
    assert Encoding(NUMERIC_TARGET).numeric

    encoded = enc.encode(config(BLOCK=256, VEC=1, ALPHA=0.25, LAYOUT="col", FAST=True))
    assert encoded == {"BLOCK": 2, "VEC": 0, "ALPHA": 0, "LAYOUT": "col", "FAST": True}
    # The order of the values survives: a larger block is a larger position.
    assert [enc.encode(config(BLOCK=b))["BLOCK"] for b in (64, 128, 256)] == [0, 1, 2]


@pytest.mark.parametrize("mode", [VALUES, POSITIONS])
def test_every_point_round_trips_through_the_encoding(mode: str) -> None:
    enc = Encoding(TARGET, mode)
    for point in TARGET.space.points():
        encoded = enc.encode(point)
        for name, raw in encoded.items():
            dist = enc.distributions[name]
            assert dist._contains(dist.to_internal_repr(raw)), (name, raw)
        assert enc.decode(encoded) == point
        assert config_key(enc.decode(encoded)) == config_key(point)


@pytest.mark.parametrize("mode", [VALUES, POSITIONS])
def test_configurations_round_trip_through_a_stored_study(tmp_path: Path, mode: str) -> None:
    """Enqueued as the tuner does, asked back from a journal on disk, decoded: the same values and types."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    enc = Encoding(TARGET, mode)
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "studies.journal")))
    study = optuna.create_study(study_name="unit", storage=storage)
    points = list(TARGET.space.points())[::7]
    for point in points:
        study.enqueue_trial(enc.encode(point))
    asked = []
    for _ in points:
        trial = study.ask(enc.distributions)
        asked.append(enc.decode(trial.params))
        study.tell(trial, 1.0)
    assert asked == points
    assert [{k: type(v) for k, v in a.items()} for a in asked] == [{k: type(v) for k, v in p.items()}
                                                                   for p in points]
    reloaded = optuna.load_study(study_name="unit", storage=storage).get_trials(deepcopy=False)
    assert [enc.decode(t.params) for t in reloaded] == points


# -- configuration keys --------------------------------------------------------------------------


def test_config_key_is_stable_and_tells_values_apart() -> None:
    assert config_key({"VEC": 2, "BLOCK": 64}) == config_key({"BLOCK": 64, "VEC": 2}) == '{"BLOCK": 64, "VEC": 2}'
    assert config_key({"A": "x", "B": 0.5, "C": True}) == '{"A": "x", "B": 0.5, "C": true}'
    keys = {config_key({"A": v}) for v in (1, "1", True, 2)}
    assert len(keys) == 4
    assert config_key({"BLOCK": 64, "VEC": 2}) != config_key({"BLOCK": 64, "VEC": 4})


# -- the A/B decision ----------------------------------------------------------------------------


def timing(case_id: str, center_us: float, *, seed: int, spread: float = 0.01, n: int = 30) -> CaseTime:
    rng = random.Random(seed)
    samples = tuple(center_us * 1e-6 * (1 + rng.uniform(-spread, spread)) for _ in range(n))
    return CaseTime(case_id, statistics.median(samples), samples, (min(samples), max(samples)),
                    max(samples) - min(samples))


def ab(current: list[tuple[str, float]], candidate: list[tuple[str, float]], *, spread: float = 0.01) -> ABOutcome:
    return ABOutcome("ok", current=tuple(timing(c, us, seed=i, spread=spread) for i, (c, us) in enumerate(current)),
                     candidate=tuple(timing(c, us, seed=100 + i, spread=spread)
                                     for i, (c, us) in enumerate(candidate)))


def test_a_clear_win_is_accepted() -> None:
    accepted, why = decide(ab([("a", 10.0), ("b", 20.0)], [("a", 8.0), ("b", 16.0)]))
    assert accepted
    assert why.startswith("x1.2") and why.endswith(" faster than the current parameters in same-run A/B")


def test_a_tie_is_kept() -> None:
    accepted, why = decide(ab([("a", 10.0)], [("a", 10.0)]))
    assert not accepted
    assert why.startswith("the best found is not faster beyond noise in same-run A/B (x")
    assert why.endswith("); kept the current")


def test_a_gain_below_one_percent_is_kept_even_when_significant() -> None:
    accepted, why = decide(ab([("a", 10.0)], [("a", 9.95)], spread=0.0001))
    assert not accepted and "not faster beyond noise" in why


def test_faster_in_total_but_slower_on_one_case_is_kept() -> None:
    accepted, why = decide(ab([("big", 100.0), ("small", 10.0)], [("big", 50.0), ("small", 12.0)]))
    assert not accepted
    assert why == "the best found is slower on small in same-run A/B; kept the current"


def test_a_case_stopped_early_says_so() -> None:
    out = ab([("big", 100.0), ("small", 10.0)], [("big", 50.0), ("small", 12.0)])
    accepted, why = decide(replace(out, stopped=(MAX_SAMPLES, FASTER)))
    assert not accepted
    assert why == "the best found is slower on small in same-run A/B (stopped early on 1 of 2 cases); kept the current"


def test_a_failed_ab_keeps_the_current_parameters() -> None:
    assert decide(ABOutcome("failed", "no answer within 60 s")) == (
        False, "the A/B check failed (no answer within 60 s); the current parameters stay")


# -- redaction -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql+psycopg2://tuner:s3cret@db:5432/optuna", "postgresql+psycopg2://tuner:***@db:5432/optuna"),
    ("postgresql://tuner:pa:ss/wd@db/optuna", "postgresql://tuner:***@db/optuna"),
    ("postgresql://:s3cret@db/optuna", "postgresql://:***@db/optuna"),
    ("postgresql://tuner@db/optuna", "postgresql://tuner@db/optuna"),
    ("postgresql://db:5432/optuna", "postgresql://db:5432/optuna"),
    ("sqlite:///studies.db", "sqlite:///studies.db"),
    ("sqlite:////data/a@b/studies.db", "sqlite:////data/a@b/studies.db"),
    # An '@' after the host (here in a query) is not where the credentials end.
    ("postgresql://tuner:s3cret@db/optuna?application_name=ci@runner",
     "postgresql://tuner:***@db/optuna?application_name=ci@runner"),
    ("postgresql://tuner:s3cret@db?application_name=ci@runner",
     "postgresql://tuner:***@db?application_name=ci@runner"),
    ("postgresql://tuner@db/optuna?application_name=ci@runner",
     "postgresql://tuner@db/optuna?application_name=ci@runner"),
    # An '@' left unencoded in a password: none of the password shows.
    ("postgresql://tuner:p@ss@db/optuna", "postgresql://tuner:***@db/optuna"),
])
def test_redact_hides_the_password_only(url: str, shown: str) -> None:
    assert redact(url) == shown


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "message", "hint"), [
    ({"trials": 0}, "a budget of 0 trials tunes nothing", "give --ktune-trials 1 or more"),
    ({"trials": -1}, "a budget of -1 trials tunes nothing", "give --ktune-trials 1 or more"),
    ({"timeout_s": 0.0}, "a time budget of 0 s tunes nothing", "give a positive number of seconds, or none"),
    ({"timeout_s": -2.5}, "a time budget of -2.5 s tunes nothing", "give a positive number of seconds, or none"),
    ({"sampler": "anneal"}, "unknown sampler 'anneal'", "use one of bo, tpe, random, grid, cmaes, gp"),
    ({"trial_timeout_s": 0.0}, "the per-trial timeout must be positive", "e.g. 60 (seconds)"),
])
def test_settings_check_names_the_mistake(changes: dict[str, Any], message: str, hint: str) -> None:
    with pytest.raises(KtuneError) as info:
        TuneSettings(**changes).check()
    assert (info.value.message, info.value.hint) == (message, hint)


def test_settings_that_tune_something_pass() -> None:
    TuneSettings().check()
    TuneSettings(trials=1, timeout_s=0.5, sampler="grid", trial_timeout_s=0.1).check()


# -- warm starts ---------------------------------------------------------------------------------


def record(params: dict[str, Value], *, n: int, device: str = DEVICE, name: str | None = None) -> Record:
    tid = name or target_id(TARGET, ROOT)
    return Record(target=tid, device=device, key={"N": n}, params=params)


def test_warm_starts_in_order_valid_and_once_each(tmp_path: Path) -> None:
    current = config(BLOCK=64, VEC=2)
    near = config(BLOCK=64, VEC=4, LAYOUT="col")
    far = config(BLOCK=128, VEC=2)
    elsewhere = config(BLOCK=256, VEC=1, FAST=True)
    records = [
        record(current, n=512),                                # this key on this device: the current params
        record(near, n=2048),                                  # another key, this device
        record(config(BLOCK=256, VEC=4), n=1024),              # invalid for N=512 (1024 does not divide it)
        record(dict(TARGET.default), n=4096),                  # the default again
        record(near, n=8192),                                  # the same as another record
        record(elsewhere, n=512, device="Other Device [opencl]"),  # this key, another device
        record(far, n=256, device="Other Device [opencl]"),
        record(config(BLOCK=64, VEC=1), n=512, name="other.py::unit"),  # another target
    ]
    store = Store(tmp_path / "ktune-params.json", records)
    starts = warm_starts(TARGET, store, tid=target_id(TARGET, ROOT), device=DEVICE, key=KEY, current=current)
    assert starts == [  # nearest first: this key on another device (1), then twice the key here and half
        ("default", dict(TARGET.default), True),  # of it on another device (2 each: this device first)
        ("current", current, True),
        ("recorded for Other Device [opencl] N=512", elsewhere, True),
        (f"recorded for {DEVICE} N=2048", near, True),
        ("recorded for Other Device [opencl] N=256", far, True),
    ]
    assert len({config_key(c) for _, c, _ in starts}) == len(starts)
    assert all(TARGET.space.valid(c, KEY) for _, c, _ in starts)


def test_warm_starts_mark_records_of_other_element_types_as_far(tmp_path: Path) -> None:
    # A key's dimensions that name a dtype are its element types: a record of a key with the same
    # ones is near (timed before most priors), one with others far (timed after them).
    tid = target_id(TARGET, ROOT)
    key = {"N": 512, "dtype": "float16"}
    same = config(BLOCK=64, VEC=2)
    other = config(BLOCK=64, VEC=4)
    store = Store(tmp_path / "ktune-params.json", [
        Record(target=tid, device=DEVICE, key={"N": 1024, "dtype": "float16"}, params=same),
        Record(target=tid, device=DEVICE, key={"N": 2048, "dtype": "float32"}, params=other),
    ])
    starts = warm_starts(TARGET, store, tid=tid, device=DEVICE, key=key, current=dict(TARGET.default))
    assert [(c, near) for _, c, near in starts] == [(dict(TARGET.default), True), (same, True), (other, False)]


def test_warm_starts_drop_a_current_that_is_invalid_for_the_key() -> None:
    bad = config(BLOCK=256, VEC=4)
    assert not TARGET.space.valid(bad, KEY)
    starts = warm_starts(TARGET, None, tid=target_id(TARGET, ROOT), device=DEVICE, key=KEY, current=bad)
    assert starts == [("default", dict(TARGET.default), True)]
    same = warm_starts(TARGET, None, tid=target_id(TARGET, ROOT), device=DEVICE, key=KEY,
                        current=dict(TARGET.default))
    assert same == [("default", dict(TARGET.default), True)]
    assert key_string({"N": 512}) == "N=512"
