"""A child process that runs kernels for its parent, so that a crash, a hang or a poisoned GPU
context ends the child, never the parent: started with ``spawn`` (no CUDA state is inherited), it
answers over a pipe, and the parent waits for each answer with a deadline.

Used by the tuner's worker pool (``measure.worker``) and by the gate's measurement process
(``measure.service``).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

from pytest_ktune.core.errors import KtuneError


class ChildProcess:
    """One child at a time: ``start`` it, ``send`` requests, ``recv`` answers within a deadline; after
    a crash or a hang, ``death`` says what happened and ``kill`` clears the way for a fresh one."""

    def __init__(self, main: Callable[..., None], args: tuple[Any, ...], *, name: str,
                 start_timeout_s: float = 120.0) -> None:
        self.main = main
        self.args = args
        self.name = name
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self) -> Any:
        """Start the child and return its first message: ``("ready", ...)``; a KtuneError saying why
        when it sends anything else first, ends, or says nothing within ``start_timeout_s``."""
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=self.main, args=(child, *self.args), daemon=True, name=self.name)
        self._proc.start()
        child.close()
        self._conn = parent
        self.starts += 1
        msg = self.recv(self.start_timeout_s)
        if msg is None or msg[0] != "ready":
            if msg:
                why = str(msg[1])
            elif self._proc.is_alive():
                why = f"it did not answer within {self.start_timeout_s:g} s"
            else:
                why = f"it exited with code {self._proc.exitcode} before it was ready"
            self.kill()
            raise ChildStartError(why)
        return msg

    def send(self, msg: Any) -> None:
        self._conn.send(msg)

    def recv(self, timeout: float) -> Any:
        """The child's next message; None when it timed out (the child still runs) or ended."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self._conn.poll(min(left, 0.2)):
                try:
                    return self._conn.recv()
                except (EOFError, OSError):
                    break
            if not self._proc.is_alive() and not self._conn.poll(0):
                break
        # The pipe closed: the child is ending. Wait for its exit status, so that death() tells a
        # crash from a hang (the pipe can close before the process is reaped).
        self._proc.join(5)
        return None

    def death(self, timeout_s: float, what: str = "the worker process") -> str:
        """Why no answer came: a hang (still running after ``timeout_s``), a signal, an exit code."""
        code = self._proc.exitcode if self._proc is not None else None
        if code is None:
            return f"no answer within {timeout_s:g} s (the kernel hangs, or is far too slow)"
        if code < 0:
            return f"{what} died from signal {-code} (a crash in the kernel or the driver)"
        return f"{what} exited with code {code}"

    def kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._proc = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Ask the child to stop, then make sure it has."""
        if self._proc is not None and self._proc.is_alive() and self._conn is not None:
            try:
                self._conn.send(("stop",))
                self._proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        self.kill()


class ChildStartError(KtuneError):
    """The child process could not start; the message says why."""


def ignore_interrupts() -> None:
    """In a child: a Ctrl-C reaches the whole process group; the parent decides, and stops the child."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
