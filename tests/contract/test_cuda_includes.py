"""Headers on the CUDA backend: an edited header is compiled again (CuPy's caches key on the source text,
not on the files it includes), and the gate's copy of a baseline's old header (``pin_includes``) is
what NVRTC compiles. Skipped where no NVIDIA GPU is visible."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_ktune.backends import create
from pytest_ktune.backends.cuda import CudaBackend

pytestmark = pytest.mark.gpu

KERNEL = '#include "val.h"\nextern "C" __global__ void val(int* out) { out[0] = VAL; }\n'


def _run(backend: CudaBackend, source: str, filename: Path) -> int:
    fn = backend.compile(source, {}, filename=str(filename)).function("val")
    out = backend.empty((1,), np.int32)
    fn.launch((1,), (1,), [out])
    backend.synchronize()
    return int(backend.to_host(out)[0])


def test_an_edited_header_is_compiled_again_and_an_old_one_can_be_pinned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.core.includes import pin_includes

    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cupy-cache"))  # CuPy's on-disk cache, in use
    src = tmp_path / "kernels" / "val.cu"
    src.parent.mkdir()
    src.write_text(KERNEL)
    header = src.parent / "val.h"
    backend = create("cuda")
    assert isinstance(backend, CudaBackend)
    header.write_text("#define VAL 1\n")
    assert _run(backend, KERNEL, src) == 1
    header.write_text("#define VAL 2\n")
    assert _run(backend, KERNEL, src) == 2  # not the cubin built with the old header
    fresh = create("cuda")
    assert isinstance(fresh, CudaBackend)
    assert _run(fresh, KERNEL, src) == 2  # nor from the on-disk cache, in a fresh backend
    # The baseline's header as git held it, pinned in a scratch folder: that is what compiles.
    pinned = pin_includes(src, KERNEL, {header: "#define VAL 7\n"}, tmp_path / "scratch")
    assert _run(backend, pinned, src) == 7
    assert header.read_text() == "#define VAL 2\n"  # the user's file is untouched
