"""Guard regions around every buffer a check hands a kernel, checked after the run.

Where the backend offers ``guarded_empty`` (both built-in ones do), each input a check uploads and each
output the target's function makes with ``kernel.empty`` lies in the middle of a larger allocation, with
``GUARD_BYTES`` before and after it filled with a pattern. After the run the guards must hold their
pattern byte for byte: a kernel that wrote past either end of a buffer fails, naming the buffer and the
side. The pattern is made to show in results too: for floats it cycles NaN, a large positive and a
large negative value, for integers the extremes of the type, so a kernel whose output depends on what
it read past an end (a sum, a max, a min, an index) disagrees with the reference. A read whose value is
never used cannot show this way: the checking tools (Oclgrind, compute-sanitizer; ``measure.tools``)
see those, and run with guards off (``KTUNE_GUARD_BYTES=0``) so that they see each buffer's true bounds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_ktune.backends.base import Backend, GuardedArray, copy_of, guarded_empty
from pytest_ktune.core.dtypes import dtype_family
from pytest_ktune.core.errors import KtuneError, MismatchError

GUARD_BYTES = 4096
#: Bytes of each guard; 0 turns the guards off.
ENV = "KTUNE_GUARD_BYTES"


class GuardError(MismatchError):
    """A kernel that wrote outside a buffer it was given."""


def guard_bytes() -> int:
    """The guard size this process uses: ``KTUNE_GUARD_BYTES``, else ``GUARD_BYTES``."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return GUARD_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise KtuneError(f"{ENV}={raw!r} is not a number of bytes", hint=f"set {ENV} to 0 (off) or e.g. 4096") from None
    return max(0, value)


def pattern(dtype: Any, nbytes: int) -> bytes:
    """``nbytes`` of guard pattern for a buffer of ``dtype`` (see the module docstring)."""
    dt = np.dtype(dtype)
    if dtype_family(dt) == "f" and dt.itemsize >= 2:
        big = {2: 2.0 ** 14, 4: 2.0 ** 126, 8: 2.0 ** 1022}.get(dt.itemsize, 2.0 ** 14)
        cycle = np.array([np.nan, big, -big], dtype=np.float64).astype(dt)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        cycle = np.array([info.max, info.min if dt.kind == "i" else info.max - 1], dtype=dt)
    else:
        cycle = np.frombuffer(b"\xa5\x5a", dtype=np.uint8)
    raw = cycle.tobytes()
    return (raw * (nbytes // len(raw) + 1))[:nbytes]


@dataclass(frozen=True)
class _Watched:
    name: str
    buffer: GuardedArray
    front: bytes
    back: bytes


class Guards:
    """The guarded buffers of one checked run: made by ``upload`` and ``output``, checked by ``check``."""

    def __init__(self, backend: Backend, nbytes: int) -> None:
        self.backend = backend
        self.nbytes = nbytes
        self._watched: list[_Watched] = []
        self._outputs = 0

    @classmethod
    def for_backend(cls, backend: Backend) -> Guards | None:
        """Guards for ``backend``, or None where it cannot guard or guards are off."""
        n = guard_bytes()
        if n <= 0 or not callable(getattr(backend, "guarded_empty", None)):
            return None
        return cls(backend, n)

    def _guarded(self, name: str, shape: Sequence[int], dtype: Any) -> GuardedArray | None:
        buf = guarded_empty(self.backend, shape, dtype, self.nbytes)
        if buf is None:
            return None
        front = pattern(dtype, buf.guard_bytes)
        back = pattern(dtype, buf.guard_bytes)
        buf.write_guards(front, back)
        self._watched.append(_Watched(name, buf, front, back))
        return buf

    def upload(self, name: str, host: np.ndarray) -> Any:
        """``host`` on the device, guarded (plainly, where it cannot be)."""
        buf = self._guarded(f"input {name}", tuple(host.shape), host.dtype)
        if buf is None:
            return self.backend.to_device(host)
        buf.set(host)
        return buf.array

    def copy(self, name: str, device: Any) -> Any:
        """A guarded device copy of the device array ``device`` (a plain copy, where it cannot be guarded)."""
        buf = self._guarded(f"input {name}", tuple(device.shape), device.dtype)
        if buf is None:
            return copy_of(self.backend, device)
        buf.copy_from(device)
        return buf.array

    def output(self, shape: tuple[int, ...], dtype: Any, poison: bool) -> Any:
        """An output the target's function asked for (``kernel.empty``), guarded and poisoned."""
        name = f"output {self._outputs} (the kernel.empty{tuple(shape)} call number {self._outputs + 1})"
        self._outputs += 1
        buf = self._guarded(name, shape, dtype)
        if buf is None:
            return self.backend.empty(shape, dtype, poison=poison)
        if poison:
            buf.poison()
        return buf.array

    def check(self, case_id: str, where: str) -> None:
        """Raise GuardError if the run changed any guard."""
        problems = []
        for w in self._watched:
            front, back = w.buffer.read_guards()
            for side, got, want in (("before the start of", front, w.front), ("past the end of", back, w.back)):
                if got != want:
                    changed = [i for i in range(len(want)) if got[i] != want[i]]
                    reach = len(want) - changed[0] if side.startswith("before") else changed[-1] + 1
                    problems.append(f"{w.name}: {len(changed)} byte(s) written {side} the buffer, as far as "
                                    f"{reach} bytes from it")
        if problems:
            raise GuardError(f"case {case_id}: the kernel wrote outside its buffers: " + "; ".join(problems[:4]),
                             where=where, hint="guard the accesses at the edges (the tail of a row, the last "
                                               "block), or constrain the space to the shapes the kernel handles")

    @property
    def buffers(self) -> int:
        return len(self._watched)
