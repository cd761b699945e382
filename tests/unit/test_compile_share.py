"""A parameter the kernel source never names (a grid cap only the launch reads) cannot change the
compiled code: its values share one compile on the built-in backends; a named one, or a backend whose
defines are not macros, compiles per value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_ktune import backends
from pytest_ktune.call import target
from pytest_ktune.core.case import Case, Tensor
from pytest_ktune.core.errors import CompileError
from pytest_ktune.core.space import Space
from pytest_ktune.measure.runtime import compile_target

SOURCE = "__kernel void k(__global float* o) { o[get_global_id(0)] = (float)BLOCK; }\n"


def _target(tmp_path: Path, source: str) -> Any:
    (tmp_path / "k.cl").write_text(source)

    def k(kernel: Any, x: Any) -> Any:
        return x

    k.__module__ = __name__
    return target(sources={"opencl": str(tmp_path / "k.cl")}, space=Space(BLOCK=[64, 128], CAP=[1, 2]),
                  default={"BLOCK": 64, "CAP": 1}, key=lambda x: {}, cases=[Case(x=Tensor((4,)))],
                  reference=lambda x: x)(k)


def test_values_of_a_parameter_the_source_never_names_share_a_compile(tmp_path: Path) -> None:
    pytest.importorskip("pyopencl")
    backend = backends.create("opencl")
    t = _target(tmp_path, SOURCE)
    a = compile_target(backend, t, {"BLOCK": 64, "CAP": 1}, {})
    assert compile_target(backend, t, {"BLOCK": 64, "CAP": 2}, {}) is a
    assert compile_target(backend, t, {"BLOCK": 128, "CAP": 1}, {}) is not a
    # once the source names CAP (here only in a comment), its values compile apart
    named = _target(tmp_path, SOURCE + "// CAP\n")
    b = compile_target(backend, named, {"BLOCK": 64, "CAP": 1}, {})
    assert compile_target(backend, named, {"BLOCK": 64, "CAP": 2}, {}) is not b
    # token pasting can spell any name: every value compiles apart
    pasted = _target(tmp_path, "#define CAT(a, b) a##b\n" + SOURCE)
    c = compile_target(backend, pasted, {"BLOCK": 64, "CAP": 1}, {})
    assert compile_target(backend, pasted, {"BLOCK": 64, "CAP": 2}, {}) is not c


def test_an_unnamed_parameter_of_a_name_the_compiler_headers_use_is_compiled_as_itself(tmp_path: Path) -> None:
    # read_only is a word of OpenCL C's own headers: as a -D macro it breaks them though the source never
    # names it. A program compiled without it is not reused for a point that defines it.
    pytest.importorskip("pyopencl")

    backend = backends.create("opencl")
    t = _target(tmp_path, SOURCE)
    compile_target(backend, t, {"BLOCK": 64}, {})
    with pytest.raises(CompileError, match="read_only is an OpenCL C keyword"):
        compile_target(backend, t, {"BLOCK": 64, "read_only": 1}, {})
