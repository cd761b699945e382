"""An interrupted tune keeps what it decided under .ktune/winners/, never in the user's files, and the same
command resumes: the decided keys are delivered without timing them again, the rest are tuned."""

from __future__ import annotations

import json
from pathlib import Path

from plugin._kit import Project, case

from ._tk import OTHER_RECORD_FILE, Cli, interrupt_when, journal, open_journal, repeat_target, studies, summaries, timed

# A quick key (2048 elements), then a slow one (64 to 256 rounds of sin() on 65536): Ctrl-C lands in the second.
TARGET = repeat_target(repeats=(64, 128, 256), blocks=(64, 128), default="{'BLOCK': 64, 'REPEAT': 256}",
                       cases=f"{case(2048, case_id='quick')}, {case(65536, case_id='slow')}")


def kept(root: Path) -> list[dict[str, object]]:
    folder = root / ".ktune" / "winners"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def in_second_key(root: Path) -> bool:
    """The first key decided, and the second key's study has timed a trial."""
    if len(kept(root)) != 1 or not journal(root).exists():
        return False
    return any("N65536" in name and timed(trials) for name, trials in studies(open_journal(root)).items())


def test_an_interrupted_tune_keeps_its_decisions_and_the_rerun_delivers_them(project: Project, cli: Cli) -> None:
    project.write(TARGET)
    project.params_path.write_text(OTHER_RECORD_FILE)
    before = project.params_path.read_bytes()
    argv = ("tune", "--write", "file", "--trials", "3", "--seed", "4")
    tune = cli.start(*argv)
    code, out, err = interrupt_when(tune, lambda: in_second_key(project.path), timeout=180,
                                    what="the second key's first trial")
    assert code == 130, out + err
    # The first key was decided; nothing of it reached the params file (file mode writes at the end).
    (first,) = summaries(out)
    assert first["key"] == "N=2048"
    assert project.params_path.read_bytes() == before
    assert "the 1 key(s) decided before the interruption are kept under .ktune/winners/" in err
    (decision,) = kept(project.path)
    record = decision["record"]
    assert isinstance(record, dict) and record["target"] == "kernels.py::scale" and record["key"] == {"N": 2048}

    again = cli.run(*argv, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed, other = summaries(again.stdout)
    # The decided key: its study resumed with nothing left to time, its decision taken, not timed again.
    assert resumed["key"] == "N=2048" and resumed["timed"] == "0" and resumed["earlier"] == "3"
    assert resumed["decision"] == f"{first['decision']} (decided by an earlier run, kept in .ktune/winners/)"
    assert resumed["params"] == first["params"]
    # The interrupted key: its study resumed where Ctrl-C stopped it, and completed the budget.
    assert other["key"] == "N=65536" and int(other["earlier"] or 0) >= 1
    assert int(other["timed"]) + int(other["earlier"] or 0) == 3
    # Both delivered at the end, beside the record that was there; the kept decisions are forgotten.
    records = {(r["target"], json.dumps(r["key"])): r for r in project.records()}
    assert ("kernels.py::scale", '{"N": 2048}') in records and ("kernels.py::scale", '{"N": 65536}') in records
    assert records[("kernels.py::scale", '{"N": 2048}')]["params"] == record["params"]
    assert len(records) == 3
    assert kept(project.path) == []
