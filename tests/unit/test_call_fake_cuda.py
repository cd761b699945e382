"""The CUDA routes of production calls without a GPU (``pytest_ktune.testing.fake_cuda``): on CuPy arrays and on
torch tensors a cached call launches the kernel with the right grid, block, pointers and stream, in a bounded
number of Python calls, and bad arguments are still refused naming the target and the argument."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.testing import fake_cuda

from . import _prod

MODULE = '''
import numpy as np
import ktune

KEYS = [0]


def _key(x, alpha=1.0):
    KEYS[0] += 1
    return {"N": x.shape[-1], "dtype": x.dtype.name, "alpha": alpha}


@ktune.target(
    sources={"cuda": "kernels.cu"},
    space=ktune.Space(BLOCK=[64, 128]),
    default={"BLOCK": 128},
    key=_key,
    cases=[ktune.Case(x=ktune.Tensor((4, 256), "float16"), w=ktune.Tensor((256,), "float16"), alpha=1.0)],
    reference=lambda x, w, alpha: x * w * alpha,
)
def scale(kernel, x, w, alpha=1.0):
    rows, n = x.shape
    out = kernel.empty_like(x)
    kernel.launch(grid=rows, block=kernel["BLOCK"], args=[out, x, w, np.int32(n), np.float32(alpha)])
    return out
'''


@pytest.fixture
def fake() -> Iterator[ModuleType]:
    with fake_cuda.installed() as cp:
        yield cp


def _module(tmp_path: Path, name: str, text: str = MODULE) -> Any:
    module = _prod.load(tmp_path, name, text)
    (tmp_path / "kernels.cu").write_text('extern "C" __global__ void scale() {}\n')
    return module


def _warm(tmp_path: Path, name: str, text: str, fake: Any) -> tuple[Any, Any, Any, Any]:
    """The target of ``text`` after two calls (the second the dispatch cache's), its arrays and CuPy's function."""
    module = _module(tmp_path, name, text)
    x, w = fake.empty((4, 256), np.float16), fake.empty((256,), np.float16)
    module.scale(x, w)
    module.scale(x, w)
    return module, x, w, _function(module)


def _function(module: Any) -> Any:
    """The fake CuPy function the target's kernel launches."""
    (entry,) = {id(e): e for e in module.scale._plan._dispatch.values()}.values()
    return entry.kernel._fn.kernel.kernel


def _python_calls(call: Callable[[], Any]) -> int:
    """Python frames one call runs, less the fake CuPy's own (which stand for CuPy's C)."""
    count = [0]
    fake_file = fake_cuda.__file__

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename != fake_file:
            count[0] += 1

    sys.setprofile(hook)
    try:
        call()
    finally:
        sys.setprofile(None)
    return count[0] - 1  # the lambda


def test_a_cached_call_on_cupy_arrays_launches_cupys_function_with_the_callers_arrays(
        tmp_path: Path, fake: Any) -> None:
    module = _module(tmp_path, "fake_cuda_a")
    x, w = fake.empty((4, 256), np.float16), fake.empty((256,), np.float16)
    module.scale(x, w)
    fn = _function(module)
    for alpha in (1.0, 1.0, 2.0, 2.0):
        before = fn.calls
        out = module.scale(x, w, alpha)
        assert fn.calls == before + 1
        launch = fn.last
        assert launch.grid == (4,) and launch.block == (128,)
        assert launch.args[0] is out and launch.args[1] is x and launch.args[2] is w
        assert launch.args[3] == 256 and launch.args[4] == np.float32(alpha)
        assert out.shape == (4, 256) and out.dtype == np.float16
    assert module.KEYS[0] == 2  # once per signature: alpha 1.0, alpha 2.0
    # the call, the function, its launch, and the output's allocation (one frame that calls CuPy's array
    # constructor: cheaper than cupy.empty_like's own Python): no other frame of ours on the way
    assert _python_calls(lambda: module.scale(x, w)) <= 4


def test_a_cached_call_on_torch_tensors_passes_their_pointers_on_torchs_current_stream(
        tmp_path: Path, fake: Any) -> None:
    torch = pytest.importorskip("torch")
    module = _module(tmp_path, "fake_cuda_b")
    x = fake_cuda.cuda_tensor(torch.ones((4, 256), dtype=torch.float16))
    w = fake_cuda.cuda_tensor(torch.ones((256,), dtype=torch.float16))
    first = module.scale(x, w)
    fn = _function(module)
    for _ in range(3):
        out = module.scale(x, w)
        assert isinstance(out, torch.Tensor) and out.shape == (4, 256) and out.dtype == torch.float16
        assert out is not first
        launch = fn.last
        pointers = [a.val for a in launch.args[:3]]
        assert pointers == [out.data_ptr(), x.data_ptr(), w.data_ptr()]
        assert launch.stream.ptr == fake_cuda.STREAM and launch.block == (128,)
    assert module.KEYS[0] == 1
    # and the route's view of the call, its empty_like and its launch on torch's stream
    assert _python_calls(lambda: module.scale(x, w)) <= 6


def test_bad_arguments_after_good_calls_are_refused_naming_the_argument(tmp_path: Path, fake: Any) -> None:
    torch = pytest.importorskip("torch")
    module = _module(tmp_path, "fake_cuda_c")
    x = fake_cuda.cuda_tensor(torch.ones((4, 256), dtype=torch.float16))
    w = fake_cuda.cuda_tensor(torch.ones((256,), dtype=torch.float16))
    for _ in range(3):
        module.scale(x, w)
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: module.scale(fake_cuda.cuda_tensor(torch.ones((4, 256))), w), "argument x has dtype float32"),
        (lambda: module.scale(fake_cuda.cuda_tensor(torch.ones((4, 512), dtype=torch.float16)[:, ::2]), w),
         "argument x is not contiguous"),
        (lambda: module.scale(x, torch.ones((256,), dtype=torch.float16)), "argument w is on cpu"),
        (lambda: module.scale(x, fake.empty((256,), np.float16)), "argument w is a cupy.ndarray"),
        (lambda: module.scale(fake.empty((4, 256), np.float16), w), "argument w is a torch"),
    ]
    for call, message in cases:
        with pytest.raises(KtuneError) as err:
            call()
        assert message in str(err.value) and "target scale" in str(err.value)
    module.scale(x, w)  # and the good call still runs


def test_a_change_of_torchs_current_device_is_caught_on_a_cached_signature(tmp_path: Path, fake: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    module = _module(tmp_path, "fake_cuda_d")
    x = fake_cuda.cuda_tensor(torch.ones((4, 256), dtype=torch.float16))
    w = fake_cuda.cuda_tensor(torch.ones((256,), dtype=torch.float16))
    module.scale(x, w)
    module.scale(x, w)
    route = next(iter(module.scale._plan._dispatch.values())).route
    monkeypatch.setattr(route, "_current", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    with pytest.raises(KtuneError, match=r"argument x is on cuda:0, which is not the current device \(cuda:1\)"):
        module.scale(x, w)


def test_a_launch_on_another_current_device_goes_through_the_rawkernel(tmp_path: Path, fake: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, "fake_cuda_e")
    x, w = fake.empty((4, 256), np.float16), fake.empty((256,), np.float16)
    module.scale(x, w)
    entry = next(iter(module.scale._plan._dispatch.values()))
    raw = entry.kernel._fn.kernel
    through: list[int] = []

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        through.append(1)
        self.kernel(*args[:3])

    monkeypatch.setattr(type(raw), "__call__", counted)
    module.scale(x, w)
    assert through == []  # straight to CuPy's function
    fake_cuda.CURRENT[0] = 1  # CuPy's current device is another now
    module.scale(x, w)
    assert through == [1]  # the RawKernel finds the device's own function
    fake_cuda.CURRENT[0] = 0
    module.scale(x, w)
    assert through == [1]  # and back on its own device, straight again


def test_a_torch_launch_on_another_current_cupy_device_goes_through_the_rawkernel(
        tmp_path: Path, fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    module = _module(tmp_path, "fake_cuda_f")
    x = fake_cuda.cuda_tensor(torch.ones((4, 256), dtype=torch.float16))
    w = fake_cuda.cuda_tensor(torch.ones((256,), dtype=torch.float16))
    module.scale(x, w)
    module.scale(x, w)
    raw = next(iter(module.scale._plan._dispatch.values())).kernel._fn.kernel
    through: list[Any] = []

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        through.append(kwargs.get("stream"))
        self.kernel(*args[:3], 0, kwargs.get("stream"))

    monkeypatch.setattr(type(raw), "__call__", counted)
    module.scale(x, w)
    assert through == []
    fake_cuda.CURRENT[0] = 1
    module.scale(x, w)
    assert len(through) == 1 and through[0].ptr == fake_cuda.STREAM  # the RawKernel, still on torch's stream


def test_a_params_file_edited_while_calls_run_straight_is_followed(tmp_path: Path, fake: Any) -> None:
    from pytest_ktune import backends
    from pytest_ktune.core import paramsfile

    module = _module(tmp_path, "fake_cuda_g")
    x, w = fake.empty((4, 256), np.float16), fake.empty((256,), np.float16)
    params = tmp_path / "ktune-params.json"
    device = backends.create("cuda").device.id
    rec = {"target": "fake_cuda_g.py::scale", "device": device,
           "key": {"N": 256, "dtype": "float16", "alpha": 1.0}, "params": {"BLOCK": 64}}
    _prod.write_params(params, [rec])
    for _ in range(3):
        module.scale(x, w)
    fn = _function(module)
    assert fn.last.block == (64,)
    paramsfile.watch(params).check_every(0.0)  # every call looks at the file (at most once a second otherwise)
    _prod.write_params(params, [{**rec, "params": {"BLOCK": 128}}])
    os.utime(params, ns=(1, 1))
    module.scale(x, w)  # a signature the cache knows, by position: the follow-up runs before the lookup
    assert _function(module).last.block == (128,)


def test_the_handle_allocates_with_cupys_own_functions_and_reads_parameters_as_before(
        tmp_path: Path, fake: Any) -> None:
    module = _module(tmp_path, "fake_cuda_h")
    x, w = fake.empty((4, 256), np.float16), fake.empty((256,), np.float16)
    module.scale(x, w)
    kernel = next(iter(module.scale._plan._dispatch.values())).kernel
    assert kernel["BLOCK"] == 128 and kernel.params["BLOCK"] == 128
    with pytest.raises(KeyError):
        kernel["NOPE"]
    strided = fake.ndarray((4, 8), np.float32, strides=(4, 16))
    like = kernel.empty_like(strided)
    assert isinstance(like, fake.ndarray) and like.shape == (4, 8) and like.flags.c_contiguous
    assert kernel.empty(5, np.float32).shape == (5,) and kernel.empty((2, 3), "float16").dtype == np.float16


def test_a_failed_straight_launch_names_the_target_and_the_kernel(tmp_path: Path, fake: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, "fake_cuda_i")
    x, w = fake.empty((4, 256), np.float16), fake.empty((256,), np.float16)
    module.scale(x, w)
    fn = _function(module)

    def broken(*args: Any) -> None:
        raise TypeError("bad argument")

    monkeypatch.setattr(type(fn), "__call__", broken)
    with pytest.raises(KtuneError, match=r"launch of kernel scale .* failed: TypeError: bad argument") as err:
        module.scale(x, w)
    assert "target scale" in str(err.value)


def test_the_torch_op_reaches_the_positional_fast_path_even_called_with_a_default_by_name(
        tmp_path: Path, fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Inductor's generated code calls an op with its scalar defaults by name (``eps=1e-06``); the dispatcher
    # hands the implementation its arguments by position, defaults left out.
    torch = pytest.importorskip("torch")
    import ktune

    module = _module(tmp_path, "fake_cuda_j")
    op = ktune.torch_op(module.scale, name="fake_cuda_j_scale")
    x = fake_cuda.cuda_tensor(torch.ones((4, 256), dtype=torch.float16))
    w = fake_cuda.cuda_tensor(torch.ones((256,), dtype=torch.float16))
    op(x, w)
    op(x, w)
    plan = module.scale._plan

    def by_name(*args: Any) -> Any:
        raise AssertionError("the call was bound by name")

    monkeypatch.setattr(plan, "_call", by_name)
    out = op.op(x, w, alpha=1.0)
    assert isinstance(out, torch.Tensor) and out.shape == (4, 256)
    assert _function(module).last.args[1].val == x.data_ptr()


def test_a_two_dimensional_grid_launches_straight_and_a_bad_one_is_still_named(tmp_path: Path, fake: Any) -> None:
    text = MODULE.replace("KEYS = [0]", "KEYS = [0]\nGRID_Y = [2]").replace("grid=rows,", "grid=(rows, GRID_Y[0]),")
    module, x, w, fn = _warm(tmp_path, "fake_cuda_grid2", text, fake)
    before = fn.calls
    module.scale(x, w)
    assert fn.calls == before + 1 and fn.last.grid == (4, 2) and fn.last.block == (128, 1)
    assert _python_calls(lambda: module.scale(x, w)) <= 4  # as a 1-D grid's call: the checks are not run again
    module.GRID_Y[0] = 0
    with pytest.raises(KtuneError, match=r"grid \(4, 0\) and block \(128, 1\) must be positive"):
        module.scale(x, w)


def test_python_scalars_are_converted_once_a_value_on_the_straight_path(tmp_path: Path, fake: Any) -> None:
    module, x, w, fn = _warm(tmp_path, "fake_cuda_scalars", MODULE.replace("np.int32(n), np.float32(alpha)",
                                                                           "n, alpha"), fake)
    for alpha in (1.5, 2.5, 1.5, -0.0, 0.0):
        module.scale(x, w, alpha)
        n, a = fn.last.args[3:]
        assert type(n) is np.int32 and n == 256
        assert type(a) is np.float32 and a == np.float32(alpha) and np.signbit(a) == np.signbit(alpha)
    first = fn.last.args[3]
    module.scale(x, w, 1.5)
    assert fn.last.args[3] is first  # the conversion of 256 made once, taken again
    assert _python_calls(lambda: module.scale(x, w, 1.5)) <= 5  # the 1-D call's frames and the conversion's
    (entry,) = {id(e): e for e in module.scale._plan._dispatch.values() if e.key["alpha"] == 1.0}.values()
    cuda_fn = entry.kernel._fn
    for i in range(300):  # many values at one place: the values kept there stay few
        cuda_fn.convert([None, None, None, i + 1, float(i + 1)])
    assert all(len(seen) <= 256 for _, _, seen in cuda_fn._convert)
