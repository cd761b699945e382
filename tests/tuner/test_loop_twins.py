"""Two processes sharing one study propose the same configuration at once: one times it, the other is
answered from it, even where the lower-numbered trial's parameters reach the storage after the other's
(an ask writes them one at a time). Optuna's in-memory storage, shared by two threads, stands for the
database two processes share."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import optuna
import pytest

from pytest_ktune.core.space import Space
from pytest_ktune.core.target import Target
from pytest_ktune.measure.worker import CandidatePool
from pytest_ktune.tuner import loop as loop_module
from pytest_ktune.tuner.encoding import Encoding
from pytest_ktune.tuner.loop import StudyLoop
from pytest_ktune.tuner.settings import TuneSettings

CONFIG = {"BLOCK": 128, "REPEAT": 8}


def _loop(study: optuna.Study) -> StudyLoop:
    target = cast(Target, SimpleNamespace(space=Space(BLOCK=[64, 128, 256], REPEAT=[1, 8, 32])))
    return StudyLoop(study, Encoding(target), target, key={}, pool=cast(CandidatePool, None),
                     settings=TuneSettings(trials=4))


def test_the_lower_numbered_trial_times_it_though_its_parameters_are_written_last() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    first, second = _loop(study), _loop(study)
    enc = first.enc
    # Process A's ask: the trial exists, one parameter of two written so far.
    a: Any = study.ask()
    a.suggest_categorical("BLOCK", enc.distributions["BLOCK"].choices)
    # Meanwhile process B asks and gets the same configuration, all its parameters written.
    study.enqueue_trial(CONFIG)
    b = study.ask(enc.distributions)
    assert b.number > a.number and enc.decode(b.params) == CONFIG

    def finish_a() -> None:  # A's ask ends a moment later, with the same configuration
        time.sleep(0.3)
        study._storage.set_trial_param(a._trial_id, "REPEAT", enc.distributions["REPEAT"].to_internal_repr(8),
                                       enc.distributions["REPEAT"])

    # A's BLOCK must be 128 for the two to be twins: set it so whatever the draw was.
    study._storage.set_trial_param(a._trial_id, "BLOCK", enc.distributions["BLOCK"].to_internal_repr(128),
                                   enc.distributions["BLOCK"])
    thread = threading.Thread(target=finish_a)
    thread.start()
    ck = first._class(CONFIG)
    # B waits for A's parameters and finds A, lower-numbered and running: B does not time it.
    twin = second._twin(b.number, ck)
    thread.join()
    assert twin is not None and twin.number == a.number
    # A finds B running with a higher number: A times it.
    assert first._twin(a.number, ck) is None


def test_a_trial_left_without_parameters_by_a_process_that_died_is_waited_for_only_briefly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_module, "ASK_WAIT_S", 0.2)
    study = optuna.create_study()
    loop = _loop(study)
    study.ask()  # never gets its parameters
    study.enqueue_trial(CONFIG)
    b = study.ask(loop.enc.distributions)
    started = time.monotonic()
    assert loop._twin(b.number, loop._class(CONFIG)) is None
    assert time.monotonic() - started < 2.0
