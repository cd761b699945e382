"""The throwaway PostgreSQL server of tests/postgres.py: SQLAlchemy and Optuna's RDBStorage reach
it, and two processes running trials of one study through it get distinct trial numbers."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from multiprocessing.synchronize import Barrier
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from postgres import PostgresServer, PostgresUnavailable, require_postgres, running_server, service_account

TRIALS_PER_WORKER = 3
WORKERS = 2
JOIN_TIMEOUT_S = 120


def _objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -1.0, 1.0)
    return x * x


def _worker(url: str, study_name: str, seed: int, start: Barrier) -> None:
    # Runs in a spawned process: a new interpreter, its own connections.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(url)
    study = optuna.load_study(study_name=study_name, storage=storage,
                              sampler=optuna.samplers.RandomSampler(seed=seed))
    start.wait(timeout=JOIN_TIMEOUT_S)  # both ask for trials at the same time
    study.optimize(_objective, n_trials=TRIALS_PER_WORKER)


def test_sqlalchemy_connects(postgres_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            database, fsync = connection.execute(
                sqlalchemy.text("SELECT current_database(), current_setting('fsync')")).one()
    finally:
        engine.dispose()
    assert database == postgres_url.rsplit("/", 1)[1]
    assert fsync == "off"


def test_one_study_shared_by_two_processes(postgres_url: str) -> None:
    study_name = f"shared-{uuid.uuid4().hex[:8]}"
    storage = optuna.storages.RDBStorage(postgres_url)  # creates Optuna's tables before the workers start
    optuna.create_study(study_name=study_name, storage=storage, direction="minimize")

    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WORKERS)
    workers = [context.Process(target=_worker, args=(postgres_url, study_name, seed, start))
               for seed in range(WORKERS)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(JOIN_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
    assert [process.exitcode for process in workers] == [0] * WORKERS

    trials = optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False)
    total = WORKERS * TRIALS_PER_WORKER
    assert len(trials) == total
    assert sorted(trial.number for trial in trials) == list(range(total))
    assert all(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials)

    # The rows themselves, as Optuna stored them.
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            rows, numbers = connection.execute(sqlalchemy.text(
                "SELECT count(*), count(DISTINCT t.number) FROM trials t "
                "JOIN studies s ON s.study_id = t.study_id WHERE s.study_name = :name"),
                {"name": study_name}).one()
    finally:
        engine.dispose()
    assert (rows, numbers) == (total, total)


def test_fresh_databases_are_distinct_and_empty(postgres_server: PostgresServer,
                                                postgres_fresh_url: str) -> None:
    other = postgres_server.create_database()
    assert other != postgres_fresh_url
    engine = sqlalchemy.create_engine(postgres_fresh_url)
    try:
        with engine.connect() as connection:
            tables = connection.execute(sqlalchemy.text(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")).scalar_one()
    finally:
        engine.dispose()
    assert tables == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root run hands PostgreSQL to another account")
def test_root_falls_back_to_nobody() -> None:
    """Where there is no 'postgres' account, a root run uses 'nobody' (and adds no account)."""
    try:
        account = service_account(("nobody",))
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    assert account is not None and account.name == "nobody"
    require_postgres(account)
    with running_server(account) as server:
        pid = int((server.data / "postmaster.pid").read_text().split("\n", 1)[0])
        assert Path(f"/proc/{pid}").stat().st_uid == account.uid
        engine = sqlalchemy.create_engine(server.create_database())
        try:
            with engine.connect() as connection:
                assert connection.execute(sqlalchemy.text("SELECT 1")).scalar_one() == 1
        finally:
            engine.dispose()
    assert not server.base.exists()
