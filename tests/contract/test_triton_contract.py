"""The backend contract on the triton backend: in Triton's interpreter on the CPU everywhere, and on the GPU
where torch sees one (gpu-marked). A Triton source is a Python module: the contract's kernels are written
as one, imported, and registered as a declaration registers a target's jit function."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from pytest_ktune import BackendUnavailable, CompileError
from pytest_ktune.backends import Backend, Program
from pytest_ktune.core.pykernels import register
from pytest_ktune.testing import BackendContract

pytest.importorskip("triton", reason="the triton backend needs triton (pip install 'pytest-ktune[triton]')")

_MODULE = '''\
import triton
import triton.language as tl


@triton.jit
def ktune_scale(out, x, n, SCALE: tl.constexpr, OFFSET: tl.constexpr, BLOCK: tl.constexpr = 64):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + i, mask=i < n)
    tl.store(out + i, v * SCALE + OFFSET, mask=i < n)


@triton.jit
def ktune_spin(out, x, n, iters, BLOCK: tl.constexpr = 64):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + i, mask=i < n)
    for _ in range(iters):
        v = v * 0.99993 + 0.00007
    tl.store(out + i, v, mask=i < n)


@triton.jit
def ktune_broken(out, BLOCK: tl.constexpr = 64):
    tl.store(out, ktune_undeclared_name)
'''
_TRITON = {kind: _MODULE for kind in ("scale", "spin", "broken")}


def _load(path: Path, text: str) -> None:
    """Import the module text from ``path`` and register its jit functions, as a target's declaration does."""
    path.write_text(text)
    name = f"_ktune_contract_{abs(hash(text)) % 10**8}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if hasattr(value, "arg_names") and hasattr(value, "fn"):
            register(value)


class _TritonContract(BackendContract):
    SOURCES: ClassVar[Mapping[str, Mapping[str, str]]] = {"triton": _TRITON}

    @pytest.fixture(autouse=True)
    def _module_dir(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    def compile(self, backend: Backend, kind: str, defines: Mapping[str, Any] | None = None) -> Program:
        path = self.folder / "contract_kernels.py"
        if not path.exists():
            _load(path, _MODULE)
        return backend.compile(_MODULE, dict(defines or {}), filename=str(path))

    def test_compile_error_shows_log_and_offending_line(self, backend: Backend, tmp_path: Path) -> None:
        """Triton compiles on the first launch: a broken kernel is a CompileError there, naming the file,
        the kernel and Triton's reason."""
        fn = self.compile(backend, "broken").function("ktune_broken")
        out = backend.empty((1,), np.float32)
        with pytest.raises(CompileError) as info:
            fn.launch((1,), (32,), (out,))
        message = str(info.value)
        assert "contract_kernels.py" in message and "ktune_broken" in message
        assert "ktune_undeclared_name" in message, message


class TestTritonInterpreter(_TritonContract):
    SPIN_N = 128  # two programs: the interpreter runs each in Python, and the spin's loop is what it times
    @pytest.fixture
    def backend(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
        from pytest_ktune.backends.triton import TritonBackend

        monkeypatch.setenv("TRITON_INTERPRET", "1")  # read by triton.jit when the module is decorated
        yield TritonBackend()


@pytest.mark.gpu
class TestTritonGPU(_TritonContract):
    @pytest.fixture
    def backend(self, monkeypatch: pytest.MonkeyPatch) -> Backend:
        from pytest_ktune.backends.triton import TritonBackend

        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
        try:
            return TritonBackend()
        except BackendUnavailable as exc:
            pytest.skip(f"{exc.message}; {exc.hint}")
