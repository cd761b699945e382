"""The example project of this repository, run by pytest with the plugin in a fresh process, on the
OpenCL backend (PoCL's CPU device where there is no GPU). It is copied first, so that nothing of the
repository is written to."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"

# Small cases of both targets: enough to exercise baselines without timing the whole project.
FEW = "T64-H4096-float32 or T16-I14336-float32"

# One device: it is named once, above the table ("on opencl / DEVICE"), not on every row. The GFLOP/s
# columns of the targets that declare flops= follow in a table of their own, so neither is wider than 120.
TABLE_HEADER = ["target", "case", "time µs", "baseline", "ratio", "GB/s", "% copy BW", "verdict"]
RATE_HEADER = ["target", "case", "GFLOP/s", "% FMA peak", "bound"]
FLOPS_TARGETS = {"conv2d", "fused_add_rmsnorm", "gelu_tanh_and_mul", "merge_attn_states", "rmsnorm", "rotary_neox",
                 "silu_and_mul"}  # the example's targets that declare flops=


def copy_example(tmp_path: Path, *, with_params: bool = True) -> Path:
    dest = tmp_path / "example_project"
    skip = [".ktune", "__pycache__", ".pytest_cache"] + ([] if with_params else ["ktune-params.json"])
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(*skip))
    return dest


def run_pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "KTUNE_PARAMS")}
    env["GIT_CEILING_DIRECTORIES"] = str(cwd)  # not inside any repository: no commit is recorded
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--ktune", "--ktune-backend=opencl", "example_project",
         "-p", "no:cacheprovider", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def item_outcomes(out: str) -> dict[str, str]:
    """``-v`` lines: item (as shown, relative to where pytest runs) -> PASSED / FAILED / SKIPPED / ERROR."""
    return dict(re.findall(r"^(example_project/kernels/\S+) (PASSED|FAILED|SKIPPED|ERROR)", out,
                           flags=re.MULTILINE))


def table(out: str, which: int = 0) -> tuple[list[str], dict[tuple[str, str], list[str]]]:
    """A table of the ktune summary (``which``: 0 the timed cases, 1 their GFLOP/s): its header cells, and
    its rows by (target, case)."""
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if re.fullmatch(r"=+ ktune summary =+", line)))
    at = [i for i in range(start + 1, len(lines)) if lines[i].startswith("target ")][which]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[at + 1])]
    rows = {}
    for line in lines[at + 2:]:
        if not line.strip() or line.startswith(("=", "ktune:")):
            break
        cells = [line[a:b].strip() for a, b in spans]
        rows[(cells[0], cells[1])] = cells
    return re.split(r"\s{2,}", lines[at].strip()), rows


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def test_the_example_project_passes_on_opencl(tmp_path: Path) -> None:
    before = snapshot(EXAMPLE)
    copy_example(tmp_path)
    proc = run_pytest(tmp_path, "-v", "-rs")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert re.search(r"^ktune: backend opencl on ", out, flags=re.MULTILINE), out

    outcomes = item_outcomes(out)
    passed = {k for k, v in outcomes.items() if v == "PASSED"}
    assert set(outcomes.values()) <= {"PASSED", "SKIPPED"}, outcomes
    for target in ("rmsnorm", "silu_and_mul", "conv2d"):
        correct = {k.split("::correct")[1] for k in passed if f"::{target}::correct[" in k}
        perf = {k.split("::perf")[1] for k in passed if f"::{target}::perf[" in k}
        assert correct and correct == perf, (target, correct, perf)
    # Cases declared for CUDA only are skipped here, saying so.
    skipped = [k for k, v in outcomes.items() if v == "SKIPPED"]
    if skipped:
        assert "case declared for cuda only, not opencl" in out

    header, rows = table(out)
    assert header == TABLE_HEADER
    timed = {(k.split("::")[1], k.split("[", 1)[1].rstrip("]")) for k in passed if "::perf[" in k}
    assert set(rows) == timed
    assert re.search(r"^on opencl / \S", out, flags=re.MULTILINE), out  # the device, once above the table
    for row in rows.values():
        assert float(row[2].replace(",", "")) > 0
        # Every example target declares bytes_moved; a MoE router's few hundred bytes: a small GB/s.
        assert row[5] != "-" and float(row[5]) >= 0 and row[6].endswith("%")
        if row[0] in ("rmsnorm", "silu_and_mul"):
            assert float(row[5]) > 0
    rate_header, rates = table(out, 1)
    assert rate_header == RATE_HEADER
    assert {k for k in rates} == {k for k in rows if k[0] in FLOPS_TARGETS}
    for row in rates.values():  # flops=: GFLOP/s, the fraction of the multiply-add peak, the roofline side
        assert float(row[2]) > 0 and row[3].endswith("%") and row[4] in ("memory", "compute"), row
    # The example's names are whole (they are within the summary's caps), and the notes under the table
    # wrap at 120 columns.
    assert not any("…" in cell for row in rows.values() for cell in row[:2]), rows
    summary = out.split(" ktune summary ", 1)[1].split("\n=", 1)[0].splitlines()
    table_end = next((i for i in range(2, len(summary)) if not summary[i].strip()), len(summary))
    notes = summary[table_end:]
    assert all(len(line) <= 120 for line in notes), notes
    assert all(len(line) <= 120 for line in summary), summary  # the tables too
    assert snapshot(EXAMPLE) == before, "the run wrote into the repository's example project"


def _key_paths(value: Any, prefix: str = "") -> list[str]:
    """Every object key of a JSON document, with its path, in file order."""
    if isinstance(value, list) and value and isinstance(value[0], tuple):  # an object, as pairs
        paths = []
        for k, v in value:
            paths.append(f"{prefix}/{k}")
            paths += _key_paths(v, f"{prefix}/{k}")
        return paths
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _key_paths(v, f"{prefix}[{i}]")]
    return []


def _structure(text: str) -> list[str]:
    return _key_paths(json.loads(text, object_pairs_hook=list))


def test_baselines_recorded_from_the_example_project_pass_the_gate(tmp_path: Path) -> None:
    project = copy_example(tmp_path, with_params=False)
    params = project / "ktune-params.json"

    recorded = run_pytest(tmp_path, "-k", FEW, "--ktune-update-baseline")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "ktune: wrote 2 baseline record(s) to " in recorded.stdout
    text = params.read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert [(r["target"], r["key"]) for r in data["records"]] == [
        ("kernels/rmsnorm.py::rmsnorm", {"H": 4096, "T": 64, "dtype": "float32"}),
        ("kernels/silu_and_mul.py::silu_and_mul", {"I": 14336, "T": 16, "dtype": "float32"}),
    ]
    for r in data["records"]:
        assert r["params"] == r["baseline"]["params"]
        assert r["baseline"]["commit"] is None
        (timings,) = r["baseline"]["machines"].values()  # one machine recorded them
        assert list(timings) == [
            "T64-H4096-float32" if r["target"].endswith("rmsnorm") else "T16-I14336-float32"]

    gated = run_pytest(tmp_path, "-k", FEW, "-v")
    assert gated.returncode == 0, gated.stdout + gated.stderr
    outcomes = item_outcomes(gated.stdout)
    assert len(outcomes) == 4 and set(outcomes.values()) == {"PASSED"}, outcomes
    header, rows = table(gated.stdout)
    assert header == TABLE_HEADER
    assert set(rows) == {("rmsnorm", "T64-H4096-float32"), ("silu_and_mul", "T16-I14336-float32")}
    for row in rows.values():
        assert row[4] != "-" and row[-1] in {"ok", "drift", "faster"}, row
    assert params.read_text() == text

    # Recording the same cases again changes numbers and dates, never the order of anything.
    again = run_pytest(tmp_path, "-k", FEW, "--ktune-update-baseline")
    assert again.returncode == 0, again.stdout + again.stderr
    new = params.read_text()
    assert _structure(new) == _structure(text)
    assert new == json.dumps(json.loads(new), indent=2, sort_keys=True) + "\n"
