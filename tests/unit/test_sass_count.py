"""benchmarks/sass_count.py: reading nvdisasm's listing, and (where NVRTC and nvdisasm are installed) the
fast paths of the example's SiLU-and-mul counted with fewer instructions than the old kernel."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sass_count.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("sass_count", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sass_count"] = module
    spec.loader.exec_module(module)
    return module


sc = _load()

LISTING = """\
\t.text.silu_and_mul:
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
        /*0010*/               @P0 EXIT ;                                         /* 0x000000000000094d */
.L_x_1:
        /*0020*/              @!P6 FMUL R19, R19, 0.5 ;                           /* 0x3f00000013139820 */
        /*0030*/                   MUFU.EX2 R15, R15 ;                            /* 0x0000000f000f7308 */
        /*0040*/              @!UP0 BRA `(.L_x_2) ;                              /* 0x0000000000008947 */
        /*0050*/                   NOP;                                           /* 0x0000000000007918 */
"""


def test_the_listing_gives_each_instruction_its_opcode_without_its_predicate() -> None:
    assert sc.parse_opcodes(LISTING) == ["LDC", "EXIT", "FMUL", "MUFU.EX2", "BRA", "NOP"]


def test_a_threads_elements_are_the_product_of_the_parameters_each_at_least_one() -> None:
    assert sc.elements({"VEC": 8, "ITEMS": 2, "ROWS": 0}, "VEC,ITEMS,ROWS") == 16
    assert sc.elements({"VEC": 4}, "VEC,ITEMS") == 4


def test_an_assignment_without_a_value_is_refused() -> None:
    assert sc.parse_assignments("ROWS=1,FAST=0") == {"ROWS": 1, "FAST": 0}
    with pytest.raises(SystemExit, match="'ROWS' is not NAME=VALUE"):
        sc.parse_assignments("ROWS")


def _tools() -> tuple[str, str]:
    lib = sc.nvrtc_check.find_lib(None)
    try:
        ctypes.CDLL(lib)
    except OSError:
        pytest.skip("no libnvrtc here (pip install nvidia-cuda-nvrtc-cu12)")
    found = shutil.which("nvdisasm") or next(
        (str(p) for base in sys.path for p in sorted(Path(base or ".").glob("nvidia/*/bin/nvdisasm"))), None)
    if found is None:
        pytest.skip("no nvdisasm here (pip install nvidia-cuda-nvdisasm)")
    return lib, found


def test_the_fast_paths_count_fewer_instructions_than_the_old_kernel(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    lib, nvdisasm = _tools()
    monkeypatch.setattr(sys, "argv", ["sass_count.py", "--target", "silu_and_mul", "--set", "VEC=8",
                                      "--variant", "ROWS=0,FAST=0", "--variant", "ROWS=1,FAST=1",
                                      "--lib", lib, "--nvdisasm", nvdisasm])
    assert sc.main() == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines()[2:]]
    old, new = (int(r[3]) for r in rows)
    assert new < old / 2
