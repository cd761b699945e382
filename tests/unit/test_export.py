"""``ktune export``: the tuned parameters of every target, device and key as a deterministic C++ header (which
a C++ program compiles against and looks its parameters up in) and as JSON.

g++ comes from Debian's packages (``.ci/run`` installs it where it is missing). Without it the C++ test skips,
except under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ktune.cli import main

from . import _prod

CPU = "pthread-AMD EPYC (Portable Computing Language) [opencl]"
GPU = "NVIDIA H200 [cuda]"


def _record(target: str, device: str, n: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"target": f"prodexp.py::{target}", "device": device, "key": {"N": n}, "params": params}


RECORDS = [
    _record("scale", GPU, 100, {"SCALE": 5, "BLOCK": 32}),
    _record("scale", CPU, 100, {"SCALE": 3, "BLOCK": 64}),
    _record("scale", GPU, 4096, {"SCALE": 3, "BLOCK": 32}),
    _record("addto", GPU, 100, {"SCALE": 2, "BLOCK": 32}),
    {"target": "gone.py::old", "device": GPU, "key": {"N": 1}, "params": {"B": 1}},
]


def _project(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    sys.modules.pop("prodexp", None)  # each project imports its own prodexp.py
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "kernels.cl").write_text(_prod.KERNELS_CL)
    (tmp_path / "kernels.cu").write_text("// not compiled here\n")
    (tmp_path / "prodexp.py").write_text(_prod.MODULE)
    _prod.write_params(tmp_path / "ktune-params.json", records)
    return tmp_path


def _export(root: Path, *extra: str) -> int:
    return main(["export", "--root", str(root), *extra])


def test_the_export_is_deterministic_and_holds_every_target_device_and_key(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = _project(tmp_path / "a", RECORDS)
    assert _export(root, "--out", str(root / "k.h")) == 0
    assert "gone.py::old is in ktune-params.json, but no such target" in capsys.readouterr().err
    other = _project(tmp_path / "b", list(reversed(RECORDS)))
    assert _export(other, "--out", str(other / "k.h")) == 0
    header = (root / "k.h").read_text()
    assert header == (other / "k.h").read_text()
    assert str(tmp_path) not in header
    assert _export(root, "--format", "json", "--out", str(root / "k.json")) == 0
    data = json.loads((root / "k.json").read_text())
    targets = {t["name"]: t for t in data["targets"]}
    assert sorted(targets) == ["addto", "cuda_only", "scale"]
    assert targets["scale"]["default"] == {"SCALE": 2, "BLOCK": 64} and targets["scale"]["key"] == ["N"]
    got = {(e["device"], e["key"]["N"]): e["params"] for e in targets["scale"]["entries"]}
    assert got == {(GPU, 100): {"SCALE": 5, "BLOCK": 32}, (CPU, 100): {"SCALE": 3, "BLOCK": 64},
                   (GPU, 4096): {"SCALE": 3, "BLOCK": 32}}
    assert targets["cuda_only"]["entries"] == []


def test_export_without_a_params_file_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "prodexp.py").write_text(_prod.MODULE)
    assert _export(tmp_path) == 2
    assert "there is no params file to export" in capsys.readouterr().err


CPP = r"""
#include <cstdio>
#include <cstdlib>
#include "k.h"

namespace s = ktune::scale;
// Known at compile time: the constexpr tables.
static_assert(s::NVIDIA_H200_cuda::N100 == s::Params{5, 32}, "per device and key");
static_assert(s::lookup("NVIDIA H200 [cuda]", s::Key{100}) == s::Params{5, 32}, "constexpr lookup");
static_assert(s::lookup("NVIDIA H200", s::Key{ktune::bucket(3000)}) == s::Params{3, 32}, "device's own name");
static_assert(s::lookup("NVIDIA H100 [cuda]", s::Key{100}) == s::kDefault, "another device: the default");
static_assert(ktune::cuda_only::lookup("NVIDIA H200", ktune::cuda_only::Key{}) == ktune::cuda_only::kDefault,
              "a target with no record");

int main(int argc, char** argv) {
  // Known only at run time: a device name and a key from the command line.
  const s::Params p = s::lookup(argv[1], s::Key{std::atoll(argv[2])});
  const ktune::addto::Params q = ktune::addto::lookup(argv[1], ktune::addto::Key{std::atoll(argv[2])});
  std::printf("%d %d %d %d\n", p.SCALE, p.BLOCK, q.SCALE, q.BLOCK);
  return argc == 3 ? 0 : 1;
}
"""


def _gxx() -> str:
    found = shutil.which("g++")
    if found:
        return found
    message = "g++ is not installed (Debian: apt-get install g++; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def test_a_cpp_program_compiled_against_the_header_finds_the_recorded_parameters(tmp_path: Path) -> None:
    gxx = _gxx()
    root = _project(tmp_path, RECORDS)
    assert _export(root, "--out", str(root / "k.h")) == 0
    (root / "main.cpp").write_text(CPP)
    build = subprocess.run([gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", "lookup",
                            "main.cpp"], cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stderr

    def run(device: str, n: int) -> list[int]:
        done = subprocess.run([str(root / "lookup"), device, str(n)], capture_output=True, text=True, timeout=60,
                              check=True)
        return [int(v) for v in done.stdout.split()]

    assert run(GPU, 100) == [5, 32, 2, 32]
    assert run(CPU, 100) == [3, 64, 2, 64]  # addto has no CPU record: its default
    assert run("NVIDIA H200", 4096) == [3, 32, 2, 64]
    assert run("NVIDIA B200 [cuda]", 100) == [2, 64, 2, 64]


def test_every_record_of_the_example_project_is_what_the_header_looks_up(tmp_path: Path) -> None:
    """Every record of example_project/ktune-params.json, as a static_assert on the exported header's lookup."""
    from pytest_ktune.report.export import _literal, identifier

    gxx = _gxx()
    example = Path(__file__).resolve().parents[2] / "example_project"
    assert _export(example, "--out", str(tmp_path / "k.h")) == 0
    assert _export(example, "--format", "json", "--out", str(tmp_path / "k.json")) == 0
    data = json.loads((tmp_path / "k.json").read_text())
    checks = []
    for t in data["targets"]:
        ns = f"ktune::{identifier(t['name'])}"
        for e in t["entries"]:
            key = ", ".join(_literal(e["key"][k]) for k in t["key"])
            params = ", ".join(_literal(e["params"][p]) for p in t["params"])
            checks.append(f'static_assert({ns}::lookup({_literal(e["device"])}, {ns}::Key{{{key}}}) == '
                          f'{ns}::Params{{{params}}}, "{t["name"]}");')
    assert len(checks) >= 20
    (tmp_path / "all.cpp").write_text('#include "k.h"\n' + "\n".join(checks) + "\nint main() { return 0; }\n")
    build = subprocess.run([gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only",
                            "all.cpp"], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stderr[-4000:]


def test_the_header_says_it_needs_cpp17_and_an_older_standard_is_told_so(tmp_path: Path) -> None:
    gxx = _gxx()
    root = _project(tmp_path, RECORDS)
    assert _export(root, "--out", str(root / "k.h")) == 0
    assert "// Needs C++17 or later" in (root / "k.h").read_text()
    (root / "main.cpp").write_text('#include "k.h"\nint main() { return 0; }\n')
    build = subprocess.run([gxx, "-std=c++14", "-fsyntax-only", "main.cpp"], cwd=root, capture_output=True, text=True,
                           timeout=300, check=False)
    assert build.returncode != 0
    assert "this header (written by ktune export) needs C++17 or later: build with -std=c++17" in build.stderr
