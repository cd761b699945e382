"""The live progress line: silent off a terminal, throttled, cut to the width, with an ETA."""

from __future__ import annotations

import io
import re

import pytest

from pytest_ktune.tuner.progress import Progress


class FakeTTY(io.StringIO):
    """A StringIO that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # shutil.get_terminal_size reads COLUMNS first, whatever the test runner's terminal is.
    monkeypatch.setenv("COLUMNS", "200")


def _lines(out: str) -> list[str]:
    """The successive states of the progress line, without control sequences."""
    return [part.replace("\x1b[K", "") for part in out.split("\r") if part]


def test_silent_on_a_stream_that_is_not_a_terminal() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    with Progress("tune rmsnorm", 3, stream, clock=clock) as progress:
        assert not progress.enabled
        for done in range(1, 4):
            clock.now += 1
            progress.update(done, 5.0, {"BLOCK": 128})
        progress.close("done")
    assert stream.getvalue() == ""


def test_enabled_false_silences_even_a_terminal() -> None:
    stream = FakeTTY()
    progress = Progress("tune", 2, stream, enabled=False)
    progress.update(2, 1.0, None)
    progress.close("finished")
    assert stream.getvalue() == ""


def test_enabled_defaults_to_whether_the_stream_is_a_terminal() -> None:
    assert Progress("x", 1, FakeTTY()).enabled
    assert not Progress("x", 1, io.StringIO()).enabled

    class Closed(io.StringIO):
        def isatty(self) -> bool:
            raise ValueError("I/O operation on closed file")

    assert not Progress("x", 1, Closed()).enabled


def test_draws_carriage_return_lines_with_trial_best_and_eta() -> None:
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("tune rmsnorm", 4, stream, clock=clock)
    clock.now += 2.0
    progress.update(1, 9.5, {"BLOCK": 128, "VEC": 4}, note="compiling")
    out = stream.getvalue()
    assert out.startswith("\r")
    assert out.endswith("\x1b[K")
    assert "\n" not in out
    line = _lines(out)[-1]
    assert line.startswith("tune rmsnorm")
    assert "trial 1/4" in line
    assert "best 9.50 µs (BLOCK=128, VEC=4)" in line
    # 2 s for the first trial, three left.
    assert "ETA 6s" in line
    assert line.endswith("compiling")


def test_eta_is_the_average_time_per_trial_times_the_trials_left() -> None:
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("t", 10, stream, clock=clock)
    clock.now += 30.0
    progress.update(1, None, None)
    clock.now += 90.0
    progress.update(4, None, None)  # 120 s for 4 trials: 30 s each, 6 left
    lines = _lines(stream.getvalue())
    assert "ETA 4m30s" in lines[0]
    assert "ETA 3m00s" in lines[1]
    assert "best" not in lines[1]


def test_a_resumed_study_s_earlier_trials_do_not_shorten_the_eta() -> None:
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("t", 40, stream, clock=clock)
    clock.now += 1.0
    progress.update(21, None, None)  # 20 trials from an earlier run, one new
    clock.now += 20.0
    progress.update(23, None, None)  # two more in 20 s: 10 s each, 17 left
    assert "ETA 2m50s" in _lines(stream.getvalue())[-1]


def test_an_unchanged_line_is_not_redrawn() -> None:
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("t", 3, stream, clock=clock)
    for _ in range(5):
        clock.now += 1.0
        progress.update(3, 2.0, {"B": 1})
    assert len(_lines(stream.getvalue())) == 1


def test_no_eta_before_the_first_trial_or_after_the_last() -> None:
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("t", 2, stream, clock=clock)
    progress.update(0, None, None)
    clock.now += 1
    progress.update(2, 3.0, {"B": 1})
    assert all("ETA" not in line for line in _lines(stream.getvalue()))


def test_redraws_are_throttled_but_the_final_one_is_not() -> None:
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("t", 50, stream, clock=clock)
    for done in range(1, 51):
        clock.now += 0.01  # 100 updates a second
        progress.update(done, float(100 - done), None)
    lines = _lines(stream.getvalue())
    # Half a second of updates at most ten draws a second, plus the final line.
    assert 5 <= len(lines) <= 7
    assert "trial 1/50" in lines[0]
    assert "trial 50/50" in lines[-1]
    assert "best 50.00 µs" in lines[-1]


def test_close_shows_the_last_throttled_state_and_ends_the_line() -> None:
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("t", 10, stream, clock=clock)
    progress.update(1, 5.0, None)
    clock.now += 0.01
    progress.update(2, 4.0, None)  # throttled
    assert "trial 2/10" not in stream.getvalue()
    progress.close("tuned rmsnorm: 4.00 µs")
    out = stream.getvalue()
    assert "trial 2/10" in out
    assert out.endswith("\x1b[K\ntuned rmsnorm: 4.00 µs\n")
    progress.close("again")  # a second close adds nothing
    progress.update(3, 1.0, None)
    assert stream.getvalue() == out


def test_close_before_any_update_prints_only_the_final_message() -> None:
    stream = FakeTTY()
    Progress("t", 3, stream).close("nothing to tune")
    assert stream.getvalue() == "nothing to tune\n"
    stream = FakeTTY()
    Progress("t", 3, stream).close()
    assert stream.getvalue() == ""


def test_the_context_manager_ends_the_line_even_on_an_error() -> None:
    stream = FakeTTY()
    with pytest.raises(RuntimeError), Progress("t", 3, stream) as progress:
        progress.update(1, None, None)
        raise RuntimeError("boom")
    assert stream.getvalue().endswith("\n")


@pytest.mark.parametrize("columns", [20, 41, 80])
def test_lines_are_cut_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    stream, clock = FakeTTY(), FakeClock()
    progress = Progress("tune a kernel with a long name", 100, stream, clock=clock)
    params = {f"PARAM_{i}": i * 1000 for i in range(10)}
    clock.now += 1
    progress.update(3, 12.345, params, note="a note that is long as well")
    (line,) = _lines(stream.getvalue())
    # One column to spare, so that the terminal never wraps.
    assert len(line) == columns - 1
    assert line.endswith("…")
    assert line.startswith("tune a kernel"[: columns - 2])


def test_a_short_line_is_not_padded_or_cut() -> None:
    stream = FakeTTY()
    Progress("t", 2, stream).update(2, None, None)
    assert _lines(stream.getvalue()) == ["t  trial 2/2"]


def test_notes_are_kept_on_one_line() -> None:
    stream = FakeTTY()
    Progress("t", 2, stream).update(1, None, None, note="compile\nerror\r\tat line 3")
    out = stream.getvalue()
    assert out.count("\r") == 1
    assert "\n" not in out
    assert re.search(r"compile error at line 3", out)
