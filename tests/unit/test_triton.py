"""The triton backend below the plugin, in Triton's interpreter on CPU tensors: a jit function as a target's
source (its module the source, its constexprs the space), the production call and its route, compile errors
and out-of-resources as the errors the tuner reads, ``ktune.torch_op``, and the export's Python dict."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np
import pytest

from pytest_ktune import CompileError, KtuneError, LaunchError
from pytest_ktune.backends.triton import TritonFunction
from pytest_ktune.core.errors import LimitError

torch = pytest.importorskip("torch", reason="the triton backend runs on torch tensors")
pytest.importorskip("triton", reason="the triton backend needs triton (pip install 'pytest-ktune[triton]')")

KERNELS = '''\
from typing import Any, cast

import numpy as np
import triton
import triton.language as tl

import ktune


@triton.jit
def _add_kernel(X, Y, N, BLOCK: tl.constexpr, SHIFT: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + i, tl.load(X + i, mask=i < N) + SHIFT, mask=i < N)


@ktune.target(
    sources={"triton": _add_kernel},
    space=ktune.Space(BLOCK=[64, 128], SHIFT=[1], num_warps=[1, 4], GRID_ONLY=[0, 1]),
    default={"BLOCK": 64, "SHIFT": 1, "num_warps": 4, "GRID_ONLY": 0},
    key=lambda x: {"N": x.shape[0], "dtype": str(x.dtype).removeprefix("torch.")},
    cases=[ktune.Case(x=ktune.Tensor((1000,), "float32"))],
    reference=lambda x: np.asarray(x, np.float64) + 1,
)
def add_one(kernel: ktune.Kernel, x: Any) -> Any:
    y = kernel.empty_like(x)
    n = x.shape[0]
    kernel.launch(grid=(triton.cdiv(n, kernel["BLOCK"]),), args=[x, y, n])
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
def kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The kernels module, decorated under the interpreter, with a fresh triton backend and route."""
    from pytest_ktune import backends
    from pytest_ktune.call import torchio

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delitem(backends._INSTANCES, "triton", raising=False)
    monkeypatch.setattr(torchio, "_TRITON_ROUTE", [])
    monkeypatch.setenv("KTUNE_PARAMS", str(tmp_path / "ktune-params.json"))
    (tmp_path / "tkernels.py").write_text(KERNELS)
    module = _import(tmp_path / "tkernels.py", f"tkernels_{tmp_path.name}")
    yield module
    backends._INSTANCES.pop("triton", None)
    sys.modules.pop(module.__name__, None)


def test_a_jit_function_is_the_source_its_module_the_text(kernels: ModuleType) -> None:
    t = kernels.add_one
    assert t.sources["triton"] == Path(str(kernels.__file__)).resolve()
    assert t.source_text("triton") == Path(str(kernels.__file__)).read_text()
    view = t.for_backend("triton")
    assert view.kernel_name == "_add_kernel"  # the jit function's own name, not the launcher's
    assert t.kernel_name == "add_one"


def test_a_module_path_names_the_source_and_a_bad_one_says_what_to_give(kernels: ModuleType) -> None:
    import ktune

    by_name = ktune.target(sources={"triton": f"{kernels.__name__}:_add_kernel"}, space=ktune.Space(BLOCK=[64]),
                           default={"BLOCK": 64}, key=lambda x: {}, cases=[ktune.Case(x=ktune.Tensor((8,)))],
                           reference=lambda x: x, name="by_name")(lambda kernel, x: x)
    assert by_name.for_backend("triton").kernel_name == "_add_kernel"
    with pytest.raises(KtuneError, match=r"sources\['triton'\]: a builtins.function is no @triton.jit function"):
        ktune.target(sources={"triton": lambda: None}, space=ktune.Space(BLOCK=[64]), default={"BLOCK": 64},
                     key=lambda x: {}, cases=[ktune.Case(x=ktune.Tensor((8,)))],
                     reference=lambda x: x, name="bad")(lambda kernel, x: x)


def test_the_production_call_runs_on_cpu_tensors_compiled_once_per_configuration(kernels: ModuleType) -> None:
    t = kernels.add_one
    x = torch.arange(1000, dtype=torch.float32)
    y = t(x)
    assert isinstance(y, torch.Tensor) and torch.equal(y, x + 1)
    plan = t._plan
    (entry,) = plan._entries.values()
    first = entry.kernel
    assert torch.equal(t(x * 2), x * 2 + 1)
    (entry,) = plan._entries.values()
    assert entry.kernel is first and first.launches == 2  # one handle, one program, for the key
    with pytest.raises(KtuneError, match="argument x has dtype float64, which the target does not declare"):
        t(x.double())


def test_constexprs_and_launch_options_reach_the_launch_the_rest_stays_the_launcher_s(kernels: ModuleType) -> None:
    from pytest_ktune import backends
    from pytest_ktune.measure.runtime import run

    backend = backends.create("triton")
    t = kernels.add_one.for_backend("triton")
    x = backend.to_device(np.arange(1000, dtype=np.float32))
    out, launches = run(backend, t, {"BLOCK": 128, "SHIFT": 1, "num_warps": 1, "GRID_ONLY": 1}, {"x": x})
    np.testing.assert_array_equal(backend.to_host(out), np.arange(1000) + 1)
    (launch,) = launches
    assert launch.grid == (8,) and launch.block == (32,)  # one warp of 32 threads per program
    assert cast(TritonFunction, launch.function).kwargs == {"BLOCK": 128, "SHIFT": 1, "num_warps": 1}


class _Raising:
    """A stand-in jit function whose launch raises ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            raise self.exc

        return launch


def test_out_of_resources_is_a_limit_and_a_compile_error_a_compile_error(kernels: ModuleType) -> None:
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    from pytest_ktune import backends
    from pytest_ktune.backends.triton import TritonBackend, TritonFunction

    backend = cast(TritonBackend, backends.create("triton"))
    limits = TritonFunction(backend, _Raising(OutOfResources(262144, 232448, "shared memory")), "k", {},
                            filename="k.py")
    with pytest.raises(LimitError, match="out of resource: shared memory, Required: 262144"):
        limits.launch((1,), (128,), ())
    broken = TritonFunction(backend, _Raising(CompilationError("src", None, "bad constexpr")), "k",
                            {"BLOCK": 3}, filename="k.py")
    with pytest.raises(CompileError, match=r"Triton cannot compile k with \{'BLOCK': 3\}"):
        broken.launch((1,), (128,), ())
    with pytest.raises(LaunchError, match="TypeError"):
        TritonFunction(backend, _Raising(TypeError("no")), "k", {}, filename="k.py").launch((1,), (32,), ())


def test_a_kernel_of_a_program_never_declared_is_a_compile_error(kernels: ModuleType) -> None:
    from pytest_ktune import backends

    backend = backends.create("triton")
    text = Path(str(kernels.__file__)).read_text()
    program = backend.compile(text + "\n# a comment changes no program\n", {"BLOCK": 64}, filename="tkernels.py")
    assert cast(TritonFunction, program.function("_add_kernel")).jit is kernels._add_kernel
    with pytest.raises(CompileError, match=r"no @triton\.jit function _other declared from this version"):
        program.function("_other")
    with pytest.raises(CompileError, match=r"no @triton\.jit function _add_kernel"):
        backend.compile(text.replace("+ SHIFT", "- SHIFT"), {}, filename="tkernels.py").function("_add_kernel")


def test_torch_op_runs_a_triton_target(kernels: ModuleType) -> None:
    import ktune

    op = ktune.torch_op(kernels.add_one, namespace=f"ktune_test_{id(kernels) % 10**6}")
    x = torch.ones(1000)
    assert torch.equal(op(x), x + 1)


def test_export_writes_a_python_dict_a_dispatch_can_read(kernels: ModuleType, tmp_path: Path) -> None:
    from pytest_ktune.report.export import Entry, Exported, render_python

    exported = Exported("tkernels.py::add_one", "add_one", ("BLOCK", "num_warps"), {"BLOCK": 64, "num_warps": 4},
                        ("N",), (Entry("NVIDIA H200 [triton]", {"N": 1000}, {"BLOCK": 128, "num_warps": 1}),))
    text = render_python([exported], "ktune-params.json")
    assert render_python([exported], "ktune-params.json") == text  # deterministic
    namespace: dict[str, Any] = {}
    exec(compile(text, "exported.py", "exec"), namespace)  # the module the export writes
    lookup = namespace["lookup"]
    assert lookup("add_one", "NVIDIA H200 [triton]", N=1000) == {"BLOCK": 128, "num_warps": 1}
    assert lookup("add_one", "NVIDIA H200 [triton]", N=7) == {"BLOCK": 64, "num_warps": 4}
