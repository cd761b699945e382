"""``ktune tune TARGET --key NAME=VALUE``, and a space per backend through the tuner and ``ktune record``."""

from __future__ import annotations

import json

from plugin._kit import SPLIT, Project, case, scale_target

from ._tk import Cli, journal, only_study, open_journal, summaries, timed

TWO_KEYS = scale_target(cases=f"{case(4096, case_id='small')}, {case(8192, case_id='big')}",
                        space="BLOCK=[64, 128]")


def test_tune_selects_keys_by_their_dimensions(project: Project, cli: Cli) -> None:
    project.write(TWO_KEYS)
    done = cli.run("tune", "scale", "--key", "N=8192", "--trials", "2", "--seed", "1", "--no-write")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(s["target"], s["key"]) for s in summaries(done.stdout)] == [("scale", "N=8192")]

    wrong = cli.run("tune", "scale", "--key", "N=5", "--no-write")
    assert wrong.returncode == 2
    assert wrong.stderr.splitlines() == [
        "ktune: project . (--root, ini file tox.ini); params ktune-params.json (new)",
        f"error: target scale ({project.path.resolve() / 'kernels.py'}): no case on opencl has a key of N=5",
        "next step: the keys on opencl: scale: N=4096; N=8192"]
    assert wrong.stdout == ""
    bad = cli.run("tune", "scale", "--key", "N8192")
    assert bad.returncode == 2 and "--key 'N8192' is not NAME=VALUE" in bad.stderr


def test_the_tuner_and_record_search_the_backends_own_space(project: Project, cli: Cli) -> None:
    project.write(SPLIT)
    done = cli.run("tune", "split", "--trials", "3", "--seed", "1", "--sampler", "grid", "--write", "file")
    assert done.returncode == 0, done.stdout + done.stderr
    name, trials = only_study(open_journal(project.path))
    assert journal(project.path).is_file() and "split" in name
    assert {tuple(sorted(t.params)) for t in timed(trials)} == {("BLOCK",)}
    assert len(timed(trials)) == 3  # every BLOCK of OpenCL's space, none of read_only
    (record,) = project.records()
    assert set(record["params"]) == {"BLOCK"}

    out = project.path / "split.json"
    recorded = cli.run("record", "split", "--key", "N=4096", "--out", str(out), "--samples", "3")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    head = json.loads(out.read_text())
    assert head["space"] == {"params": {"BLOCK": [64, 128, 256]}, "constraints": []}
    assert sorted(r["params"]["BLOCK"] for r in head["rows"]) == [64, 128, 256]
