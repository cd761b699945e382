"""The ``ktune tune`` command on a throwaway project: tunes, prints one summary line per key, writes
the params file (or leaves it byte for byte alone with --no-write), and refuses unknown targets."""

from __future__ import annotations

import ast
from pathlib import Path

from plugin._kit import Project, add_target

from ._tk import OTHER_RECORD_FILE, Cli, repeat_target, summaries


def test_tune_prints_the_summary_and_writes(project: Project, cli: Cli) -> None:
    project.write(repeat_target(), add_target())
    done = cli.run("tune", "--write", "file", "scale", "--trials", "4", "--seed", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = summaries(done.stdout)
    assert line["target"] == "scale" and line["key"] == "N=4096"
    assert line["timed"] == "4" and line["infeasible"] == "0" and line["failed"] == "0"
    assert line["decision"].endswith("faster than the current parameters in same-run A/B")
    assert line["written"] == "params file updated"
    best = ast.literal_eval(line["params"])
    assert best["REPEAT"] == 1
    report = Path(line["report"])
    assert report.is_file() and report.parent == project.path / ".ktune" / "reports"

    # Only the target named was tuned; its record holds the best, with the tune's details.
    (record,) = project.records()
    assert record["target"] == "kernels.py::scale" and record["key"] == {"N": 4096}
    assert record["params"] == best == record["baseline"]["params"]
    assert record["tuned"]["trials"] == 4 and record["tuned"]["sampler"] == "bo"
    assert float(line["us"]) > 0


def test_no_write_leaves_the_params_file_byte_identical(project: Project, cli: Cli) -> None:
    project.write(repeat_target())
    project.params_path.write_text(OTHER_RECORD_FILE)
    before = project.params_path.read_bytes()
    done = cli.run("tune", "--write", "file", "--trials", "3", "--seed", "3", "--no-write")
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = summaries(done.stdout)
    assert line["written"] == "not written (--no-write)"
    assert project.params_path.read_bytes() == before
    assert Path(line["report"]).is_file()  # the study and its report are still kept


def test_an_unknown_target_is_refused_with_the_known_ones(project: Project, cli: Cli) -> None:
    project.write()  # the scale and add targets of _kit
    project.params_path.write_text(OTHER_RECORD_FILE)
    before = project.params_path.read_bytes()
    done = cli.run("tune", "--write", "file", "sacle")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [f"error: no target named 'sacle' under {project.path.resolve()}",
                                        "next step: known targets: add, scale"]
    assert project.params_path.read_bytes() == before
    assert not (project.path / ".ktune").exists()
