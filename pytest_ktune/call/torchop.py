"""A target as a torch custom op: ``ktune.torch_op(target)``, for ``torch.compile(fullgraph=True)``.

``torch.library`` registers the target under ``ktune::<name>``, with a schema made from its
signature and first case (tensors, ints, floats, bools and strings, with their defaults), and a fake
implementation that runs the target's own function with a handle whose ``empty`` makes fake tensors and
whose ``launch`` does nothing: the output shapes and dtypes are the function's, with no second description
to keep in step. Dynamo then sees one opaque op (no graph break); the compiled graph calls the real
implementation, the production call of ``call.plan``, on torch's current stream.

An argument the kernel updates in place and returns (``return out, residual``) is declared mutated in the
schema (torch ops may not return their inputs); the callable ``torch_op`` returns puts it back in its place,
so it returns what the target returns. The op's eager implementation is the target's production call and
nothing else: no wrapper of torch's per call, no schema read, no fake tensors (those run only while tracing).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ktune.call.binding import Binder
from pytest_ktune.core.case import Case, Tensor
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Value
from pytest_ktune.core.target import TRITON, Target

_P = inspect.Parameter
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}
# How the target's result is laid out: each leaf a fresh output (its index among the op's outputs) or an
# argument updated in place (its name); ``single``: the result is one tensor, not a tuple.
Leaf = tuple[str, int | str]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise KtuneError("ktune.torch_op needs torch", hint="pip install torch (2.4 or later)") from None
    return torch


class FakeKernel:
    """The kernel handle of the fake (meta) implementation: outputs as fake tensors, launches skipped."""

    def __init__(self, params: Mapping[str, Value], device: Any, name: str, *, tensors: bool = False) -> None:
        self.params = dict(params)
        self.device = device
        self.default_name = name
        self.backend_name = "fake"
        self.tensors = tensors  # a Triton target's function: torch tensors in and out, as it sees them

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def empty(self, shape: int | Sequence[int], dtype: Any) -> Any:
        from pytest_ktune.backends.torch_dtypes import pair
        from pytest_ktune.call.torchio import TorchArray

        np_dt, torch_dt = pair(dtype)
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        out = _torch().empty(shp, dtype=torch_dt, device=self.device)
        return out if self.tensors else TorchArray(out, np_dt)

    def empty_like(self, a: Any) -> Any:
        return self.empty(tuple(a.shape), a.dtype)

    def launch(self, grid: Any, block: Any = None, args: Sequence[Any] = (), *, name: str | None = None) -> None:
        return None


class TorchOp:
    """A target registered as ``torch.ops.<namespace>.<name>``; calling it calls the op."""

    def __init__(self, target: Target, namespace: str, name: str) -> None:
        torch = _torch()
        self.target = target
        self.qualname = f"{namespace}::{name}"
        self._binder = Binder(target)
        self._layout, self._single = _layout(self, target)
        mutated = [str(v) for kind, v in self._layout if kind == "arg"]
        self.schema = _schema(target, _first_case(target), mutated, sum(k == "out" for k, _ in self._layout))
        # Every leaf a fresh output: the op returns what the target returns, as it is.
        self._fresh_only = all(kind == "out" for kind, _ in self._layout)
        # torch.library.Library, not custom_op: custom_op wraps every eager call in Python (an autograd
        # function, the version bump of mutated arguments, an aliasing check of the result, a dynamo guard),
        # where this registers the implementation itself for every device; the fake implementation is only
        # run by tracing.
        # A target whose every output is fresh is its own implementation: what the dispatcher calls (from
        # eager code and from Inductor's generated code alike) is the production call, with no frame between.
        impl = target if self._fresh_only else self._impl
        try:
            lib = torch.library.Library(namespace, "FRAGMENT")
            lib.define(f"{name}{self.schema}")
            lib.impl(name, impl, "CompositeExplicitAutograd")
            torch.library.register_fake(self.qualname, self._fake, lib=lib)
        except (RuntimeError, ValueError) as exc:
            raise KtuneError(f"torch.library cannot register {self.qualname} ({self.schema}): {exc}",
                             where=target.where, hint="pass ktune.torch_op(target, name=...) another name") from None
        self.library = lib  # the registration lasts as long as this object holds it
        # Called as it is, the OpOverload (whose one frame calls the dispatcher): that is what dynamo traces.
        self.op = getattr(getattr(torch.ops, namespace), name).default

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.op(*args, **kwargs)
        if self._fresh_only:
            return out
        fresh = (out,) if not isinstance(out, (tuple, list)) else tuple(out)
        bound = self._binder.bind(args, kwargs)
        return tuple(fresh[v] if kind == "out" else bound[v] for kind, v in self._layout)  # type: ignore[index]

    def _outputs(self, result: Any) -> Any:
        if self._fresh_only:
            return result
        leaves = (result,) if self._single else tuple(result)
        fresh = [leaf for (kind, _), leaf in zip(self._layout, leaves, strict=True) if kind == "out"]
        return fresh[0] if len(fresh) == 1 else tuple(fresh)

    def _impl(self, *args: Any, **kwargs: Any) -> Any:
        return self._outputs(self.target(*args, **kwargs))

    def _fake(self, *args: Any, **kwargs: Any) -> Any:
        from pytest_ktune.call.torchio import unwrap

        bound = self._binder.bind(args, kwargs)
        return self._outputs(unwrap(_run_fake(self.target, bound)))


def _run_fake(target: Target, bound: Mapping[str, Any]) -> Any:
    """The target's function on fake (or meta) tensors, with launches skipped: outputs of the right shapes."""
    from pytest_ktune.backends.torch_dtypes import NUMPY_OF
    from pytest_ktune.call.torchio import TorchArray

    torch = _torch()
    tensors = TRITON in target.sources  # the function sees torch tensors as they are (call.torchio.TritonRoute)
    device = None
    seen: dict[str, Any] = {}
    for k, v in bound.items():
        if isinstance(v, torch.Tensor):
            device = v.device if device is None else device
            seen[k] = v if tensors else TorchArray(v, NUMPY_OF[v.dtype])
        else:
            seen[k] = v
    view = target.for_backend(TRITON) if tensors else target
    return target.fn(FakeKernel(view.default, device, view.kernel_name, tensors=tensors), **seen)


def _first_case(target: Target) -> Case:
    return target.cases[0]


def _layout(op: TorchOp, target: Target) -> tuple[list[Leaf], bool]:
    """Which leaves of the target's result are new tensors and which are its arguments, from a meta run of
    its first case."""
    from pytest_ktune.backends.torch_dtypes import TORCH_OF
    from pytest_ktune.call.torchio import TorchArray

    torch = _torch()
    case = _first_case(target)
    bound: dict[str, Any] = {}
    for k, v in case.args.items():
        bound[k] = torch.empty(v.shape, dtype=TORCH_OF[v.dtype], device="meta") if isinstance(v, Tensor) else v
    full = op._binder.bind((), bound)
    result = _run_fake(target, full)
    single = isinstance(result, (TorchArray, torch.Tensor))  # a Triton target's function returns tensors
    leaves = (result,) if single else result
    if not isinstance(leaves, tuple) or not all(isinstance(x, (TorchArray, torch.Tensor)) for x in leaves):
        raise KtuneError("ktune.torch_op needs a target that returns a tensor or a tuple of tensors",
                         where=target.where, hint="return the outputs as a tuple")
    by_id = {id(v): k for k, v in full.items() if isinstance(v, torch.Tensor)}
    layout: list[Leaf] = []
    fresh = 0
    for leaf in leaves:
        name = by_id.get(id(leaf.tensor if isinstance(leaf, TorchArray) else leaf))
        if name is None:
            layout.append(("out", fresh))
            fresh += 1
        else:
            layout.append(("arg", name))
    return layout, single


def _schema(target: Target, case: Case, mutated: Sequence[str], outputs: int) -> str:
    parts: list[str] = []
    keyword_only = False
    alias = iter("abcdefghijklmnopqrstuvwxyz")
    for p in target.signature.parameters.values():
        if p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD):
            raise KtuneError(f"ktune.torch_op cannot describe *{p.name} or **{p.name} to torch",
                             where=target.where, hint="name every argument of the function")
        if p.kind is _P.KEYWORD_ONLY and not keyword_only:
            parts.append("*")
            keyword_only = True
        value = case.args.get(p.name, p.default)
        if isinstance(value, Tensor):
            typ = f"Tensor({next(alias)}!)" if p.name in mutated else "Tensor"
        elif type(value) in _SCALARS:
            typ = _SCALARS[type(value)]
        elif p.default is not _P.empty and type(p.default) in _SCALARS:
            typ = _SCALARS[type(p.default)]
        else:
            raise KtuneError(f"ktune.torch_op cannot tell torch the type of argument {p.name} ({value!r})",
                             where=target.where, hint="give it a tensor, int, float, bool or str in the first case")
        default = "" if p.default is _P.empty else f"={_literal(p.default)}"
        parts.append(f"{typ} {p.name}{default}")
    returns = "()" if outputs == 0 else "Tensor" if outputs == 1 else "(" + ", ".join(["Tensor"] * outputs) + ")"
    return f"({', '.join(parts)}) -> {returns}"


def _literal(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


_OPS: dict[int, TorchOp] = {}


def torch_op(target: Target, *, name: str | None = None, namespace: str = "ktune") -> TorchOp:
    """The target as a torch custom op (``torch.ops.ktune.<name>``), with a fake implementation, so that
    ``torch.compile(fullgraph=True)`` of code calling it compiles without a graph break. Calling the result
    calls the op, which runs the production call; it returns what the target returns. Registered once per
    target and process."""
    found = _OPS.get(id(target))
    if found is not None and found.target is target:
        return found
    op = _OPS[id(target)] = TorchOp(target, namespace, name or target.name)
    return op
