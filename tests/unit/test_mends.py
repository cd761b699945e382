"""Defects mended by issue 27, one test each: what a user saw go wrong, and now sees go right."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_ktune.core import discover
from pytest_ktune.core.store import Record, Store, Timing
from pytest_ktune.run.session import Session


def test_a_compile_error_reason_is_scrubbed_of_control_characters() -> None:
    # A compiler's coloured output (ANSI escapes, a NUL, a bell) must not reach the terminal, the
    # JUnit XML or the study's report through a failed trial's reason.
    from pytest_ktune.measure.worker import _compile_reason

    reason = _compile_reason("-D BLOCK=64\nkernel.cl:3: \x1b[31merror\x1b[0m: bad\x00 token\x07")
    assert reason == "compile error: kernel.cl:3: [31merror [0m: bad token"
    assert not any(ord(ch) < 32 for ch in reason)


def _record(target: str) -> Record:
    return Record(target=target, device="dev", key={"N": 1}, params={"BLOCK": 64})


def test_the_baseline_message_counts_the_records_it_wrote(tmp_path: Path) -> None:
    # Two baselines queued, one of them for a key this run also tuned (the tune writes that one):
    # the message counts the one record the gate wrote, not both.
    path = tmp_path / "ktune-params.json"
    kept, tuned = _record("a.py::kept"), _record("a.py::tuned")
    fake: Any = SimpleNamespace(updates={kept.ident: kept, tuned.ident: tuned}, store=Store(path), store_error=None,
                                _tuned={tuned.ident}, settings=SimpleNamespace(write_mode="none", params_path=path))
    line = Session._finish_baselines(fake)
    assert line == f"wrote 1 baseline record(s) to {path}"
    assert set(Store.load(path).records) == {kept.ident}


def test_the_gate_and_the_tuner_round_timings_alike() -> None:
    t = Timing.of(1.23456789e-5, 2.0e-7, (1.2e-5, 1.3e-5), 20, 123.45678)
    assert t == Timing(median_us=12.3457, iqr_us=0.2, ci_low_us=12.0, ci_high_us=13.0, samples=20, gbps=123.457)
    assert Timing.of(1e-5, 0.0, (1e-5, 1e-5), 3, None).gbps is None


@pytest.mark.parametrize(("text", "found"), [
    ("import ktune\nx = ktune.target(name='x')(f)\n", True),
    ("import pytest_ktune as k\n@k.target(name='x')\ndef f(): ...\n", True),
    ("from ktune import target\n@target(name='x')\ndef f(): ...\n", True),
    ("from ktune import target as t\nx = t(name='x')(f)\n", True),
    ("from pytest_ktune import Space, target\n", True),
    ("from ktune import *\n", True),
    ("import ktune\nspace = ktune.Space(BLOCK=[64])\n", False),  # uses ktune, defines no target
    ("import numpy\nmy.target(ktune)\n", False),  # the words, not ktune's target
    ("# ktune.target( in a comment\n", False),
    ("import ktune\ndef broken(:\n", True),  # importing it says what is wrong
])
def test_collection_finds_targets_however_target_is_imported(text: str, found: bool) -> None:
    assert discover.defines_targets(text) is found


def test_templatize_says_when_its_own_modules_fail_to_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # A broken install (a module of the package that does not import) is an error, not the agent
    # quietly switched off.
    from pytest_ktune.agent import _templatize

    real_import = builtins.__import__

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pytest_ktune.agent._proposer":
            raise ImportError("cannot import name 'make_proposer'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "pytest_ktune.agent._proposer", raising=False)
    monkeypatch.setattr(builtins, "__import__", refuse)
    with pytest.raises(ImportError, match="make_proposer"):
        _templatize._agent_proposer(None, Path())


def test_the_rule_based_templater_keeps_the_runs_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without a model the agent stage runs the rule-based templater, under the run's wall-time and
    # memory budgets (--ktune-agent-wall, --ktune-agent-memory), not the defaults.
    from pytest_ktune import backends
    from pytest_ktune.agent import _loop
    from pytest_ktune.agent._client import AgentError

    seen: dict[str, float] = {}

    def budget(wall_s: float, memory_mb: int) -> Any:
        seen.update(wall_s=wall_s, memory_mb=memory_mb)
        raise AgentError("stopped here by the test")

    monkeypatch.setattr(_loop, "Budget", budget)
    monkeypatch.setattr(backends, "create", lambda name: SimpleNamespace(device=SimpleNamespace()))
    bench: Any = SimpleNamespace(base=SimpleNamespace(name="scale"), backend="opencl")
    result = _loop.run_stage(bench, _loop.AgentSettings(model=None, wall_s=7.0, memory_mb=123))
    assert result.status == "error" and "stopped here by the test" in result.message
    assert seen == {"wall_s": 7.0, "memory_mb": 123}
