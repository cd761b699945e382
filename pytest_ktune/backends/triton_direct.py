"""Launches of a Triton jit function's compiled kernels without Triton's JIT in between, after the JIT's first.

``fn[grid](*args, **constexprs)`` redoes on every call what Triton's JIT works out: it binds the arguments,
specializes each (a tensor's dtype and whether its pointer is 16-byte aligned; an integer's width, whether it is
divisible by 16, whether it is 1, which makes it a constant), builds the text of its cache key and finds the
kernel. A production call's function and configuration are fixed, so a ``Direct`` keeps each compiled kernel
the JIT returned under a specialization key of its own, at least as fine as Triton's (every distinction
Triton makes, and a few more), and launches a call of a known key straight through the kernel's launcher on
the current stream, with no launch metadata and no hooks (Triton's empty hook chains do nothing either).

Everything else goes the JIT's way (``Direct.launch`` hands the call back): launch hooks (``knobs.runtime.
launch_enter_hook``/``launch_exit_hook`` with a hook in them), the function's pre-run hooks, a stage-inspection
hook, a global the kernel reads that changed since it compiled (the JIT says which), a grid given as a
function, an argument of a type the key does not know, an integer too wide for 64 bits, and each new
specialization pattern (its first call compiles, or finds, its kernel in the JIT; later ones launch it
directly). Nothing is made for Triton's interpreter, for a function that is not exactly Triton's
``JITFunction``, for a backend whose tensors specialize by more than dtype and alignment (AMD's), or where an
internal this reads is missing or different (``runtime`` answers None): the JIT is always right, only slower.
``KTUNE_TRITON_DIRECT=0`` turns the direct launches off. Checked on Triton 3.6 and 3.9 (``testing.fake_triton``
runs Triton's own JIT over a fake CUDA driver, and the key against Triton's native specialization).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENV = "KTUNE_TRITON_DIRECT"

# An integer's kind, as Triton tells integers apart: equal to 1 (a constant), else its width (i32, i64, u64)
# and whether it is divisible by 16.
_ONE, _I32_D, _I32, _I64_D, _I64, _U64_D, _U64 = range(7)
# The first slot of a float's and a bool's key (fp32 and u1 to Triton): values no tensor dtype or integer kind
# equals, so a key's flat slots read back one way only.
_FLOAT = "fp32"
_BOOL = "u1"


class Unhandled(Exception):
    """An argument the direct key does not know: the call goes through the JIT."""


def _int_kind(v: int) -> int:
    if v == 1:
        return _ONE
    aligned = not v & 15  # Python's & on a negative integer is two's complement's, as Triton's is
    if -0x8000_0000 <= v <= 0x7FFF_FFFF:
        return _I32_D if aligned else _I32
    if -0x8000_0000_0000_0000 <= v <= 0x7FFF_FFFF_FFFF_FFFF:
        return _I64_D if aligned else _I64
    if 0 <= v <= 0xFFFF_FFFF_FFFF_FFFF:
        return _U64_D if aligned else _U64
    raise Unhandled  # the JIT raises its OverflowError


@dataclass(frozen=True)
class Runtime:
    """The pieces of a Triton runtime that direct launches read: the JIT function's and compiled kernel's
    classes, its knobs, its driver's current device and stream, its hook chain's class, and torch's tensor
    class (``testing.fake_triton`` makes one without a GPU)."""

    jit_type: Any  # a class (Any: a narrowing by it would make the function an object)
    compiled_type: Any
    knobs: Any
    current_device: Any
    current_stream: Any
    hook_chain: Any  # its class of hook chains, or None where this Triton has none
    tensor_type: type


@functools.lru_cache(maxsize=1)
def runtime() -> Runtime | None:
    """The installed Triton's runtime, or None where it lacks an internal this reads (then the JIT runs every
    launch) or ``KTUNE_TRITON_DIRECT=0`` turns the direct launches off."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "false", "off", "no"):
        return None
    try:
        import torch
        from triton import knobs
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.driver import driver
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    try:
        from triton.knobs import HookChain

        chain: type | None = HookChain
    except ImportError:
        chain = None
    runtime_knobs = getattr(knobs, "runtime", None)
    if runtime_knobs is None or not hasattr(runtime_knobs, "launch_enter_hook"):
        return None
    try:
        active = driver.active
        device, stream = active.get_current_device, active.get_current_stream
    except Exception:  # no active driver (no GPU): nothing launches directly
        return None
    return Runtime(JITFunction, CompiledKernel, knobs, device, stream, chain, torch.Tensor)


class Direct:
    """Direct launches of one jit function with one configuration (its constexprs and launch options)."""

    def __init__(self, rt: Runtime, jit: Any, kwargs: Mapping[str, Any]) -> None:
        self.rt = rt
        self.jit = jit
        self.kwargs = dict(kwargs)
        self.kernels: dict[tuple[Any, ...], tuple[Any, Any, Any, Any]] = {}  # key: (kernel, launcher, function, meta)
        self.launches = 0  # direct ones
        params = list(jit.params)
        self._names = [p.name for p in params]
        self._constexpr = [bool(p.is_constexpr) for p in params]
        self._defaults = [p.default if p.has_default else _MISSING for p in params]
        self._tails: dict[int, tuple[tuple[Any, ...], tuple[int, ...]] | None] = {}
        knobs = rt.knobs
        self._runtime_knobs = knobs.runtime
        self._compilation = getattr(knobs, "compilation", None)
        self._fpsan = self._compilation is not None and hasattr(self._compilation, "fpsan_homomorphic_casts")

    @classmethod
    def of(cls, jit: Any, kwargs: Mapping[str, Any], rt: Runtime | None) -> Direct | None:
        """The direct launches of ``jit`` with ``kwargs``, or None where they cannot be made (no runtime, a
        function that is not exactly the runtime's ``JITFunction``, parameters other than plain ones)."""
        if rt is None or type(jit) is not rt.jit_type:
            return None
        try:
            params = list(inspect.signature(jit.fn).parameters.values())
            if len(params) != len(jit.params) or any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
                return None  # *args or keyword-only parameters: the JIT binds them
            return cls(rt, jit, kwargs)
        except (AttributeError, TypeError, ValueError):
            return None

    def _tail(self, n: int) -> tuple[tuple[Any, ...], tuple[int, ...]] | None:
        """For a call of ``n`` positional arguments: the values of the parameters after them (the constexprs
        of the configuration, or the defaults) and the positions among the ``n`` that are constexprs; None
        where the JIT must bind the call (a keyword of the configuration among them, one with no value)."""
        names = self._names
        if n > len(names) or any(k in self.kwargs for k in names[:n]):
            return None
        tail = []
        for name, default in zip(names[n:], self._defaults[n:], strict=True):
            value = self.kwargs.get(name, default)
            if value is _MISSING:
                return None
            tail.append(value)
        return tuple(tail), tuple(i for i in range(n) if self._constexpr[i])

    def key(self, args: Sequence[Any]) -> tuple[Any, ...] | None:
        """This call's specialization key (with the current device and the knobs that change Triton's), or
        None where the call must go through the JIT."""
        rk = self.rt
        knobs = self._runtime_knobs
        chain = rk.hook_chain
        enter, leave = knobs.launch_enter_hook, knobs.launch_exit_hook  # None, or an empty chain: no hook
        if (enter is not None and (type(enter) is not chain or enter.calls)) \
                or (leave is not None and (type(leave) is not chain or leave.calls)) \
                or getattr(knobs, "add_stages_inspection_hook", None) is not None or self.jit.pre_run_hooks:
            return None
        n = len(args)
        shape = self._tails.get(n, _MISSING)
        if shape is _MISSING:
            shape = self._tails[n] = self._tail(n)
        if shape is None:
            return None
        comp = self._compilation
        parts: list[Any] = [n, rk.current_device(), knobs.debug,
                            None if comp is None else comp.instrumentation_mode,
                            comp.fpsan_homomorphic_casts if self._fpsan and comp is not None else None]
        tensor = rk.tensor_type
        constexprs = shape[1]
        try:
            for i, a in enumerate(args):
                t = type(a)
                if constexprs and i in constexprs:
                    parts.append((t, a))  # a constexpr passed at the call: its value (and type: 1 is not 1.0)
                    hash(a)
                elif t is tensor:
                    parts.append(a.dtype)
                    parts.append(not a.data_ptr() & 15)
                elif t is int:
                    parts.append(_int_kind(a))
                elif t is float:
                    parts.append(_FLOAT)
                elif t is bool:
                    parts.append(_BOOL)
                elif a is None:
                    parts.append(None)
                else:
                    return None  # another type: the JIT knows what to make of it
        except (Unhandled, TypeError):
            return None
        return tuple(parts)

    def launch(self, grid: Any, args: Sequence[Any]) -> tuple[Any, ...] | None:
        """Launch the kernel kept for this call's key on ``grid`` (``LAUNCHED``); else the key, under which the
        caller keeps what the JIT's launch returns, or None where the JIT decides every such call. The JIT's turn
        too where a global the kernel read has changed (the JIT names it)."""
        key = self.key(args)
        if key is None:
            return None
        found = self.kernels.get(key)
        if found is None or type(grid) is not tuple or not grid:
            return key
        for (name, _), (value, where) in self.jit.used_global_vals.items():  # as the JIT checks every launch
            if where.get(name, _MISSING) != value:
                return key
        _kernel, launcher, function, meta = found
        size = len(grid)
        device = key[1]
        tail = self._tails[key[0]]
        assert tail is not None
        launcher(grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1, self.rt.current_stream(device),
                 function, meta, None, None, None, *args, *tail[0])
        self.launches += 1
        return LAUNCHED

    def keep(self, key: tuple[Any, ...], kernel: Any) -> None:
        """Keep what the JIT's launch of a call of ``key`` returned, where it is a compiled kernel whose
        backend specializes tensors only by dtype and alignment (Triton's native rule)."""
        if type(kernel) is not self.rt.compiled_type:  # None (a cache hook), a future (async compile)
            return
        caches = getattr(self.jit, "device_caches", None)
        entry = caches.get(key[1]) if isinstance(caches, Mapping) else None
        backend = entry[3] if isinstance(entry, tuple) and len(entry) == 5 else None
        if getattr(backend, "supports_native_tensor_specialization", False) is not True:
            return  # another backend's rule (AMD's buffer ops look at sizes): the JIT decides every call
        launcher = getattr(kernel, "run", None)  # the launcher its first launch made
        function = getattr(kernel, "function", None)
        meta = getattr(kernel, "packed_metadata", _MISSING)
        if launcher is None or function is None or meta is _MISSING:
            return
        self.kernels[key] = (kernel, launcher, function, meta)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()
LAUNCHED: tuple[Any, ...] = ("launched directly",)  # what ``Direct.launch`` answers for a launch it made
