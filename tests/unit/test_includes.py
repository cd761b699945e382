"""The local include closure of a kernel source, its hash, the baseline field that records it, the rule
that says whether a baseline's source changed, and the pinned copy that compiles a baseline's headers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_ktune import Case, Space, StoreError, Target, Tensor, target
from pytest_ktune.backends.cuda import CudaBackend
from pytest_ktune.core.includes import include_closure, pin_includes, read_local
from pytest_ktune.core.store import Baseline, Record, Store, source_changed


def _kernel(kernel: Any, x: Any) -> Any:
    return x


def _target(source: Path) -> Target:
    return target(sources={"opencl": source}, space=Space(BLOCK=[64]), default={"BLOCK": 64},
                  key=lambda x: {"N": x.shape[0]}, cases=[Case(x=Tensor((8,)))],
                  reference=lambda x: x)(_kernel)


def _files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def _names(t: Target) -> list[str]:
    folder = t.source_path("opencl").parent
    return [p.relative_to(folder).as_posix() for p in t.includes("opencl")]


# -- the closure -----------------------------------------------------------------
def test_nested_includes_in_the_order_first_met(tmp_path: Path) -> None:
    _files(tmp_path, {
        "k.cl": '#include "a.h"\n#include "sub/b.h"\nkernel\n',
        "a.h": "// a\n",
        # Met in sub/b.h: "d.h" is next to it, "c.h" only in the kernel's folder (the -I folder).
        "sub/b.h": '#include "d.h"\n#include "c.h"\n',
        "sub/d.h": '  #  include "../e.h"\n',
        "c.h": "// c\n",
        "e.h": "// e\n",
    })
    assert _names(_target(tmp_path / "k.cl")) == ["a.h", "sub/b.h", "sub/d.h", "e.h", "c.h"]


def test_an_include_next_to_the_including_file_comes_before_the_kernels_folder(tmp_path: Path) -> None:
    _files(tmp_path, {"k.cl": '#include "sub/b.h"\n', "sub/b.h": '#include "c.h"\n',
                      "sub/c.h": "// near\n", "c.h": "// far\n"})
    assert _names(_target(tmp_path / "k.cl")) == ["sub/b.h", "sub/c.h"]


def test_cycles_end_and_each_file_comes_once(tmp_path: Path) -> None:
    _files(tmp_path, {
        "k.cl": '#include "a.h"\n#include "b.h"\n#include "a.h"\n',
        "a.h": '#pragma once\n#include "b.h"\n',
        "b.h": '#pragma once\n#include "a.h"\n#include "k.cl"\n',  # back to a.h, and to the kernel itself
    })
    assert _names(_target(tmp_path / "k.cl")) == ["a.h", "b.h"]


def test_missing_and_angle_bracket_includes_are_left_out(tmp_path: Path) -> None:
    _files(tmp_path, {
        # cuda_fp16.h is NVRTC's; <a.h> names a system header even though a local a.h exists.
        "k.cl": '#include "cuda_fp16.h"\n#include <a.h>\n// #include "a.h"\n#include "b.h"\n',
        "a.h": "// a\n",
        "b.h": '#include "gone.h"\n',
    })
    t = _target(tmp_path / "k.cl")
    assert _names(t) == ["b.h"]


def test_no_local_include_has_no_deps_hash(tmp_path: Path) -> None:
    _files(tmp_path, {"k.cl": '#include <stdint.h>\n#include "missing.h"\nkernel\n'})
    t = _target(tmp_path / "k.cl")
    assert t.includes("opencl") == []
    assert t.deps_hash("opencl") is None


def test_the_closure_reads_through_the_reader_it_is_given(tmp_path: Path) -> None:
    source = tmp_path / "k.cl"
    texts = {tmp_path / "a.h": '#include "b.h"\n', tmp_path / "b.h": "// b\n"}
    assert include_closure(source, '#include "a.h"\n', texts.get) == texts
    assert include_closure(source, '#include "a.h"\n', read_local) == {}  # nothing on disk


# -- the hash ----------------------------------------------------------------------
def test_deps_hash_follows_the_headers_and_nothing_else(tmp_path: Path) -> None:
    _files(tmp_path, {"k.cl": '#include "a.h"\nkernel\n', "a.h": '#include "b.h"\n', "b.h": "#define N 1\n",
                      "other.h": "// not included\n"})
    t = _target(tmp_path / "k.cl")
    first = t.deps_hash("opencl")
    main = t.source_hash("opencl")
    assert first is not None and first == t.deps_hash("opencl")

    (tmp_path / "other.h").write_text("// changed, but not included\n")
    assert t.deps_hash("opencl") == first

    (tmp_path / "b.h").write_text("#define N 2\n")  # a nested header
    second = t.deps_hash("opencl")
    assert second not in (None, first)
    assert t.source_hash("opencl") == main  # the main file's hash is that of the main file alone

    (tmp_path / "b.h").write_text("#define N 1\n")
    assert t.deps_hash("opencl") == first


def test_deps_hash_covers_the_header_names(tmp_path: Path) -> None:
    _files(tmp_path, {"k.cl": '#include "a.h"\n', "a.h": "// same\n", "b.cl": '#include "b.h"\n',
                      "b.h": "// same\n"})
    assert _target(tmp_path / "k.cl").deps_hash("opencl") != _target(tmp_path / "b.cl").deps_hash("opencl")


# -- the baseline field --------------------------------------------------------------
def _baseline(deps_hash: str | None) -> Baseline:
    return Baseline(params={"BLOCK": 64}, source_hash="0123456789abcdef", source_path="k.cl", commit=None,
                    date="2026-11-30T12:00:00Z", ktune_version="0.1.0", deps_hash=deps_hash)


@pytest.mark.parametrize("deps_hash", ["fedcba9876543210", None])
def test_the_baseline_round_trips_with_and_without_deps_hash(tmp_path: Path, deps_hash: str | None) -> None:
    record = Record(target="k.py::k", device="cpu [opencl]", key={"N": 8}, params={"BLOCK": 64},
                    baseline=_baseline(deps_hash))
    assert ("deps_hash" in record.to_json()["baseline"]) == (deps_hash is not None)
    path = tmp_path / "ktune-params.json"
    text = Store(path, [record]).render()
    path.write_text(text)
    loaded = Store.load(path)
    assert loaded.records[record.ident] == record
    assert loaded.render() == text


def test_a_record_written_before_deps_hash_loads(tmp_path: Path) -> None:
    old = {"format": "pytest-ktune/1", "records": [{
        "target": "k.py::k", "device": "cpu [opencl]", "key": {"N": 8}, "params": {"BLOCK": 64},
        "baseline": {"params": {"BLOCK": 64}, "source_hash": "0123456789abcdef", "source_path": "k.cl",
                     "commit": None, "date": "2026-11-30T12:00:00Z", "ktune_version": "0.1.0",
                     "timings": {}}}]}
    path = tmp_path / "ktune-params.json"
    path.write_text(json.dumps(old))
    (record,) = Store.load(path).records.values()
    assert record.baseline is not None and record.baseline.deps_hash is None


@pytest.mark.parametrize("bad", [{"deps_hash": 12}, {"includes_hash": "fedcba9876543210"}])
def test_a_bad_deps_hash_or_an_unknown_field_is_refused(tmp_path: Path, bad: dict[str, Any]) -> None:
    record = Record(target="k.py::k", device="cpu [opencl]", key={"N": 8}, params={"BLOCK": 64},
                    baseline=_baseline(None))
    raw = record.to_json()
    raw["baseline"].update(bad)
    data = {"format": "pytest-ktune/1", "records": [raw]}
    path = tmp_path / "ktune-params.json"
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError, match=next(iter(bad))):
        Store.load(path)


# -- what counts as a changed source -------------------------------------------------
def test_source_changed(tmp_path: Path) -> None:
    _files(tmp_path, {"k.cl": '#include "a.h"\nkernel\n', "a.h": "// one\n"})
    t = _target(tmp_path / "k.cl")
    now = replace(_baseline(t.deps_hash("opencl")), source_hash=t.source_hash("opencl"))
    no_claim = replace(now, deps_hash=None)
    assert not source_changed(now, t, "opencl")
    assert not source_changed(no_claim, t, "opencl")

    (tmp_path / "a.h").write_text("// two\n")  # only the header
    assert source_changed(now, t, "opencl")
    assert not source_changed(no_claim, t, "opencl")  # a baseline without deps_hash claims nothing

    (tmp_path / "a.h").write_text("// one\n")
    (tmp_path / "k.cl").write_text('#include "a.h"\nkernel 2\n')  # only the main file
    assert source_changed(now, t, "opencl") and source_changed(no_claim, t, "opencl")


# -- compiling the baseline's headers -------------------------------------------------
def test_pinned_includes_point_at_copies_of_the_given_texts(tmp_path: Path) -> None:
    kernels, scratch = tmp_path / "kernels", tmp_path / "scratch"
    _files(kernels, {"k.cl": '#include "sub/a.h"\n#include <x.h>\n#include "nvrtc.h"\n',
                     "sub/a.h": "// now\n", "c.h": "// now\n", "../shared/d.h": "// now\n"})
    old = {kernels / "sub/a.h": '#include "../c.h"\n#include "../../shared/d.h"\n',
           kernels / "c.h": "// then: c\n", tmp_path / "shared/d.h": "// then: d\n"}
    main = pin_includes(kernels / "k.cl", (kernels / "k.cl").read_text(), old, scratch)

    copy_a = scratch / "sub/a.h"
    assert main == f'#include "{copy_a.as_posix()}"\n#include <x.h>\n#include "nvrtc.h"\n'
    assert copy_a.read_text() == (f'#include "{(scratch / "c.h").as_posix()}"\n'
                                  f'#include "{(scratch / "_up_/shared/d.h").as_posix()}"\n')
    assert (scratch / "c.h").read_text() == "// then: c\n"
    assert (scratch / "_up_/shared/d.h").read_text() == "// then: d\n"
    assert (kernels / "c.h").read_text() == "// now\n"  # the working tree is left alone


# -- the CUDA backend's compile cache ------------------------------------------------
def test_the_cuda_compile_tells_cupys_cache_about_the_headers(tmp_path: Path) -> None:
    _files(tmp_path, {"k.cu": '#include "a.cuh"\nkernel\n', "a.cuh": "// one\n", "plain.cu": "kernel\n"})
    codes: list[str] = []  # what CuPy is given to compile, and keys its on-disk cache by (with the options)

    class RawModule:
        def __init__(self, code: str, options: tuple[str, ...]) -> None:
            codes.append(code)

        def compile(self) -> None:
            pass

    backend = object.__new__(CudaBackend)  # no GPU: only compile() runs, against a stand-in for CuPy
    backend.cp, backend.cache_dir = SimpleNamespace(RawModule=RawModule), None
    source = (tmp_path / "k.cu").read_text()

    def code(name: str, text: str) -> str:
        backend.compile(text, {"BLOCK": 64}, filename=str(tmp_path / name))
        return codes[-1]

    first = code("k.cu", source)
    assert first.startswith(source) and first != source
    assert code("k.cu", source) == first
    (tmp_path / "a.cuh").write_text("// two\n")  # the same source text and options: another cache key
    assert code("k.cu", source) not in (first, source)
    assert code("plain.cu", "kernel\n") == "kernel\n"  # nothing included: the source as it is
