"""Where studies live (a journal file under .ktune/, or a shared database), and one local tune of a study at a time."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import key_label, key_string
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


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def study_name(tid: str, device: str, key: Mapping[str, Any]) -> str:
    """The name of the study of a target (its id), device and key, and of its report's files: short,
    filesystem-safe and the same on every run: the target's name and the key, readable, then a hash
    of the exact id, device and key that keeps apart the studies the readable part does not
    (``rmsnorm-H4096-T1-float16-3f2a9c01d4``)."""
    ordered = {str(k): key[k] for k in sorted(key, key=str)}
    readable = _UNSAFE.sub("-", f"{tid.rpartition('::')[2]}-{key_label(ordered)}")
    readable = re.sub(r"\.{2,}", ".", readable).strip("-._")[:48].rstrip("-._")
    canonical = json.dumps([tid, device, ordered], sort_keys=True, default=str)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:10]
    return f"{readable}-{digest}" if readable else digest


def legacy_study_name(tid: str, device: str, key: Mapping[str, Any]) -> str:
    """The name studies had before 0.2 (``kernels/rmsnorm.py::rmsnorm|DEVICE|H=4096,T=1``): still
    opened where a storage holds one (``resolve_study_name``), so that a tune resumes it."""
    return f"{tid}|{device}|{key_string(key)}"


def resolve_study_name(storage: Any, tid: str, device: str, key: Mapping[str, Any]) -> str:
    """The study's name in ``storage``: the one it already holds under the legacy name, else
    ``study_name``."""
    name = study_name(tid, device, key)
    for candidate in (name, legacy_study_name(tid, device, key)):
        try:
            storage.get_study_id_from_name(candidate)
        except KeyError:
            continue
        return candidate
    return name
