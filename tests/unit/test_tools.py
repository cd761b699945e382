"""What the checking tools report is read per configuration, between the runner's markers, and a tool
that is missing says so; compute-sanitizer's report format, without a GPU."""

from __future__ import annotations

from pytest_ktune.measure.tool_runner import END, START
from pytest_ktune.measure.tools import _sections, findings_in

MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at scale_add+0x90
=========     by thread (63,0,0) in block (63,0,0)
=========     Address 0x7f1234567000 is out of bounds
========= ERROR SUMMARY: 64 errors
"""
INITCHECK = """========= Uninitialized __global__ memory read of size 4 bytes
=========     at scale_add+0x70
=========     by thread (0,0,0) in block (0,0,0)
========= ERROR SUMMARY: 4096 errors
"""
SYNCCHECK = """========= Barrier error detected. Divergent thread(s) in block
=========     at rownorm+0x1f0
========= ERROR SUMMARY: 1 error
"""
OCLGRIND_UNINITIALISED = """Controlflow depends on uninitialized value
\tKernel: rownorm
\tEntity: Global(0,0,0) Local(0,0,0) Group(0,0,0)
\t  br i1 %cmp8, label %if.then10, label %if.end37, !dbg !57
\tAt line 7 (column 26) of input.cl:
\t  if (part[nl] == 12345.0f) t = 0.0f;

Uninitialized value written to global memory address 0x3000000000000
\tKernel: rownorm
"""
RACECHECK = """========= Error: Race reported between Write access at scale_add+0x100
=========     and Read access at scale_add+0x200 [1024 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_compute_sanitizer_errors_are_found_and_a_clean_run_has_none() -> None:
    assert findings_in("memcheck", MEMCHECK) == ["Invalid __global__ read of size 4 bytes"]
    assert findings_in("racecheck", RACECHECK) == ["Error: Race reported between Write access at scale_add+0x…"]
    assert findings_in("memcheck", "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == []
    assert findings_in("memcheck", "========= ERROR SUMMARY: 3 errors\n") == ["3 error(s) reported"]
    assert findings_in("initcheck", INITCHECK) == ["Uninitialized __global__ memory read of size 4 bytes"]
    assert findings_in("synccheck", SYNCCHECK) == ["Barrier error detected. Divergent thread(s) in block"]


def test_oclgrind_reports_of_uninitialised_values_are_found() -> None:
    assert findings_in("oclgrind", OCLGRIND_UNINITIALISED) == [
        "Controlflow depends on uninitialized value in kernel rownorm, at line 7 of the source: "
        "if (part[nl] == 12345.0f) t = 0.0f;",
        "Uninitialized value written to global memory address 0x… in kernel rownorm"]


def test_reports_belong_to_the_configuration_between_whose_markers_they_came() -> None:
    text = (START.format(index=0) + "\n" + END.format(index=0) + '{"status": "ok", "cases": ["n4096"]}\n'
            + START.format(index=1) + "\n" + MEMCHECK + END.format(index=1) + '{"status": "ok"}\n'
            + START.format(index=2) + "\nKilled\n")
    sections = _sections(text, 3)
    assert findings_in("memcheck", sections[0][0]) == [] and sections[0][1] == {"status": "ok", "cases": ["n4096"]}
    assert findings_in("memcheck", sections[1][0]) == ["Invalid __global__ read of size 4 bytes"]
    assert sections[2][1] is None  # it did not end: a time limit, or the tool stopped it
