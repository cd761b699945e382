"""Baselines: the note when there is none, what --ktune-update-baseline writes, and the comparison after."""

from __future__ import annotations

import hashlib
import json
import re

import pytest_ktune

from ._kit import Project, add_target, case, scale_target, summary_rows, table_header

# One device: it is named once, above the table ("on opencl / DEVICE"), not on every row.
TABLE_HEADER = ["target", "case", "time µs", "baseline", "ratio", "GB/s", "% copy BW", "verdict"]

# Two cases share the key N=4096, so they share one record; the third has a record of its own.
SCALE = scale_target(
    cases=f"{case(4096, case_id='small')}, {case(4096, case_id='half', a=0.5)}, "
          f"{case(16384, case_id='large')}",
    extra="\n    bytes_moved=lambda x: 2 * x.nbytes,",
)


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_without_a_baseline_the_perf_items_pass_with_a_note(project: Project) -> None:
    project.write()
    result = project.run()
    result.assert_outcomes(passed=4)
    rows = summary_rows(result)
    assert set(rows) == {("add", "n4096"), ("scale", "small")}
    assert {row[-1] for row in rows.values()} == {"no baseline"}
    assert {row[3] for row in rows.values()} == {"-"}
    result.stdout.fnmatch_lines([
        "2 case(s) have no baseline on this machine: run with --ktune-update-baseline to record them "
        "in the params file",
    ])
    assert not project.params_path.exists()


def test_update_baseline_writes_a_stable_file_that_the_next_run_compares_against(project: Project) -> None:
    project.write(SCALE, add_target())
    recorded = project.run("--ktune-update-baseline")
    recorded.assert_outcomes(passed=8)
    recorded.stdout.fnmatch_lines(["ktune: wrote 3 baseline record(s) to *ktune-params.json"])
    assert {row[-1] for row in summary_rows(recorded).values()} == {"recorded"}

    text = project.params_path.read_text()
    data = json.loads(text)
    # Sorted keys, two-space indent, records in (target, device, key) order: small diffs.
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert data["format"] == "pytest-ktune/1"
    records = data["records"]
    assert [(r["target"], r["key"]) for r in records] == [
        ("kernels.py::add", {"N": 4096}),
        ("kernels.py::scale", {"N": 16384}),  # keys sort as text: "N=16384" < "N=4096"
        ("kernels.py::scale", {"N": 4096}),
    ]
    devices = {r["device"] for r in records}
    assert len(devices) == 1 and devices.pop().endswith(" [opencl]")

    scale_hash = hashlib.sha256((project.path / "scale.cl").read_text().encode()).hexdigest()[:16]
    # The timings are kept under the identity of the machine that measured them, one for the whole run:
    # the device's id, then what tells it from other machines of that name (for PoCL, the host's CPU).
    machines = {m for r in records for m in r["baseline"]["machines"]}
    assert len(machines) == 1
    machine = machines.pop()
    assert machine.startswith(records[0]["device"] + " | ") and "CPUs" in machine
    for r in records:
        base = r["baseline"]
        assert "timings" not in base  # only records from before machine identities hold unnamed timings
        assert r["params"] == base["params"] == {"BLOCK": 64}
        assert base["commit"] is None  # not in a git repository
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", base["date"])
        assert base["ktune_version"] == pytest_ktune.__version__
        for timing in base["machines"][machine].values():
            assert 0 < timing["ci_low_us"] <= timing["median_us"] <= timing["ci_high_us"]
            assert timing["samples"] > 0 and timing["iqr_us"] >= 0
    by_key = {(r["target"], r["key"]["N"]): r["baseline"] for r in records}
    timings = {k: b["machines"][machine] for k, b in by_key.items()}
    assert set(timings["kernels.py::scale", 4096]) == {"small", "half"}
    assert set(timings["kernels.py::scale", 16384]) == {"large"}
    assert by_key["kernels.py::scale", 4096]["source_hash"] == scale_hash
    assert by_key["kernels.py::scale", 4096]["source_path"] == "scale.cl"
    assert by_key["kernels.py::add", 4096]["source_path"] == "add.cl"
    assert timings["kernels.py::add", 4096]["n4096"]["gbps"] is None  # no bytes_moved
    assert timings["kernels.py::scale", 16384]["large"]["gbps"] > 0

    compared = project.run()
    compared.assert_outcomes(passed=8)
    at = table_header(compared)
    header = compared.stdout.lines[at]
    assert re.split(r"\s{2,}", header.strip()) == TABLE_HEADER
    assert compared.stdout.lines[at - 1].startswith("on opencl / ")
    rows = summary_rows(compared)
    assert set(rows) == {("add", "n4096"), ("scale", "small"), ("scale", "half"), ("scale", "large")}
    for (target, case_id), row in rows.items():
        key = 16384 if case_id == "large" else 4096
        timing = timings[f"kernels.py::{target}", key][case_id]
        assert abs(_number(row[3]) - timing["median_us"]) <= 0.01 * timing["median_us"]
        assert abs(_number(row[4]) - _number(row[2]) / _number(row[3])) < 0.05 * _number(row[4]) + 0.01
        assert row[-1] in {"ok", "drift", "faster"}, row
        if target == "scale":
            assert _number(row[5]) > 0 and row[6].endswith("%")
        else:
            assert row[5] == row[6] == "-"
    compared.stdout.no_fnmatch_line("*no baseline*")
    # A run that only compares leaves the file alone.
    assert project.params_path.read_text() == text
