"""The params file as a running process sees it: read once, and again only when it changes on disk.

A production call must not walk the filesystem or parse JSON. ``ParamsFile`` is found once (by the rule of
``core.paths``) and read once; afterwards a call only compares the clock with the next check, and the file's
identity (modification time, size and inode) is looked at no more than once every ``CHECK_INTERVAL_S``
seconds. A changed file is read again and its ``generation`` goes up, which tells the callers that cached
what it said to look again. ``reload()`` checks at once.

A file that was edited into something unreadable, or removed, while the process runs keeps the records read
before in use, with one ``KtuneWarning`` per change: a serving process must not fall back to untuned
parameters because someone is editing a file. The first read of a damaged file has nothing to keep, and
runs the defaults, with the same warning.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneWarning, StoreError
from pytest_ktune.core.store import Record, Store

#: At most this often (seconds) a process looks at whether its params file changed.
CHECK_INTERVAL_S = 1.0

Stamp = tuple[int, int, int]
_NEVER = object()


def _stamp(path: Path) -> Stamp | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ParamsFile:
    """One params file's records, as this process last read them."""

    def __init__(self, path: Path, interval: float | None = None) -> None:
        self.path = path
        self.interval = CHECK_INTERVAL_S if interval is None else interval
        self.generation = 0
        self.store: Store | None = None
        self._stamp: Stamp | None = None
        self._warned: object = _NEVER  # the stamp last warned about (None: a file that is gone)
        self.next_check = 0.0  # time.monotonic() of the next look at the file (``due``)
        self._lock = threading.Lock()
        self._read_first()

    def check_every(self, seconds: float) -> None:
        """Look at the file at most every ``seconds`` from now on (0: at every call)."""
        self.interval = seconds
        self.next_check = time.monotonic() + seconds

    def due(self) -> bool:
        """Whether the next check of the file is due (the only thing a call does most of the time)."""
        return time.monotonic() >= self.next_check

    def find(self, target: str, device: str, key: Mapping[str, Any]) -> Record | None:
        """The record for this target, device and key in the file as last read; None where there is none."""
        store = self.store
        return None if store is None else store.find(target, device, key)

    def _read_first(self) -> None:
        self._stamp = _stamp(self.path)
        self.next_check = time.monotonic() + self.interval
        if self._stamp is None:
            return
        try:
            self.store = Store.load(self.path)
        except StoreError as exc:
            self._warn(f"{exc}\nUsing the default parameters until the file is fixed.")

    def refresh(self, *, force: bool = False) -> bool:
        """Read the file again if it changed since the last read; whether what it says changed."""
        with self._lock:
            self.next_check = time.monotonic() + self.interval
            stamp = _stamp(self.path)
            if stamp == self._stamp and not force:
                return False
            if stamp is None:
                if self.store is None:
                    self._stamp = None
                    return False
                if force:  # an explicit reload follows the disk: no file, no records
                    self.store, self._stamp = None, None
                    self.generation += 1
                    return True
                self._warn_once(stamp, f"{self.path}: the params file is gone; the parameters read before stay in "
                                       "use (restore it, or call ktune.reload() to run the defaults)", force)
                return False
            try:
                store = Store.load(self.path)
            except StoreError as exc:
                kept = "the parameters read before stay in use" if self.store is not None else \
                    "the default parameters stay in use"
                self._warn_once(stamp, f"{exc}\nThe params file changed while this process runs and cannot be read: "
                                       f"{kept}.", force)
                return False
            self._stamp = stamp
            self.store = store
            self.generation += 1
            return True

    def _warn_once(self, stamp: Stamp | None, message: str, again: bool) -> None:
        if again or stamp != self._warned:
            self._warned = stamp
            self._warn(message)

    @staticmethod
    def _warn(message: str) -> None:
        warnings.warn(message, KtuneWarning, stacklevel=2)


_FILES: dict[Path, ParamsFile] = {}
_FILES_LOCK = threading.Lock()


def watch(path: Path) -> ParamsFile:
    """The process-wide ``ParamsFile`` of ``path`` (an absolute path), read on first use."""
    found = _FILES.get(path)
    if found is None:
        with _FILES_LOCK:
            found = _FILES.get(path)
            if found is None:
                found = _FILES[path] = ParamsFile(path)
    return found


def reload_all() -> None:
    """Check every params file this process has read, at once, and read again those that changed."""
    for pf in list(_FILES.values()):
        pf.refresh(force=True)
