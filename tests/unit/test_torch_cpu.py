"""torch tensors in production calls on the CPU (the OpenCL backend, by a host copy), their bad input, and
``ktune.torch_op``: a torch custom op that torch.compile(fullgraph=True) compiles without a graph break."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ktune
from pytest_ktune.core.errors import KtuneError

from . import _prod

torch = pytest.importorskip("torch", reason="torch (pip install torch) for the torch tests")
pytest.importorskip("pyopencl")

X = torch.arange(100, dtype=torch.float32)


def _module(tmp_path: Path, name: str, scale: int | None = 5) -> Any:
    module = _prod.load(tmp_path, name)
    if scale is not None:
        device = _prod.default_device_id()
        _prod.write_params(tmp_path / "ktune-params.json",
                           [_prod.record(name, t, device, 100, scale) for t in ("scale", "addto")])
    return module


def test_cpu_tensors_run_with_the_recorded_parameters_and_come_back_as_tensors(tmp_path: Path) -> None:
    module = _module(tmp_path, "torch_a")
    out = module.scale(X)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.device.type == "cpu"
    torch.testing.assert_close(out, X * 5)


def test_an_argument_updated_in_place_is_updated_in_the_callers_tensor(tmp_path: Path) -> None:
    module = _module(tmp_path, "torch_b")
    acc = torch.ones(100)
    out, back = module.addto(X, acc)
    assert back is acc
    torch.testing.assert_close(acc, X + 1)
    torch.testing.assert_close(out, (X + 1) * 5)


def test_bad_tensors_are_refused_naming_the_target_and_the_argument(tmp_path: Path) -> None:
    module = _module(tmp_path, "torch_c")
    cases: list[tuple[Any, str]] = [
        (lambda: module.scale(X.double()), "argument x has dtype float64, which the target does not declare"),
        (lambda: module.scale(torch.arange(200, dtype=torch.float32)[::2]), "argument x is not contiguous"),
        (lambda: module.addto(X, torch.ones(100, device="meta")), "argument acc is on meta"),
        (lambda: module.scale(torch.ones(100, device="meta")), "argument x is on meta, where no backend runs"),
        (lambda: module.addto(X, np.ones(100, np.float32)), "argument acc is a numpy.ndarray"),
        (lambda: module.scale(X.to(torch.complex64)), "argument x has dtype torch.complex64"),
    ]
    for call, message in cases:
        with pytest.raises(KtuneError) as err:
            call()
        assert message in err.value.render() and err.value.where.startswith("target "), err.value.render()


def test_a_cpu_tensor_for_a_cuda_only_target_is_refused(tmp_path: Path) -> None:
    module = _module(tmp_path, "torch_d", scale=None)
    with pytest.raises(KtuneError) as err:
        module.cuda_only(X)
    text = err.value.render()
    assert "target cuda_only" in text and "argument x is a torch tensor on the CPU" in text and "x.cuda()" in text


def test_torch_op_has_a_schema_from_the_signature_and_passes_torchs_op_checks(tmp_path: Path) -> None:
    module = _module(tmp_path, "torch_e")
    op = ktune.torch_op(module.scale, name="torch_e_scale")
    assert op.schema == "(Tensor x) -> Tensor"
    assert ktune.torch_op(module.scale) is op  # registered once per target
    mutating = ktune.torch_op(module.addto, name="torch_e_addto")
    assert mutating.schema == "(Tensor x, Tensor(a!) acc, float alpha=1.0) -> Tensor"
    for custom, args in ((op, (X,)), (mutating, (X, torch.ones(100)))):
        assert set(torch.library.opcheck(custom.op, args).values()) == {"SUCCESS"}


def test_torch_compile_fullgraph_runs_the_tuned_kernel_through_the_op(tmp_path: Path) -> None:
    module = _module(tmp_path, "torch_f")
    scale = ktune.torch_op(module.scale, name="torch_f_scale")
    addto = ktune.torch_op(module.addto, name="torch_f_addto")

    def forward(self: Any, x: Any, acc: Any) -> Any:
        y = scale(x) + 1
        out, acc = addto(y, acc)
        return out - acc

    Block = type("Block", (torch.nn.Module,), {"forward": forward})
    compiled = torch.compile(Block(), fullgraph=True, backend="aot_eager")
    acc, acc_eager = torch.ones(100), torch.ones(100)
    got = compiled(X, acc)
    want = Block()(X, acc_eager)
    # The tuned SCALE=5 (the default is 2): y = 5x + 1, acc += y, out = 5 acc, out - acc = 4 acc.
    torch.testing.assert_close(got, 4 * (1 + 5 * X + 1))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(acc, acc_eager)  # the in-place update happened in the compiled graph too
