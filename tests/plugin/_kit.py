"""Building blocks for the throwaway projects the plugin tests write with ``pytester``.

A project is a ``kernels.py`` that defines ``@ktune.target`` kernels, the
OpenCL sources next to it, and an empty ini file that makes its folder the
rootdir (so the params file is ``ktune-params.json`` there). Kernels are
tiny, so that one run of the plugin over a project takes a second or two on
PoCL's CPU device.
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# -- OpenCL sources --------------------------------------------------------

# out = a * x. The REPEAT rounds of sin() are busy work whose result is only
# compared against a value it can never take, so they cost time (REPEAT sets
# how much) without changing the output.
SCALE_CL = """\
#ifndef REPEAT
#define REPEAT 1
#endif
__kernel void scale(__global float* out, __global const float* x, float a, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const float v = x[i] * a;
    float t = v;
    for (int r = 0; r < REPEAT; ++r) t = sin(t);
    out[i] = (t == 12345.0f) ? 0.0f : v;
}
"""

ADD_CL = """\
__kernel void add(__global float* out, __global const float* x, __global const float* y, int n) {
    const int i = get_global_id(0);
    if (i < n) out[i] = x[i] + y[i];
}
"""

# -- kernels.py --------------------------------------------------------------

PRELUDE = '''\
"""Kernels of a throwaway test project."""

from typing import Any

import numpy as np

import ktune


def scaled(x: np.ndarray, a: float) -> np.ndarray:
    return (x.astype(np.float64) * a).astype(np.float32)


def added(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x.astype(np.float64) + y).astype(np.float32)


def launch_scale(kernel: ktune.Kernel, x: Any, a: float) -> Any:
    n = x.shape[0]
    out = kernel.empty_like(x)
    block = int(kernel["BLOCK"])
    kernel.launch(grid=ktune.cdiv(n, block), block=block, args=[out, x, np.float32(a), np.int32(n)])
    return out


def launch_add(kernel: ktune.Kernel, x: Any, y: Any) -> Any:
    n = x.shape[0]
    out = kernel.empty_like(x)
    block = int(kernel["BLOCK"])
    kernel.launch(grid=ktune.cdiv(n, block), block=block, args=[out, x, y, np.int32(n)])
    return out

'''


def case(n: int, *, case_id: str | None = None, a: float = 2.0, warm: bool = True) -> str:
    """A ``ktune.Case`` of the scale kernel, as source text."""
    ident = f"id={case_id!r}, " if case_id else ""
    return f"ktune.Case({ident}x=ktune.Tensor(({n},)), a={a!r}, warm_cache={warm})"


# A target with a space per backend. read_only is a parameter of Kernel Tuner's CUDA convolution, and an
# OpenCL C keyword: OpenCL drops it and tunes a wider BLOCK.
SPLIT = '''
split = ktune.target(
    name="split", kernel="scale", sources={"cuda": "scale.cu", "opencl": "scale.cl"},
    space=ktune.Space(BLOCK=[64, 128], read_only=[0, 1]), default={"BLOCK": 64, "read_only": 1},
    per_backend={"opencl": ktune.BackendSpace(drop=["read_only"], BLOCK=[64, 128, 256], default={"BLOCK": 128})},
    key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(id="small", x=ktune.Tensor((4096,)), a=2.0, warm_cache=True)],
    reference=scaled,
)(launch_scale)
'''


def scale_target(name: str = "scale", *, source: str = "scale.cl", cases: str | None = None,
                 space: str = "BLOCK=[64, 128]", default: str = "{'BLOCK': 64}",
                 reference: str = "scaled", extra: str = "") -> str:
    """Source text of a target running the ``scale`` kernel of ``source``."""
    return f"""
{name} = ktune.target(
    name={name!r}, kernel="scale", sources={{"opencl": {source!r}}},
    space=ktune.Space({space}), default={default},
    key=lambda x: {{"N": x.shape[0]}},
    cases=[{cases or case(4096, case_id="small")}],
    reference={reference},{extra}
)(launch_scale)
"""


def add_target(name: str = "add", *, n: int = 4096) -> str:
    return f"""
{name} = ktune.target(
    name={name!r}, kernel="add", sources={{"opencl": "add.cl"}},
    space=ktune.Space(BLOCK=[64]), default={{"BLOCK": 64}},
    key=lambda x: {{"N": x.shape[0]}},
    cases=[ktune.Case(id="n{n}", x=ktune.Tensor(({n},)), y=ktune.Tensor(({n},)), warm_cache=True)],
    reference=added,
)(launch_add)
"""


def lit(text: str) -> str:
    """``text`` as an fnmatch pattern that matches only itself (brackets are literal)."""
    return glob.escape(text)


# -- running -----------------------------------------------------------------

KTUNE_ARGS = ("--ktune", "--ktune-backend=opencl", "-p", "no:cacheprovider")


@dataclass
class Project:
    """A pytester folder holding one kernel project."""

    pytester: pytest.Pytester

    @property
    def path(self) -> Path:
        return self.pytester.path

    @property
    def params_path(self) -> Path:
        return self.path / "ktune-params.json"

    def write(self, *targets: str, sources: dict[str, str] | None = None) -> None:
        """Write ``kernels.py`` with ``targets`` (default: scale and add) and the OpenCL sources."""
        body = "".join(targets) if targets else scale_target() + add_target()
        self.pytester.makepyfile(kernels=PRELUDE + body)
        all_sources = {"scale": SCALE_CL, "add": ADD_CL, **(sources or {})}
        for stem, text in all_sources.items():
            (self.path / f"{stem}.cl").write_text(text)

    def run(self, *args: str) -> pytest.RunResult:
        """Run pytest with the plugin on the OpenCL backend, in a fresh process."""
        return self.pytester.runpytest_subprocess(*KTUNE_ARGS, *args, timeout=300)

    def records(self) -> list[dict[str, Any]]:
        data = json.loads(self.params_path.read_text())
        records: list[dict[str, Any]] = data["records"]
        return records

    def git(self, *args: str) -> str:
        out = subprocess.run(["git", *args], cwd=self.path, capture_output=True, text=True, check=True)
        return out.stdout

    def commit_all(self, message: str) -> str:
        """A git repository of everything here (made on the first call), committed; the commit's hash."""
        if not (self.path / ".git").exists():
            self.git("init", "-q")
            self.git("config", "user.name", "ktune tests")
            self.git("config", "user.email", "ktune-tests@example.invalid")
            self.git("config", "commit.gpgsign", "false")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()


def failure_section(result: pytest.RunResult, title: str) -> str:
    """The text of one failure in the FAILURES section, from its ``____ title ____`` line on."""
    text = result.stdout.str()
    head = re.search(rf"^_+ {re.escape(title)} _+$", text, flags=re.MULTILINE)
    assert head is not None, f"no failure section {title!r} in:\n{text}"
    rest = text[head.end():]
    end = re.search(r"^(_{3,} .* _{3,}|=+ .* =+)$", rest, flags=re.MULTILINE)
    return rest[: end.start()] if end else rest


def table_header(result: pytest.RunResult) -> int:
    """The index, in ``result.stdout.lines``, of the ktune summary table's header line."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ ktune summary =+", line))
    return next(i for i in range(start + 1, len(lines)) if lines[i].startswith("target "))


def summary_rows(result: pytest.RunResult) -> dict[tuple[str, str], list[str]]:
    """The rows of the ktune summary table, by (target, case), split into their columns."""
    lines = result.stdout.lines
    at = table_header(result)
    rule = lines[at + 1]
    assert set(rule.replace(" ", "")) == {"-"}, rule
    # The dashes under the header give each column's span.
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    rows: dict[tuple[str, str], list[str]] = {}
    for line in lines[at + 2:]:
        if not line.strip() or line.startswith(("=", "ktune:")):
            break
        cells = [line[a:b].strip() for a, b in spans]
        rows[(cells[0], cells[1])] = cells
    return rows
