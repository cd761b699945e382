"""Building blocks of the tuner's tests: kernels whose configurations break in chosen ways, a runner
for the ``ktune`` command, and readers of the studies a tune leaves behind.

Projects are written with the helpers of tests/plugin/_kit.py (``kernels.py`` holds the targets,
the OpenCL sources sit next to it); the targets here reuse its ``scale`` launcher and reference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState
from plugin._kit import scale_target

# -- kernels -------------------------------------------------------------------------------------

# The scale kernel of tests/plugin/_kit.py, with a MODE parameter that picks how it breaks.
MODE_OK, MODE_BAD_SOURCE, MODE_NAN, MODE_OUT_OF_BOUNDS, MODE_HANG, MODE_SLOW = range(6)
PROBE_CL = f"""\
#ifndef MODE
#define MODE {MODE_OK}
#endif
__kernel void scale(__global float* out, __global const float* x, float a, int n) {{
    const int i = get_global_id(0);
    if (i >= n) return;
#if MODE == {MODE_BAD_SOURCE}
    this line is not OpenCL C;
#endif
    float v = x[i] * a;
#if MODE == {MODE_NAN}
    if (i == n / 2) v = NAN;
#endif
#if MODE == {MODE_OUT_OF_BOUNDS}
    out[i + (1L << 40)] = v;  /* four terabytes past the end of the buffer */
#endif
#if MODE == {MODE_HANG}
    volatile int spin = 1;
    while (spin) {{ }}
#endif
#if MODE == {MODE_SLOW}
    float t = v;
    for (int r = 0; r < 256; ++r) t = sin(t);
    if (t == 12345.0f) v = 0.0f;
#endif
    out[i] = v;
}}
"""


def probe_target(name: str = "scale", *, space: str, default: str, cases: str | None = None) -> str:
    """A target running the probe kernel (its ``MODE`` and ``BLOCK`` come from ``space``)."""
    return scale_target(name, source="probe.cl", space=space, default=default, cases=cases)


# A default that is clearly slow (64 rounds of sin() per element) in a space that holds fast points.
SLOW_DEFAULT = "{'BLOCK': 64, 'REPEAT': 64}"


def repeat_target(name: str = "scale", *, repeats: Sequence[int] = (1, 64), blocks: Sequence[int] = (64, 128),
                  default: str = SLOW_DEFAULT, cases: str | None = None) -> str:
    """The scale kernel of _kit with its REPEAT busy work in the space."""
    space = f"BLOCK={list(blocks)}, REPEAT={list(repeats)}"
    return scale_target(name, space=space, default=default, cases=cases)


# -- the ktune command ---------------------------------------------------------------------------


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "KTUNE_PARAMS")}
    env["GIT_CEILING_DIRECTORIES"] = str(root.parent)
    return env


@dataclass(frozen=True)
class Cli:
    """Runs ``ktune SUBCOMMAND ... --root ROOT --backend opencl`` in a fresh interpreter."""

    root: Path

    def argv(self, command: str, *args: str) -> list[str]:
        return [sys.executable, "-m", "pytest_ktune.cli", command, *args, "--root", str(self.root),
                "--backend", "opencl"]

    def run(self, command: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(command, *args), cwd=self.root, env=_env(self.root), capture_output=True,
                              text=True, timeout=timeout, check=False)

    def start(self, command: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(command, *args), cwd=self.root, env=_env(self.root),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    """Wait for ``proc``; its exit code, stdout and stderr. Killed (and the test failed) on a timeout."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{proc.args!r} still ran after {timeout} s\n{out}\n{err}") from None
    return proc.returncode, out, err


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str,
               alive: subprocess.Popen[str] | None = None) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` s, or when ``alive`` exits first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if alive is not None and alive.poll() is not None:
            out, err = alive.communicate()
            raise AssertionError(f"the process ended before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.2)


def interrupt_when(proc: subprocess.Popen[str], condition: Callable[[], bool], *, timeout: float,
                   what: str) -> tuple[int, str, str]:
    """Ctrl-C ``proc`` once ``condition`` holds; its exit code, stdout and stderr (killed if it lingers)."""
    import signal

    try:
        wait_until(condition, timeout=timeout, what=what, alive=proc)
        proc.send_signal(signal.SIGINT)  # to the command alone; its worker ignores SIGINT anyway
        return finish(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


SUMMARY = re.compile(r"^(?P<target>\S+) (?P<key>\S+): best (?P<us>[\d.]+) µs (?P<params>\{.*?\}) after "
                     r"(?P<timed>\d+) timed trials \((?P<infeasible>\d+) infeasible, (?P<failed>\d+) failed\)"
                     r"(?:, and (?P<earlier>\d+) in earlier runs of the study \((?P<asked>\d+) asked in all\))?"
                     r"(?:; trials on (?P<devices>[^;]+))?; "
                     r"(?P<decision>.*); (?P<written>to be delivered \(--write [\w-]+\)|"
                     r"not written \(--no-write\)|not written \(--write none\)); report: (?P<report>.+)$", re.MULTILINE)


def summaries(stdout: str) -> list[dict[str, str]]:
    """The summary line ``ktune tune`` prints per key, split into its fields."""
    return [m.groupdict() for m in SUMMARY.finditer(stdout)]


# -- studies ---------------------------------------------------------------------------------------

Space = Mapping[str, Sequence[Any]]


def journal(root: Path) -> Path:
    return root / ".ktune" / "studies.journal"


def open_journal(root: Path) -> optuna.storages.BaseStorage:
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    return JournalStorage(JournalFileBackend(str(journal(root))))


def studies(storage: str | optuna.storages.BaseStorage) -> dict[str, list[FrozenTrial]]:
    """Every study in ``storage`` (a URL or a storage), by name, with its trials in number order."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = {}
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        out[summary.study_name] = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    return out


def only_study(storage: str | optuna.storages.BaseStorage) -> tuple[str, list[FrozenTrial]]:
    found = studies(storage)
    assert len(found) == 1, sorted(found)
    return next(iter(found.items()))


def timed(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that were timed: complete, and not a copy of an earlier trial's result."""
    return [t for t in trials if t.state == TrialState.COMPLETE and "duplicate" not in t.user_attrs]


def decode(trial: FrozenTrial, space: Space) -> dict[str, Any]:
    """A trial's configuration. The tuner stores the real values (a CMA-ES study: numeric parameters
    as their positions among the sorted values)."""
    out = {}
    for name, raw in trial.params.items():
        positions = isinstance(trial.distributions[name], IntDistribution)
        out[name] = sorted(space[name])[int(raw)] if positions else raw
    return out


def config_text(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True)


# A params file with one record of a target the tests never tune: compared byte for byte before and
# after a command that must not write.
OTHER_RECORD_FILE = json.dumps({
    "format": "pytest-ktune/1",
    "records": [{"target": "elsewhere.py::other", "device": "Some Device [opencl]", "key": {"N": 1},
                 "params": {"BLOCK": 32}}],
}, indent=2, sort_keys=True) + "\n"
