"""A live one-line progress display for long tuning work, silent unless it writes to a terminal."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TextIO

from pytest_ktune.core.text import us as _us

_CLEAR_EOL = "\x1b[K"


MIN_INTERVAL_S = 0.1  # at most ~10 redraws a second: a terminal redrawn faster only flickers


def _is_tty(stream: TextIO) -> bool:
    # Captured or closed streams may lack isatty or raise from it; neither is a terminal.
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _eta(seconds: float) -> str:
    s = round(max(seconds, 0.0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """One status line (trial n/N, best so far, ETA) rewritten in place with ``\\r``.

    Disabled (printing nothing at all) unless told otherwise or the stream is
    a terminal, so logs and captured output never fill with carriage returns.
    """

    def __init__(self, label: str, total: int, stream: TextIO | None = None,
                 enabled: bool | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.total = total
        self.stream: TextIO = sys.stderr if stream is None else stream
        self.enabled = _is_tty(self.stream) if enabled is None else enabled
        self._clock = clock
        self._start = clock()
        self._first: tuple[float, int] | None = None  # (time, done) of the first update
        self._last_draw: float | None = None
        self._last_line: str | None = None
        self._pending: str | None = None  # a line throttled away, drawn at close
        self._drawn = False
        self._closed = False

    def update(self, done: int, best_us: float | None, best_params: Mapping[str, object] | None,
               note: str = "") -> None:
        """Show that ``done`` of ``total`` trials are finished; redraws are throttled, the last one is not."""
        if not self.enabled or self._closed:
            return
        now = self._clock()
        line = self.render(done, best_us, best_params, note, now)
        if self._first is None:
            self._first = (now, done)
        if line == self._last_line:
            self._pending = None
            return
        final = done >= self.total
        if not final and self._last_draw is not None and now - self._last_draw < MIN_INTERVAL_S:
            self._pending = line
            return
        self._draw(line)
        self._last_draw = now

    def render(self, done: int, best_us: float | None, best_params: Mapping[str, object] | None,
               note: str = "", now: float | None = None) -> str:
        """The status line for this state, cut to the terminal's width."""
        parts = [self.label, f"trial {done}/{self.total}"]
        if best_us is not None:
            best = f"best {_us(best_us)} µs"
            if best_params:
                best += " (" + ", ".join(f"{k}={v}" for k, v in best_params.items()) + ")"
            parts.append(best)
        per_trial = self._seconds_per_trial(done, self._clock() if now is None else now)
        if per_trial is not None and done < self.total:
            parts.append(f"ETA {_eta(per_trial * (self.total - done))}")
        if note:
            parts.append(" ".join(note.split()))
        line = "  ".join(p for p in parts if p)
        # One column short of the width: writing the last column makes some terminals wrap.
        width = shutil.get_terminal_size().columns - 1
        if width < 1:
            return ""
        return line if len(line) <= width else line[: width - 1] + "…"

    def _seconds_per_trial(self, done: int, now: float) -> float | None:
        """The average time per finished trial, or None before the first one finishes.

        Measured from the first update once there is progress past it: a resumed
        study's first update already counts trials finished in an earlier run,
        which took no time in this one.
        """
        if self._first is not None:
            t0, d0 = self._first
            if done > d0 and now > t0:
                return (now - t0) / (done - d0)
        return (now - self._start) / done if done > 0 else None

    def close(self, final: str | None = None) -> None:
        """End the status line, then print ``final`` on a line of its own; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        if not self.enabled:
            return
        if self._pending is not None:
            self._draw(self._pending)
        if self._drawn:
            self.stream.write("\n")
        if final is not None:
            self.stream.write(final + "\n")
        self.stream.flush()

    def _draw(self, line: str) -> None:
        self.stream.write(f"\r{line}{_CLEAR_EOL}")
        self.stream.flush()
        self._drawn = True
        self._last_line = line
        self._pending = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
