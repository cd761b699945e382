"""On the GPU, with torch: production calls on torch CUDA tensors launch on torch's current stream, can be
captured in a CUDA graph and replayed, and run inside torch.compile(fullgraph=True) through ktune.torch_op
(needs CUDA and a CUDA build of torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ktune
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.errors import KtuneError

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch (pip install torch) for the torch tests")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device (a CPU build of torch, or no GPU)", allow_module_level=True)

# Imported as the ktune command line imports targets, which puts the repository on sys.path.
KERNELS = Path(__file__).resolve().parents[2] / "example_project" / "kernels"
import_file(KERNELS / "rmsnorm.py")

from example_project.kernels.rmsnorm import rmsnorm  # noqa: E402
from example_project.kernels.silu_and_mul import silu_and_mul  # noqa: E402

H, INTER, EPS = 4096, 14336, 1e-6


def _rms_ref(x: Any, w: Any) -> Any:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).half()


def _silu_ref(x: Any) -> Any:
    g, u = x[:, :INTER].float(), x[:, INTER:].float()
    return (g * torch.sigmoid(g) * u).half()


def _close(got: Any, want: Any) -> None:
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def _inputs(t: int, seed: int = 0) -> tuple[Any, Any, Any]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((t, H), device="cuda", dtype=torch.float16, generator=gen)
    w = torch.rand((H,), device="cuda", dtype=torch.float16, generator=gen) + 0.5
    g = torch.randn((t, 2 * INTER), device="cuda", dtype=torch.float16, generator=gen)
    return x, w, g


def test_a_call_on_torch_tensors_returns_torch_tensors_from_torchs_allocator() -> None:
    x, w, g = _inputs(16)
    before = torch.cuda.memory_allocated()
    y = rmsnorm(x, w)
    assert isinstance(y, torch.Tensor) and y.device == x.device and y.dtype == torch.float16
    assert torch.cuda.memory_allocated() >= before + y.nbytes  # made by torch's caching allocator
    _close(y, _rms_ref(x, w))
    _close(silu_and_mul(g), _silu_ref(g))


def test_launches_go_on_torchs_current_stream() -> None:
    """On a side stream, the kernel must run after the copy queued before it on that stream: the copy waits
    behind a sleep, so a kernel launched on any other stream would read the old input."""
    x, w, _ = _inputs(16)
    new = torch.randn_like(x)
    rmsnorm(x, w)  # compiled outside the timed part
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU cycles
        x.copy_(new)
        y = rmsnorm(x, w)
    side.synchronize()
    _close(y, _rms_ref(new, w))


def test_calls_are_captured_in_a_cuda_graph_and_the_replay_is_correct() -> None:
    x, w, g = _inputs(16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, first lookups) outside the capture, as torch asks
        for _ in range(3):
            rmsnorm(x, w)
            silu_and_mul(g)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # capture errors out on a synchronisation or an allocation outside its pool
        y = rmsnorm(x, w)
        z = silu_and_mul(g)
    for seed in (1, 2):
        nx, nw, ng = _inputs(16, seed)
        x.copy_(nx)
        w.copy_(nw)
        g.copy_(ng)
        graph.replay()
        torch.cuda.synchronize()
        _close(y, _rms_ref(nx, nw))
        _close(z, _silu_ref(ng))


def _recorded(target: Any, key: dict[str, Any]) -> dict[str, Any] | None:
    from pytest_ktune import backends
    from pytest_ktune.core.paths import params_path
    from pytest_ktune.core.store import Store, target_id

    path = params_path(target.file.parent)
    record = Store.load(path).find(target_id(target, path.parent), backends.create("cuda").device.id, key)
    return None if record is None else target.complete(record.params)  # a record of an older space, whole


def test_torch_compile_fullgraph_runs_the_tuned_kernel_through_the_custom_op(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_ktune.call.kernel import ProductionKernel

    rms = ktune.torch_op(rmsnorm)
    silu = ktune.torch_op(silu_and_mul)
    x, w, _ = _inputs(1)
    _, _, g = _inputs(16)
    launched: list[tuple[str, dict[str, Any]]] = []
    original = ProductionKernel.launch

    def spy(self: Any, grid: Any, block: Any, args: Any, *, name: str | None = None) -> None:
        launched.append((self.default_name, dict(self.params)))
        original(self, grid, block, args, name=name)

    def block(x: Any, w: Any, g: Any) -> tuple[Any, Any]:
        return rms(x, w) * 2, silu(g) + 1

    compiled = torch.compile(block, fullgraph=True, dynamic=False)  # a graph break would raise here
    compiled(x, w, g)  # compiles
    monkeypatch.setattr(ProductionKernel, "launch", spy)
    got = compiled(x, w, g)
    torch.cuda.synchronize()
    assert [n for n, _ in launched] == ["rmsnorm", "silu_and_mul"]
    for (_, params), (target, key) in zip(launched, [(rmsnorm, {"T": 1, "H": H, "dtype": "float16"}),
                                                     (silu_and_mul, {"T": 16, "I": INTER, "dtype": "float16"})],
                                          strict=True):
        assert params == (_recorded(target, key) or dict(target.default))
    monkeypatch.undo()
    # The same kernel with the same parameters as a direct call: the same bits.
    torch.testing.assert_close(got[0], rmsnorm(x, w) * 2, rtol=0, atol=0)
    torch.testing.assert_close(got[1], silu_and_mul(g) + 1, rtol=0, atol=0)


def test_bad_cuda_tensors_are_refused_naming_the_target_and_the_argument() -> None:
    x, w, _ = _inputs(16)
    cases: list[tuple[Any, str]] = [
        (lambda: rmsnorm(x, w.cpu()), "argument w is on cpu, while the call runs on cuda:0"),
        (lambda: rmsnorm(x.t().contiguous().t(), w), "argument x is not contiguous"),
        (lambda: rmsnorm(x.double(), w.double()), "argument x has dtype float64"),
    ]
    if torch.cuda.device_count() > 1:
        cases.append((lambda: rmsnorm(x, w.to("cuda:1")), "argument w is on cuda:1"))
    for call, message in cases:
        with pytest.raises(KtuneError) as err:
            call()
        assert message in err.value.render() and "target rmsnorm" in err.value.render(), err.value.render()


def test_after_a_cached_call_on_the_gpu_bad_arguments_are_still_refused_and_shapes_dispatch_again() -> None:
    import cupy as cp

    x, w, _ = _inputs(16)
    for _ in range(3):  # the dispatch cache holds this signature now
        _close(rmsnorm(x, w), _rms_ref(x, w))
    x1, _, _ = _inputs(1, seed=1)
    _close(rmsnorm(x1, w), _rms_ref(x1, w))  # another shape: another signature (and key)
    with pytest.raises(KtuneError, match="argument x has dtype float64"):
        rmsnorm(x.double(), w)
    with pytest.raises(KtuneError, match="argument x is not contiguous"):
        rmsnorm(torch.cat([x, x], dim=1)[:, ::2], w)
    with pytest.raises(KtuneError, match="argument w is on cpu"):
        rmsnorm(x, w.cpu())
    xc, wc = cp.asarray(x), cp.asarray(w)
    for _ in range(3):
        _close(torch.as_tensor(rmsnorm(xc, wc), device="cuda"), _rms_ref(x, w))
    with pytest.raises(KtuneError, match="argument x is not contiguous"):
        rmsnorm(cp.concatenate([xc, xc], axis=1)[:, ::2], wc)
    with pytest.raises(KtuneError, match=r"argument w is a torch"):
        rmsnorm(xc, w)
