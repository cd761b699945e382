"""``ktune tune --autotune``: keys tuned already are skipped, unless their kernel's source has changed
since they were tuned."""

from __future__ import annotations

from plugin._kit import Project

from ._tk import Cli, repeat_target, summaries


def test_autotune_skips_tuned_keys_and_retunes_after_a_source_change(project: Project, cli: Cli) -> None:
    project.write(repeat_target())
    first = cli.run("tune", "--write", "file", "scale", "--trials", "3", "--seed", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(summaries(first.stdout)) == 1

    again = cli.run("tune", "--autotune", "--write", "file", "scale", "--trials", "3", "--seed", "3")
    assert again.returncode == 0, again.stdout + again.stderr
    assert summaries(again.stdout) == []
    assert "scale N=4096: already tuned on " in again.stdout

    cl = project.path / "scale.cl"
    cl.write_text(cl.read_text() + "\n/* a changed source */\n")
    changed = cli.run("tune", "--autotune", "--write", "file", "scale", "--trials", "3", "--seed", "3")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "the source has changed since, tuning again" in changed.stdout
    (line,) = summaries(changed.stdout)
    assert line["target"] == "scale" and line["written"] == "to be delivered (--write file)"

    # The new entry is for the new source: the next --autotune skips the key again.
    last = cli.run("tune", "--autotune", "--write", "file", "scale", "--trials", "3", "--seed", "3")
    assert last.returncode == 0, last.stdout + last.stderr
    assert summaries(last.stdout) == [] and "already tuned on " in last.stdout
