"""Where studies live (a journal file under .ktune/, or a shared database), and one local tune of a study at a time."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.redact import redact
from pytest_ktune.core.store import now_utc
from pytest_ktune.core.text import first_line as _first_line

MEMORY = ":memory:"  # an in-memory study storage, for replays (nothing is saved)


def open_storage(url: str | None, scratch: Path) -> tuple[Any, str]:
    """The Optuna storage and how to name it in messages."""
    import optuna

    if url == MEMORY:
        return optuna.storages.InMemoryStorage(), "memory"
    if url is None:
        scratch.mkdir(parents=True, exist_ok=True)
        path = scratch / "studies.journal"
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(path))), str(path)
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
            break
        except Exception as exc:
            if attempt < SCHEMA_ATTEMPTS and _schema_race(exc):
                time.sleep(0.2 * attempt)
                continue
            raise KtuneError(f"cannot reach the study storage {redact(url)}: {type(exc).__name__}: "
                             f"{_first_line(str(exc))}",
                             hint="check the URL, that the database server runs and accepts this user, and "
                                  "that its driver is installed (pip install 'pytest-ktune[postgres]')") from None
    return storage, redact(url)


SCHEMA_ATTEMPTS = 5


def _schema_race(exc: Exception) -> bool:
    """Whether ``exc`` is another process creating Optuna's tables at the same moment (a coordinator
    and its workers started together on an empty database): the next attempt finds them made."""
    try:
        from sqlalchemy.exc import IntegrityError, ProgrammingError
    except ImportError:
        return False
    return isinstance(exc, (IntegrityError, ProgrammingError))


@contextlib.contextmanager
def study_lock(scratch: Path, study: str) -> Iterator[None]:
    """Only one local tune of a study at a time (workers that join on purpose use a database)."""
    import fcntl

    folder = scratch / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (hashlib.sha256(study.encode()).hexdigest()[:16] + ".lock")
    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise KtuneError(f"another tune of the study {study!r} is running ({holder})",
                             hint="wait for it to finish, or join it on purpose with a shared "
                                  "--ktune-storage and `ktune worker`") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}, since {now_utc()}")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def study_name(tid: str, device: str, key: Mapping[str, Any]) -> str:
    return f"{tid}|{device}|{key_string(key)}"
