"""Checking tools that see what a run's results cannot: data races, reads and writes out of bounds,
uninitialised values, barriers misused.

- **Oclgrind** (Debian's ``oclgrind``; an OpenCL device simulator) runs OpenCL kernels work-item by
  work-item and reports invalid reads and writes of every buffer, with data-race detection on, races
  in local and global memory, and with its uninitialised-value check on, control flow that depends on
  an uninitialised value and uninitialised values written to memory (``oclgrind``: both checks are on).
  It is loaded as an OpenCL platform through the ICD loader (``OCL_ICD_VENDORS``), beside PoCL.
- **compute-sanitizer** (CUDA's toolkit) runs CUDA kernels under ``--tool memcheck`` (out-of-bounds and
  misaligned accesses; ``--padding 4096`` so that a small overread past an allocation is caught),
  ``--tool racecheck`` (shared-memory hazards), ``--tool initcheck`` (reads of global memory never
  written) and ``--tool synccheck`` (barriers reached by part of a block, or with invalid arguments)
  (``memcheck``, ``racecheck``, ``initcheck``, ``synccheck``).

``run_tool`` verifies configurations of a target on some of its cases in a fresh process under the
tool (``measure.tool_runner``), with guard regions off (the tool must see each buffer's true bounds)
and CuPy's memory pool off, and returns a ``ToolRun``: which configurations and cases ran to the end
under it, and the first errors it reported, per configuration. A tool that is not installed gives a
``ToolRun`` saying so; nothing here raises for what a kernel does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ktune.core.options import DEFAULTS
from pytest_ktune.core.space import Value
from pytest_ktune.measure.guards import ENV as GUARD_ENV
from pytest_ktune.measure.tool_runner import END, START
from pytest_ktune.measure.worker import TargetRef

SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
TOOLS = {"opencl": ("oclgrind",), "cuda": SANITIZER_TOOLS}
DESCRIBE = {"oclgrind": "Oclgrind (out-of-bounds accesses, data races, uninitialised values)",
            "memcheck": "compute-sanitizer memcheck (out-of-bounds and misaligned accesses)",
            "racecheck": "compute-sanitizer racecheck (shared-memory races)",
            "initcheck": "compute-sanitizer initcheck (reads of uninitialised global memory)",
            "synccheck": "compute-sanitizer synccheck (barriers misused)"}
_CUDA_TOOLKIT = "install the CUDA toolkit, or set KTUNE_COMPUTE_SANITIZER to compute-sanitizer"
INSTALL = {"oclgrind": "apt-get install oclgrind (Debian, Ubuntu), or set KTUNE_OCLGRIND_ICD to its "
                       "liboclgrind-rt-icd.so", **{t: _CUDA_TOOLKIT for t in SANITIZER_TOOLS}}
MAX_FINDINGS = 3  # errors kept per configuration


@dataclass(frozen=True)
class ToolRun:
    """What one tool found on the configurations and cases it ran."""

    tool: str  # "oclgrind", or a compute-sanitizer tool: "memcheck", "racecheck", "initcheck", "synccheck"
    status: str  # "clean", "errors", "unavailable" or "incomplete" (a time limit, or the tool failed)
    ran: tuple[tuple[Mapping[str, Value], tuple[str, ...]], ...] = ()  # ran to the end: a configuration, its cases
    findings: tuple[tuple[Mapping[str, Value], str], ...] = ()  # (configuration, what the tool reported)
    failures: tuple[tuple[Mapping[str, Value], str], ...] = ()  # configurations that failed their check
    note: str = ""

    @property
    def describe(self) -> str:
        return DESCRIBE.get(self.tool, self.tool)

    @property
    def configs(self) -> tuple[Mapping[str, Value], ...]:
        return tuple(cfg for cfg, _ in self.ran)

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for _, cases in self.ran for c in cases))


def oclgrind_icd() -> Path | None:
    """Oclgrind's ICD library: ``KTUNE_OCLGRIND_ICD``, else where Debian and a source install put it."""
    named = os.environ.get("KTUNE_OCLGRIND_ICD")
    candidates = [Path(named)] if named else []
    exe = shutil.which("oclgrind")
    if exe:
        prefix = Path(exe).resolve().parent.parent
        candidates += [prefix / "lib" / "oclgrind" / "liboclgrind-rt-icd.so", prefix / "lib" / "liboclgrind-rt-icd.so"]
    candidates += [Path("/usr/lib/oclgrind/liboclgrind-rt-icd.so"),
                   Path("/usr/lib/x86_64-linux-gnu/liboclgrind-rt-icd.so")]
    return next((c for c in candidates if c.is_file()), None)


def compute_sanitizer() -> Path | None:
    """``compute-sanitizer``: ``KTUNE_COMPUTE_SANITIZER``, on PATH, under CUDA_HOME, or in /usr/local/cuda."""
    named = os.environ.get("KTUNE_COMPUTE_SANITIZER")
    found = shutil.which("compute-sanitizer")
    candidates = [Path(p) for p in (named, found) if p]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(Path(home) / "bin" / "compute-sanitizer")
    return next((c for c in candidates if c.is_file()), None)


def available(tool: str) -> bool:
    return (oclgrind_icd() if tool == "oclgrind" else compute_sanitizer()) is not None


def _command(tool: str, spec_file: Path, scratch: Path) -> tuple[list[str], dict[str, str]] | None:
    env = {**os.environ, GUARD_ENV: "0", "PYTHONUNBUFFERED": "1"}
    runner = [sys.executable, "-m", "pytest_ktune.measure.tool_runner", str(spec_file)]
    if tool == "oclgrind":
        icd = oclgrind_icd()
        if icd is None:
            return None
        vendors = scratch / "icd"
        vendors.mkdir(exist_ok=True)
        (vendors / "oclgrind.icd").write_text(f"{icd}\n")
        env.update(OCL_ICD_VENDORS=str(vendors), KTUNE_OPENCL_DEVICE="Oclgrind", OCLGRIND_DATA_RACES="1",
                   OCLGRIND_UNINITIALIZED="1")
        env.pop("OCLGRIND_LOG", None)  # its reports come on stderr, between the runner's markers
        return runner, env
    sanitizer = compute_sanitizer()
    if sanitizer is None:
        return None
    options = ["--tool", tool, "--print-limit", "20", "--target-processes", "all"]
    if tool == "memcheck":
        options += ["--padding", "4096"]
    return [str(sanitizer), *options, *runner], env


# Oclgrind starts each report with a line like "Invalid read of size 4 at global memory address 0x...",
# "Read-write data race at local memory address ...", "Work-group divergence detected ...",
# "Controlflow depends on uninitialized value", "Uninitialized value written to global memory address ...".
_OCLGRIND = re.compile(r"^(Invalid (?:read|write)|Uninitialized|Unaligned|Misaligned|.*data race|.*[Dd]ivergence|"
                       r".*barrier|.*uninitiali[sz]ed|Work-item finished|Oclgrind - OpenCL runtime error).*$", re.M)
_OCLGRIND_LINE = re.compile(r"^\s*At line (\d+) \(column \d+\) of [^:]*:\n\s*(.*)$", re.M)
# compute-sanitizer prefixes its lines with "=========".
_SANITIZER = re.compile(r"^=+ +((?:Invalid|Misaligned|Program hit|Malloc|Cuda|Barrier|Uninitialized|"
                        r"(?:Error|Warning|ERROR|WARNING):? .*(?:[Rr]ace|[Hh]azard)).*)$", re.M)
_SUMMARY = re.compile(r"(?:ERROR SUMMARY|RACECHECK SUMMARY).*?(\d+) (?:errors?|hazards?)", re.M)


def findings_in(tool: str, text: str) -> list[str]:
    """The errors ``tool`` reported in ``text`` (its output over one configuration), first ones first."""
    out: list[str] = []
    if tool == "oclgrind":
        for block in re.split(r"\n\n+", text):
            head = _OCLGRIND.search(block)
            if head is None:
                continue
            what = re.sub(r"0x[0-9a-fA-F]+", "0x…", head.group(0).strip())
            where = _OCLGRIND_LINE.search(block)
            kernel = re.search(r"Kernel: (\w+)", block)
            item = what + (f" in kernel {kernel.group(1)}" if kernel else "")
            if where:
                shown = where.group(2).strip()
                item += f", at line {where.group(1)} of the source" + \
                    (f": {shown}" if shown and shown != "(source not available)" else "")
            if item not in out:
                out.append(item)
        return out
    for m in _SANITIZER.finditer(text):
        item = re.sub(r"0x[0-9a-fA-F]+", "0x…", m.group(1).strip())
        if item not in out:
            out.append(item)
    if not out:
        counts = [int(c) for c in _SUMMARY.findall(text)]
        if any(counts):
            out.append(f"{max(counts)} error(s) reported")
    return out


def _sections(text: str, count: int) -> dict[int, tuple[str, dict[str, Any] | None]]:
    """Per configuration index: the tool's output between its markers, and its outcome (None: it did not end)."""
    out: dict[int, tuple[str, dict[str, Any] | None]] = {}
    for index in range(count):
        start = text.find(START.format(index=index))
        if start < 0:
            break
        end_marker = END.format(index=index)
        end = text.find(end_marker, start)
        if end < 0:
            out[index] = (text[start:], None)
            break
        line_end = text.find("\n", end)
        raw = text[end + len(end_marker): line_end if line_end >= 0 else None]
        try:
            outcome: dict[str, Any] | None = json.loads(raw)
        except json.JSONDecodeError:
            outcome = None
        out[index] = (text[start:end], outcome)
    return out


def run_tool(tool: str, target: TargetRef, *, backend: str, cases: Sequence[int],
             configs: Sequence[Mapping[str, Value]], seed: int, timeout_s: float,
             groups: Sequence[Sequence[int]] = (), scratch: Path | None = None, log: Path | None = None) -> ToolRun:
    """Verify ``configs`` on those of ``cases`` of ``target`` their constraints allow (with ``groups``,
    positions in ``cases``: on the first of each group they allow) under ``tool``, in a process of its
    own, within ``timeout_s``; see the module docstring. With ``log``, the tool's whole output is kept
    there."""
    with tempfile.TemporaryDirectory(prefix="ktune-tool-", dir=scratch) as tmp:
        folder = Path(tmp)
        spec = {"target": {"module": target.module, "file": target.file, "name": target.name,
                           "sys_path": list(target.sys_path)},
                "backend": backend, "cases": list(cases), "configs": [dict(c) for c in configs], "seed": seed,
                "groups": [list(g) for g in groups]}
        spec_file = folder / "spec.json"
        spec_file.write_text(json.dumps(spec))
        made = _command(tool, spec_file, folder)
        if made is None:
            return ToolRun(tool, "unavailable", note=f"{DESCRIBE[tool]} is not installed ({INSTALL[tool]})")
        command, env = made
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
                                  errors="replace")
            stdout, stderr, timed_out = done.stdout, done.stderr, False
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
            timed_out = True
    # Oclgrind reports on stderr; compute-sanitizer on stdout, unless told otherwise: read both for it.
    texts = [stderr] if tool == "oclgrind" else [stdout, stderr]
    text = texts[0]
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(command)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n")
    sections = _sections(text, len(configs))
    others = [_sections(t, len(configs)) for t in texts[1:]]
    ran: list[tuple[Mapping[str, Value], tuple[str, ...]]] = []
    findings: list[tuple[Mapping[str, Value], str]] = []
    failures: list[tuple[Mapping[str, Value], str]] = []
    for index, (body, outcome) in sections.items():
        cfg = dict(configs[index])
        bodies = [body, *(o[index][0] for o in others if index in o)]
        found = list(dict.fromkeys(f for b in bodies for f in findings_in(tool, b)))
        findings.extend((cfg, f) for f in found[:MAX_FINDINGS])
        if outcome is None:
            continue
        ran.append((cfg, tuple(str(c) for c in outcome.get("cases", []))))
        if outcome.get("status") != "ok":
            failures.append((cfg, str(outcome.get("reason", ""))))
    note = ""
    if len(ran) < len(configs):
        note = (f"stopped after {len(ran)} of {len(configs)} configurations: "
                + (f"the time limit of {timeout_s:g} s" if timed_out else _last_line(stderr or stdout)))
    status = "errors" if findings else "incomplete" if note else "clean"
    return ToolRun(tool, status, tuple(ran), tuple(findings), tuple(failures), note)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("@@ktune-tool")]
    return lines[-1][:300] if lines else "the tool ended without a word"


#: What ``ToolPlan.mode`` may be: the tools that are installed, all of them, or none.
TOOL_MODES = ("auto", "require", "off")


@dataclass(frozen=True)
class ToolPlan:
    """Which tools to run: ``mode`` "auto" (those installed), "require" (a missing one is an error) or "off"."""

    mode: str = DEFAULTS.agent_tools
    timeout_s: float = 300.0
    tools: tuple[str, ...] = field(default=())
    log_dir: Path | None = None  # where each tool's whole output is kept (None: nowhere)

    def for_backend(self, backend: str) -> tuple[str, ...]:
        if self.mode == "off":
            return ()
        return self.tools or TOOLS.get(backend, ())
