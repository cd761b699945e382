"""Direct launches of a Triton target's compiled kernels (``backends.triton_direct``), on a fake Triton runtime
(``testing.fake_triton``): taken after a specialization's first call, a new variant for a new alignment, dtype or
integer 1, the JIT's way for hooks, the interpreter and unknown arguments, today's errors; and, on a GPU, the
production call's output for aligned, misaligned and odd-sized tensors."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np
import pytest

from pytest_ktune import LaunchError
from pytest_ktune.backends import triton_direct
from pytest_ktune.testing.fake_triton import FakeTriton, JITFunction, WrongVariant

torch = pytest.importorskip("torch", reason="the triton backend runs on torch tensors")
pytest.importorskip("triton", reason="the triton backend needs triton (pip install 'pytest-ktune[triton]')")


constexpr = Any  # what the fake reads of an annotation: its text, as Triton does


def _kernel(X: Any, Y: Any, N: Any, BLOCK: constexpr, SHIFT: constexpr = 1) -> None:
    raise AssertionError("a fake kernel never runs")


class _Device:
    max_threads_per_block = 1024


class _Backend:
    """What a TritonFunction reads of its backend."""

    def __init__(self, rt: Any) -> None:
        from pytest_ktune.backends.triton import _Errors

        self.errors = _Errors()
        self.device = _Device()
        self.direct = rt


@pytest.fixture
def fake() -> FakeTriton:
    return FakeTriton()


def _function(fake: FakeTriton, jit: JITFunction | None = None, **kwargs: Any) -> Any:
    from pytest_ktune.backends.triton import TritonFunction

    jit = jit or fake.jit(_kernel)
    return TritonFunction(cast(Any, _Backend(fake.runtime())), jit, "_kernel", kwargs or {"BLOCK": 64, "num_warps": 4},
                          filename="k.py")


def _tensors(n: int = 1024, dtype: Any = None) -> tuple[Any, Any]:
    dtype = dtype or torch.float32
    return torch.zeros(n, dtype=dtype), torch.zeros(n, dtype=dtype)


def test_the_direct_path_is_taken_after_the_first_call_with_every_argument(fake: FakeTriton) -> None:
    fn = _function(fake)
    x, y = _tensors()
    for _ in range(3):
        fn.launch((16,), (128,), [x, y, 1024])
    assert fn.jit.calls == 1 and fn.jit.compiles == 1 and fn.direct.launches == 2
    first, *later = fake.launches
    assert all(launch.kernel is first.kernel for launch in later)
    # the grid padded to three, the current stream, the constexprs of the configuration and the defaults
    assert [launch.grid for launch in fake.launches] == [(16, 1, 1)] * 3
    assert all(launch.stream == fake.current_stream(0) for launch in fake.launches)
    assert later[0].args == (x, y, 1024, 64, 1) == first.args


@pytest.mark.parametrize(("change", "what"), [
    (lambda x, y, n: (x[1:1001], y[1:1001], n), "a misaligned view"),
    (lambda x, y, n: (x.half(), y.half(), n), "another dtype"),
    (lambda x, y, n: (x, y, 1), "an integer equal to 1"),
    (lambda x, y, n: (x, y, 1001), "an integer not divisible by 16"),
    (lambda x, y, n: (x, y, 1 << 40), "a 64-bit integer"),
])
def test_a_new_specialization_takes_its_own_variant(fake: FakeTriton, change: Any, what: str) -> None:
    fn = _function(fake)
    x, y = _tensors()
    fn.launch((16,), (128,), [x, y, 1024])
    fn.launch((16,), (128,), [x, y, 1024])
    other = list(change(x, y, 1024))
    for _ in range(2):
        fn.launch((16,), (128,), other)  # the fake's launcher fails a kernel of another specialization
    assert fn.jit.compiles == 2, what
    assert fn.jit.calls == 2 and fn.direct.launches == 2
    assert fake.launches[-1].kernel is not fake.launches[0].kernel
    fn.launch((16,), (128,), [x, y, 1024])  # and the first one is kept
    assert fake.launches[-1].kernel is fake.launches[0].kernel and fn.jit.calls == 2


def test_the_integer_1_is_a_constant_no_other_integer_shares(fake: FakeTriton) -> None:
    fn = _function(fake)
    x, y = _tensors()
    for n in (1, 1, 17, 17, 1):
        fn.launch((16,), (128,), [x, y, n])  # 17 on the kernel of the constant 1 would fail the fake's launcher
    assert fn.jit.compiles == 2 and fn.direct.launches == 3


def test_a_wrong_variant_is_what_the_fake_catches(fake: FakeTriton) -> None:
    fn = _function(fake)
    x, y = _tensors()
    fn.launch((16,), (128,), [x, y, 1024])
    kernel = fake.launches[0].kernel
    with pytest.raises(WrongVariant, match="specializes as"):
        kernel.run(16, 1, 1, 0, kernel.function, None, None, None, None, x[1:], y, 1024, 64, 1)


@pytest.mark.parametrize("hook", ["enter", "exit", "pre_run", "stages"])
def test_hooks_send_every_call_through_the_jit(fake: FakeTriton, hook: str) -> None:
    fn = _function(fake)
    x, y = _tensors()
    fn.launch((16,), (128,), [x, y, 1024])
    seen: list[Any] = []
    runtime = fake.knobs.runtime
    if hook == "enter":
        runtime.launch_enter_hook.add(seen.append)
    elif hook == "exit":
        runtime.launch_exit_hook = seen.append  # a plain callable, as older Tritons took
    elif hook == "pre_run":
        fn.jit.pre_run_hooks.append(lambda *a, **k: seen.append(a))
    else:
        runtime.add_stages_inspection_hook = lambda: ("k", "h")
    fn.launch((16,), (128,), [x, y, 1024])
    fn.launch((16,), (128,), [x, y, 1024])
    assert fn.jit.calls == 3 and fn.direct.launches == 0
    if hook != "stages":
        assert len(seen) == 2


def test_unknown_arguments_a_grid_function_and_a_changed_global_go_the_jit_s_way(fake: FakeTriton) -> None:
    fn = _function(fake)
    x, y = _tensors()
    fn.launch((16,), (128,), [x, y, np.int32(1024)])  # a numpy scalar: converted, through the JIT
    fn.launch((16,), (128,), [x, y, np.int32(1024)])
    assert fn.jit.calls == 2 and fn.direct.launches == 0
    fn.launch((16,), (128,), [x, y, 1024])
    fn.launch(lambda meta: (16,), (128,), [x, y, 1024])
    assert fn.jit.calls == 4
    module: dict[str, Any] = {"SCALE": 2}
    fn.jit.used_global_vals[("SCALE", id(module))] = (2, module)
    fn.launch((16,), (128,), [x, y, 1024])
    assert fn.direct.launches == 1
    module["SCALE"] = 3
    with pytest.raises(LaunchError, match="Global variable SCALE has changed"):
        fn.launch((16,), (128,), [x, y, 1024])


def test_another_device_or_debug_knob_is_another_key(fake: FakeTriton) -> None:
    fn = _function(fake)
    x, y = _tensors()
    fn.launch((16,), (128,), [x, y, 1024])
    fake.device = 1
    fn.launch((16,), (128,), [x, y, 1024])
    fake.knobs.runtime.debug = True
    fn.launch((16,), (128,), [x, y, 1024])
    assert fn.jit.calls == 3 and fn.jit.compiles == 3
    fn.launch((16,), (128,), [x, y, 1024])
    assert fn.direct.launches == 1 and fake.launches[-1].stream == fake.current_stream(1)


def test_a_constexpr_given_at_the_call_is_keyed_by_its_value_and_type(fake: FakeTriton) -> None:
    fn = _function(fake, num_warps=4)
    x, y = _tensors()
    for shift in (3, 3, 4, 1.0, 1, 1):
        fn.launch((16,), (128,), [x, y, 1024, 64, shift])
    # 3, 4, 1.0, 1: four kernels (1 and 1.0 are two constants to Triton), two direct launches (the second 3, 1)
    assert fn.jit.compiles == 4 and fn.jit.calls == 4 and fn.direct.launches == 2


def test_errors_of_a_direct_launch_keep_the_jit_s_messages(fake: FakeTriton) -> None:
    from pytest_ktune.core.errors import LimitError

    fn = _function(fake)
    x, y = _tensors()
    fn.launch((16,), (128,), [x, y, 1024])
    with pytest.raises(LimitError, match="2048 threads per program"):
        fn.launch((16,), (2048,), [x, y, 1024])
    kept = next(iter(fn.direct.kernels))
    broken = RuntimeError("Triton Error [CUDA]: invalid argument")

    def fail(*args: Any) -> None:
        raise broken

    kernel, _, function, meta = fn.direct.kernels[kept]
    fn.direct.kernels[kept] = (kernel, fail, function, meta)
    with pytest.raises(LaunchError, match=r"launching _kernel on grid \(16,\) failed: RuntimeError: Triton Error"):
        fn.launch((16,), (128,), [x, y, 1024])


def test_no_direct_path_on_the_interpreter_for_other_functions_or_when_turned_off(
        fake: FakeTriton, monkeypatch: pytest.MonkeyPatch) -> None:
    assert triton_direct.Direct.of(object(), {}, fake.runtime()) is None
    assert triton_direct.Direct.of(fake.jit(_kernel), {}, None) is None
    assert triton_direct.Direct.of(fake.jit(lambda *xs: None), {}, fake.runtime()) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from pytest_ktune.backends.triton import TritonBackend

    assert TritonBackend().direct is None  # the interpreter runs each launch in Python: nothing to keep
    monkeypatch.setenv(triton_direct.ENV, "0")
    triton_direct.runtime.cache_clear()
    try:
        assert triton_direct.runtime() is None
    finally:
        triton_direct.runtime.cache_clear()


def test_a_backend_with_its_own_tensor_rule_is_never_launched_directly(fake: FakeTriton) -> None:
    fn = _function(fake)
    x, y = _tensors()
    fn.launch((16,), (128,), [x, y, 1024])
    fn.jit.device_caches[0][3].supports_native_tensor_specialization = False
    fn.direct.kernels.clear()
    for _ in range(3):
        fn.launch((16,), (128,), [x, y, 1024])
    assert fn.direct.launches == 0 and fn.jit.calls == 4


# -- the production call, end to end on the fake ------------------------------------------------------------
KERNELS = '''\
from typing import Any

import numpy as np

import ktune
from pytest_ktune.testing.fake_triton import FakeTriton

FAKE = FakeTriton()


@FAKE.jit
def _add_kernel(X, Y, N, BLOCK: "tl.constexpr"):
    raise AssertionError("never runs")


@ktune.target(
    sources={"triton": _add_kernel},
    space=ktune.Space(BLOCK=[64, 128], num_warps=[1, 4]),
    default={"BLOCK": 64, "num_warps": 4},
    key=lambda x: {"N": x.shape[0]},
    cases=[ktune.Case(x=ktune.Tensor((1000,), "float32"))],
    reference=lambda x: np.asarray(x, np.float64) + 1,
)
def add_one(kernel: ktune.Kernel, x: Any) -> Any:
    y = kernel.empty_like(x)
    n = x.shape[0]
    kernel.launch(grid=((n + kernel["BLOCK"] - 1) // kernel["BLOCK"],), args=[x, y, n])
    return y
'''


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def on_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A target whose jit function is the fake's, on a triton backend of CPU tensors that launches directly."""
    from pytest_ktune.testing.fake_triton import backend_installed

    (tmp_path / "fkernels.py").write_text(KERNELS)
    module = _import(tmp_path / "fkernels.py", f"fkernels_{tmp_path.name}")
    monkeypatch.setenv("KTUNE_PARAMS", str(tmp_path / "ktune-params.json"))
    with backend_installed(module.FAKE.runtime()):
        yield module
    sys.modules.pop(module.__name__, None)


def test_the_production_call_launches_directly_after_its_first_call(on_fake: ModuleType) -> None:
    fake, jit = on_fake.FAKE, on_fake._add_kernel
    x = torch.zeros(1000)
    for _ in range(5):
        on_fake.add_one(x)
    assert jit.compiles == 1 and jit.calls == 1 and len(fake.launches) == 5
    on_fake.add_one(torch.zeros(1001)[1:])  # a misaligned view: its own variant, then direct
    on_fake.add_one(torch.zeros(1001)[1:])
    assert jit.compiles == 2 and jit.calls == 2 and len(fake.launches) == 7
    assert fake.launches[-1].args[2:] == (1000, 64)  # N, then the recorded BLOCK


# -- Triton's own runtime, on a fake CUDA driver -----------------------------------------------------------
def _values() -> list[Any]:
    base = torch.zeros(64, dtype=torch.float16)
    tensors = [base, base[1:], base[8:], base.float(), base.float()[3:], base.to(torch.bfloat16), base.int()]
    ints = [0, 1, -1, 2, 15, 16, 17, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -2**31, -2**31 - 1, 2**32,
            2**63 - 16, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 16, 2**64 - 1]
    return [*tensors, *ints, True, False, 0.0, 1.0, 1e-6, None]


def test_the_key_is_at_least_as_fine_as_triton_s_own() -> None:
    """Two arguments that the direct key cannot tell apart are one specialization to Triton's native rule."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    fake = FakeTriton()
    direct = triton_direct.Direct.of(fake.jit(lambda X: None), {}, fake.runtime())
    assert direct is not None
    seen: dict[tuple[Any, ...], Any] = {}
    for a in _values():
        ours = direct.key([a])
        assert ours is not None, a
        theirs = native_specialize_impl(backend, a, False, True, True)
        theirs = (theirs[0], theirs[1] if theirs[0] != "constexpr" else (type(theirs[1]), theirs[1]))
        assert seen.setdefault(ours, theirs) == theirs, (a, ours)
    assert direct.key([2**64]) is None  # too wide for Triton: its JIT says so


TRITON_KERNELS = """\
import triton
import triton.language as tl


@triton.jit
def _scale(X, Y, N, eps, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + i, tl.load(X + i, mask=i < N) * eps, mask=i < N)
"""


@pytest.fixture
def driver(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Triton's own runtime on the fake driver, with a jit function decorated for it (not the interpreter)."""
    from pytest_ktune.testing.fake_triton import FakeDriver

    if torch.cuda.is_available():  # a real driver is Triton's there, and the gpu test runs these launches on it
        pytest.skip("the fake CUDA driver stands in for a GPU; this machine has one (see the gpu test)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "triton-cache"))
    path = tmp_path_factory.mktemp("tk") / "tkernels_direct.py"
    path.write_text(TRITON_KERNELS)
    module = _import(path, f"tkernels_direct_{path.parent.name}")
    fake_driver = FakeDriver()
    with fake_driver.installed():
        yield fake_driver, module._scale
    sys.modules.pop(module.__name__, None)


def test_triton_s_own_kernels_launch_directly_and_each_variant_gets_its_own_arguments(driver: Any) -> None:
    from pytest_ktune.backends.triton import TritonFunction

    fake_driver, jit = driver
    rt = triton_direct.runtime()
    assert rt is not None and rt.jit_type is type(jit)
    fn = TritonFunction(cast(Any, _Backend(rt)), jit, "_scale", {"BLOCK": 64, "num_warps": 4}, filename="k.py")
    x, y = torch.zeros(1025, dtype=torch.float16), torch.zeros(1025, dtype=torch.float16)
    calls = [[x[:1024], y[:1024], 1024, 0.5], [x[:1024], y[:1024], 1024, 0.5], [x[1:], y[1:], 1024, 0.5],
             [x[1:], y[1:], 1024, 0.5], [x, y, 1, 0.5], [x, y, 1, 0.5], [x, y, 1024, 0.5]]
    for args in calls:  # the fake driver's launchers fail a launch that does not fit its kernel
        fn.launch((16,), (128,), args)
    assert fn.direct is not None and fn.direct.launches == 4
    assert len(jit.device_caches[0][0]) == 3  # aligned, misaligned and N=1: three kernels Triton compiled
    assert [launch.args[:3] for launch in fake_driver.launches] == [tuple(a[:3]) for a in calls]
    assert all(launch.args[-1] == 64 for launch in fake_driver.launches)  # the configuration's BLOCK


def test_triton_s_launch_hooks_are_called_through_the_jit(driver: Any) -> None:
    from triton import knobs

    from pytest_ktune.backends.triton import TritonFunction

    _, jit = driver
    rt = triton_direct.runtime()
    fn = TritonFunction(cast(Any, _Backend(rt)), jit, "_scale", {"BLOCK": 64}, filename="k.py")
    x, y = torch.zeros(1024, dtype=torch.float16), torch.zeros(1024, dtype=torch.float16)
    fn.launch((16,), (128,), [x, y, 1024, 0.5])
    seen: list[Any] = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        fn.launch((16,), (128,), [x, y, 1024, 0.5])
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    fn.launch((16,), (128,), [x, y, 1024, 0.5])
    assert len(seen) == 1 and seen[0].get()["name"] == "_scale"  # Triton's launch metadata
    assert fn.direct is not None and fn.direct.launches == 1


# -- on a GPU ----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_direct_launches_compute_what_the_jit_does_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU that torch sees (the triton backend's direct launches)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    from example_project.kernels import triton_rmsnorm as mod
    from pytest_ktune import backends

    if type(mod._rmsnorm_kernel).__name__ != "JITFunction":
        pytest.skip("the example's kernels were decorated under TRITON_INTERPRET=1 in this process")

    monkeypatch.delitem(backends._INSTANCES, "triton", raising=False)
    from pytest_ktune.call import torchio

    monkeypatch.setattr(torchio, "_TRITON_ROUTE", [])
    object.__setattr__(mod.triton_rmsnorm, "_plan", None)

    def reference(x: Any, w: Any) -> Any:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    base = torch.randn(70, 4096 + 8, dtype=torch.float16, device="cuda")
    w = torch.rand(4096, dtype=torch.float16, device="cuda") + 0.5
    odd = torch.randn(33, 4001, dtype=torch.float16, device="cuda")
    w_odd = torch.rand(4001, dtype=torch.float16, device="cuda") + 0.5
    aligned = base[:64, :4096].contiguous()
    misaligned = base.flatten()[3:3 + 64 * 4096].view(64, 4096)  # an offset view: its pointer is 6 bytes off
    assert misaligned.data_ptr() % 16 and not aligned.data_ptr() % 16
    for x, wt in ((aligned, w), (misaligned, w), (odd, w_odd), (aligned, w), (misaligned, w), (odd, w_odd)):
        torch.testing.assert_close(mod.triton_rmsnorm(x, wt), reference(x, wt), atol=2e-2, rtol=2e-2)
    fns = [e.kernel._fn for e in mod.triton_rmsnorm._plan._entries.values()]
    assert all(f.direct is not None and f.direct.launches for f in fns), \
        "a second call did not launch directly on this GPU's Triton"
    # the aligned and the misaligned tensors of one key: two kernels, each kept for its own alignment
    assert max(len(f.direct.kernels) for f in fns if f.direct is not None) >= 2
