"""Bad input to the tuner: each is a clear message, and the params file is left byte for byte as it
was — a budget of nothing, a space this device cannot run at all, a storage that cannot be reached,
a second tune of a study that is being tuned, and Ctrl-C in the middle of a tune (which then resumes)."""

from __future__ import annotations

import re
import signal

import pytest
from plugin._kit import Project, case, failure_section, scale_target

from ._tk import (
    OTHER_RECORD_FILE,
    Cli,
    config_text,
    decode,
    finish,
    interrupt_when,
    journal,
    open_journal,
    repeat_target,
    studies,
    summaries,
    timed,
    wait_until,
)


@pytest.fixture
def before(project: Project) -> bytes:
    """A params file with an unrelated record, written before the test runs anything."""
    project.params_path.write_text(OTHER_RECORD_FILE)
    return project.params_path.read_bytes()


@pytest.mark.parametrize(("option", "message"), [
    ("--ktune-trials=0", "a budget of 0 trials tunes nothing"),
    ("--ktune-trials=-3", "a budget of -3 trials tunes nothing"),
    ("--ktune-tune-timeout=0", "a time budget of 0 s tunes nothing"),
    ("--ktune-trial-timeout=0", "the per-trial timeout must be positive"),
])
def test_an_empty_budget_is_a_usage_error(project: Project, before: bytes, option: str, message: str) -> None:
    project.write()
    result = project.run("--ktune-tune", "--ktune-write=file",
                         option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}", "next step: *"])
    assert project.params_path.read_bytes() == before


def test_an_empty_budget_on_the_command_line(project: Project, cli: Cli, before: bytes) -> None:
    project.write()
    done = cli.run("tune", "--write", "file", "--trials", "0")
    assert done.returncode == 2
    assert done.stderr.splitlines()[1:] == ["error: a budget of 0 trials tunes nothing",
                                        "next step: give --trials 1 or more"]
    assert project.params_path.read_bytes() == before
    assert not (project.path / ".ktune").exists()


def test_a_space_the_device_cannot_run_at_all(project: Project, before: bytes) -> None:
    # Every block is above PoCL's largest work-group (4096 work-items on its CPU device); more blocks
    # than the tuner evaluates at once, so that it has to notice that nothing can ever be timed.
    blocks = [8192 << i for i in range(6)]
    project.write(scale_target(space=f"BLOCK={blocks}", default="{'BLOCK': 8192}"))
    result = project.run("--ktune-tune", "--ktune-write=file",
                         "--ktune-trials=3", "--ktune-seed=2", "-m", "ktune_tune")
    result.assert_outcomes(failed=1)
    text = " ".join(failure_section(result, "scale::tune[N4096]").split())
    assert "target scale (" in text
    assert "kernels.py): no configuration could be timed for key N4096: " in text
    # The three most common reasons, each seen once: the warm start (the default) first.
    reasons = re.findall(r"1x kernel scale launched with (\d+) threads per block; this device allows at most "
                         r"4096 for it", text)
    assert len(reasons) == 3 and reasons[0] == "8192" and len(set(reasons)) == 3
    assert "next step: fix the failures shown, or constrain the space to what this device can run" in text
    assert project.params_path.read_bytes() == before


def test_a_storage_that_cannot_be_reached(project: Project, before: bytes) -> None:
    project.write(repeat_target())
    url = "postgresql+psycopg2://nobody:hunter2@127.0.0.1:1/x"
    result = project.run("--ktune-tune", "--ktune-write=file",
                         "--ktune-trials=3", f"--ktune-storage={url}", "-m", "ktune_tune")
    result.assert_outcomes(failed=1)
    text = failure_section(result, "scale::tune[N4096]")
    assert "cannot reach the study storage postgresql+psycopg2://nobody:***@127.0.0.1:1/x: OperationalError" in text
    assert "next step: check the URL, that the database server runs and accepts this user" in text
    assert "hunter2" not in result.stdout.str() + result.stderr.str()
    assert project.params_path.read_bytes() == before
    assert not journal(project.path).exists()


# Slow points only (32 to 256 rounds of sin() per element), so that a tune takes a while.
SLOW = {"BLOCK": (64, 128, 256), "REPEAT": (32, 64, 128, 256)}


def slow_target(n: int, *more_cases: str) -> str:
    cases = ", ".join([case(n, case_id="slow"), *more_cases])
    return repeat_target(repeats=SLOW["REPEAT"], blocks=SLOW["BLOCK"], default="{'BLOCK': 64, 'REPEAT': 32}",
                         cases=cases)


def complete_trials(cli: Cli) -> int:
    if not journal(cli.root).exists():
        return 0
    return sum(len(timed(trials)) for trials in studies(open_journal(cli.root)).values())


def test_a_second_tune_of_the_same_study_is_refused(project: Project, cli: Cli, before: bytes) -> None:
    project.write(slow_target(65536))
    first = cli.start("tune", "--write", "file", "--trials", "12")
    try:
        wait_until(lambda: complete_trials(cli) >= 1, timeout=120, what="timed trial of the first tune",
                   alive=first)
        second = cli.run("tune", "--write", "file", "--trials", "12", timeout=120)
        assert first.poll() is None, "the first tune ended before the second was refused"
    finally:
        first.send_signal(signal.SIGINT)
        finish(first)
    assert second.returncode == 1, second.stdout + second.stderr
    assert summaries(second.stdout) == []
    lines = second.stderr.splitlines()
    assert lines[0].startswith("ktune: project . (--root")
    assert re.fullmatch(rf"error: another tune of the study 'scale-N65536-[0-9a-f]{{10}}' is running "
                        rf"\(pid {first.pid}, since \d{{4}}-\d\d-\d\dT[\d:]+Z\)", lines[1]), lines
    # The ktune command names its own flag (--storage), not pytest's (--ktune-storage).
    assert lines[2] == ("next step: wait for it to finish, or join it on purpose with a shared "
                        "--storage and `ktune worker`")
    assert project.params_path.read_bytes() == before


def test_ctrl_c_saves_the_study_and_the_same_command_resumes_it(project: Project, cli: Cli, before: bytes) -> None:
    project.write(slow_target(16384, case(2048, case_id="small")))
    budget = 6
    tune = cli.start("tune", "--write", "file", "--trials", str(budget), "--seed", "4")
    code, out, err = interrupt_when(tune, lambda: complete_trials(cli) >= 2, timeout=120, what="two timed trials")

    # It stopped at once: the second key was not started, and nothing was written.
    assert code == 130, out + err
    assert summaries(out) == []
    (said,) = (line for line in err.splitlines() if "interrupted after" in line)
    saved_in = re.escape(str(journal(project.path.resolve())))
    assert re.fullmatch(rf"ktune: target scale \(.+kernels\.py\): interrupted after \d timed trials; nothing was "
                        rf"written\. The study 'scale-N16384-[0-9a-f]{{10}}' is saved in {saved_in}: "
                        r"rerun the same command to resume it\.", said)
    assert project.params_path.read_bytes() == before
    (name, first_trials), = studies(open_journal(project.path)).items()
    assert name.startswith("scale-N16384-")
    first_timed = {t.number: t.value for t in timed(first_trials)}
    assert 2 <= len(first_timed) < budget

    again = cli.run("tune", "--write", "file", "--trials", str(budget), "--seed", "4")
    assert again.returncode == 0, again.stdout + again.stderr
    resumed, other = summaries(again.stdout)
    assert (resumed["key"], other["key"]) == ("N=16384", "N=2048")
    # The counts as asked: this run timed the rest of the budget; the earlier run's trials are said apart.
    assert int(resumed["timed"]) == budget - len(first_timed)
    assert (resumed["earlier"], resumed["asked"]) == (str(len(first_timed)), str(budget))
    assert other["earlier"] is None and other["timed"] == str(budget)
    trials = studies(open_journal(project.path))[name]
    done = timed(trials)
    # The earlier trials are still there, with their times, and were not timed again.
    assert {t.number: t.value for t in done if t.number in first_timed} == first_timed
    assert len(done) == budget
    configs = [config_text(decode(t, SLOW)) for t in done]
    assert len(set(configs)) == budget
    assert project.params_path.read_bytes() != before  # the finished tune writes
