"""The ``@ktune.target`` decorator: a kernel template, its space, cases and reference."""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ._errors import KtuneError, SpaceError
from ._space import Config, Space, Value

BACKENDS = ("cuda", "opencl")

#: The dtype name of bfloat16. numpy has no bfloat16 of its own: ``ml_dtypes`` (the package CuPy's
#: bfloat16 arrays are built on) provides it as a numpy dtype of kind ``"V"``, imported only when
#: a bfloat16 dtype is asked for. Only the CUDA backend runs it.
BFLOAT16 = "bfloat16"


def bfloat16_dtype() -> np.dtype[Any]:
    """``ml_dtypes.bfloat16`` as a numpy dtype; a KtuneError saying what to install without it."""
    try:
        import ml_dtypes
    except ImportError:
        raise KtuneError("bfloat16 needs the ml_dtypes package (numpy has no bfloat16 of its own)",
                         hint="pip install ml_dtypes (CuPy's bfloat16 arrays use it too)") from None
    dt: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dt


def is_bfloat16(dtype: Any) -> bool:
    """Whether ``dtype`` (a dtype, a type or a name) is bfloat16, without importing ml_dtypes."""
    if isinstance(dtype, str):
        return dtype == BFLOAT16
    try:
        return bool(np.dtype(dtype).name == BFLOAT16)
    except TypeError:
        return False


def as_dtype(spec: Any) -> np.dtype[Any]:
    """``np.dtype(spec)``, where ``"bfloat16"`` also works before ml_dtypes has been imported."""
    if isinstance(spec, str) and spec == BFLOAT16:
        return bfloat16_dtype()
    dt: np.dtype[Any] = np.dtype(spec)
    return dt


def dtype_family(dtype: Any) -> str:
    """The dtype's kind, bfloat16 counted as a float (``"f"``): numpy gives it kind ``"V"``."""
    dt = as_dtype(dtype)
    return "f" if dt.name == BFLOAT16 else dt.kind


def bucket(n: int) -> int:
    """The power of two at or above ``n``: a tuning key for token counts, so
    that 100 and 120 tokens share one tuned entry."""
    if n <= 1:
        return 1
    return int(1 << (int(n) - 1).bit_length())


@dataclass(frozen=True)
class Tensor:
    """An input array of a case: shape, dtype and how to fill it.

    ``init`` is ``"normal"`` (the default), ``"uniform"`` (in [-1, 1)),
    ``"positive"`` (in [0.5, 1.5)), ``"int"`` (integers in [low, high)), or
    a callable ``(rng, shape, dtype) -> ndarray``. Inputs are drawn fresh for
    every check, from a seed printed on failure.

    ``dtype="bfloat16"`` gives ``ml_dtypes.bfloat16`` arrays (CUDA backend only): values are drawn
    in float32 (a callable ``init`` is given float32 too) and rounded to bfloat16, to nearest even.
    """

    shape: tuple[int, ...]
    dtype: Any = "float32"
    init: str | Callable[[np.random.Generator, tuple[int, ...], np.dtype[Any]], np.ndarray] = "normal"
    scale: float = 1.0
    low: int = 0
    high: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", as_dtype(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * int(np.dtype(self.dtype).itemsize)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        dt = np.dtype(self.dtype)
        if is_bfloat16(dt):
            # numpy's generators and most of its functions know no bfloat16: draw in float32, then
            # round once (ml_dtypes' cast rounds to nearest even).
            return self._draw(rng, np.dtype(np.float32)).astype(dt)
        return self._draw(rng, dt)

    def _draw(self, rng: np.random.Generator, dt: np.dtype[Any]) -> np.ndarray:
        if callable(self.init):
            out = np.asarray(self.init(rng, self.shape, dt))
            if out.shape != self.shape:
                raise KtuneError(f"Tensor init returned shape {out.shape}, expected {self.shape}")
            return out.astype(dt, copy=False)
        if self.init == "normal":
            return (rng.standard_normal(self.shape, dtype=np.float32) * self.scale).astype(dt)
        if self.init == "uniform":
            return (rng.uniform(-1.0, 1.0, self.shape) * self.scale).astype(dt)
        if self.init == "positive":
            return (rng.uniform(0.5, 1.5, self.shape) * self.scale).astype(dt)
        if self.init == "int":
            return rng.integers(self.low, self.high, self.shape).astype(dt)
        raise KtuneError(f"unknown Tensor init {self.init!r}",
                         hint="use normal, uniform, positive, int or a callable")


@dataclass(frozen=True)
class Tolerance:
    """How close a kernel's output must be to the reference.

    Both tests apply: the relative norm ``|out - ref| / |ref| <= norm``, and
    elementwise ``|out - ref| <= atol + rtol * |ref|``.
    """

    norm: float
    atol: float
    rtol: float


DEFAULT_TOLERANCES: Mapping[str, Tolerance] = {
    "float16": Tolerance(norm=2e-3, atol=1e-2, rtol=1e-2),
    # bfloat16 keeps 8 significant bits: unit roundoff 2^-8 = 3.9e-3. A kernel that computes in
    # float32 and rounds its result once is off by at most that, relative, per element, and by
    # about 2e-3 in relative norm. The limits allow 4 times that, as fp16's do for its 2^-11;
    # rtol 1.6e-2 is torch.testing's for bfloat16, atol 1e-2 is fp16's (values near zero).
    "bfloat16": Tolerance(norm=1.6e-2, atol=1e-2, rtol=1.6e-2),
    "float32": Tolerance(norm=1e-5, atol=1e-5, rtol=1e-4),
    "float64": Tolerance(norm=1e-12, atol=1e-12, rtol=1e-10),
}
_EXACT = Tolerance(norm=0.0, atol=0.0, rtol=0.0)


def tolerance_for(dtype: np.dtype[Any], override: Tolerance | Mapping[str, Tolerance] | None) -> Tolerance:
    name = as_dtype(dtype).name
    if isinstance(override, Tolerance):
        return override
    if override and name in override:
        return override[name]
    return DEFAULT_TOLERANCES.get(name, _EXACT)


@dataclass(frozen=True)
class Case:
    """One shape and dtype combination the kernel promises to handle.

    ``Case(x=Tensor((64, 4096), "float16"), w=Tensor((4096,), "float16"), eps=1e-6)``.
    Keyword arguments are the kernel function's arguments: ``Tensor`` values
    become fresh random device arrays, other values are passed as they are.
    ``id`` names the case in test ids; ``warm_cache=True`` skips the L2 flush
    (for kernels that in production read data a previous kernel just wrote);
    ``backends`` limits the case to some backends (e.g. very large shapes to
    ``("cuda",)``).
    """

    args: Mapping[str, Any]
    id: str | None = None
    warm_cache: bool = False
    backends: tuple[str, ...] | None = None

    def __init__(self, *, id: str | None = None, warm_cache: bool = False,
                 backends: Sequence[str] | None = None, **args: Any) -> None:
        object.__setattr__(self, "args", dict(args))
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "warm_cache", warm_cache)
        object.__setattr__(self, "backends", tuple(backends) if backends else None)

    @property
    def tensors(self) -> dict[str, Tensor]:
        return {k: v for k, v in self.args.items() if isinstance(v, Tensor)}

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def runs_on(self, backend: str) -> bool:
        return self.backends is None or backend in self.backends


def _auto_case_id(case: Case, key: Mapping[str, Any]) -> str:
    """``T64-H4096-float16``: numeric key dimensions with their names, other values alone."""
    parts = [f"{k}{v}" if isinstance(v, (int, float)) else str(v) for k, v in key.items()]
    for dt in sorted({t.dtype.name for t in case.tensors.values()}):
        if dt not in parts:
            parts.append(dt)
    return "-".join(parts) or "case"


@dataclass(frozen=True)
class Target:
    """A kernel template that pytest-ktune checks, times and tunes.

    Made by ``@ktune.target``; calling it runs the kernel with the parameters
    recorded for this device and key, or the default where none is recorded.
    """

    name: str
    fn: Callable[..., Any]
    sources: Mapping[str, Path]
    space: Space
    default: Mapping[str, Value]
    key_fn: Callable[..., Mapping[str, Any]]
    cases: tuple[Case, ...]
    reference: Callable[..., Any]
    file: Path
    module: str
    kernel_name: str
    tolerance: Tolerance | Mapping[str, Tolerance] | None = None
    bytes_moved: Callable[..., int] | None = None
    flops: Callable[..., int] | None = None
    defines_fn: Callable[..., Mapping[str, Value]] | None = None
    vectors: tuple[str, ...] | None = None  # the parameters that are vector widths; None: by name
    work_fn: Callable[..., int] | None = None
    _signature: inspect.Signature = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    @property
    def where(self) -> str:
        return f"target {self.name} ({self.file})"

    # -- sources ---------------------------------------------------------
    def source_path(self, backend: str) -> Path:
        if backend not in self.sources:
            raise KtuneError(f"no {backend} source declared", where=self.where,
                             hint=f"add sources={{'{backend}': 'path/to/kernel'}} to @ktune.target")
        return self.sources[backend]

    def source_text(self, backend: str) -> str:
        path = self.source_path(backend)
        try:
            return path.read_text()
        except OSError as exc:
            raise KtuneError(f"cannot read {backend} source {path}: {exc.strerror}", where=self.where,
                             hint="fix the path in sources= (relative paths are resolved "
                                  "against the file that defines the target)") from None

    def source_hash(self, backend: str) -> str:
        return source_hash(self.source_text(backend))

    def _includes(self, backend: str) -> dict[Path, str]:
        return include_closure(self.source_path(backend), self.source_text(backend), read_local)

    def includes(self, backend: str) -> list[Path]:
        """The local files the backend's source includes, directly or through each other."""
        return list(self._includes(backend))

    def deps_hash(self, backend: str) -> str | None:
        """A hash of the local files the backend's source includes; None when it includes none."""
        return deps_hash(self.source_path(backend), self._includes(backend))

    # -- calls -----------------------------------------------------------
    def bind(self, *args: Any, **kwargs: Any) -> inspect.BoundArguments:
        """Bind call arguments (without the leading kernel) to the function's signature."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound

    def key(self, bound: Mapping[str, Any]) -> dict[str, Any]:
        return dict(_call_with(self.key_fn, bound, self.where, "key"))

    def defines(self, bound: Mapping[str, Any]) -> dict[str, Value]:
        if self.defines_fn is None:
            return {}
        return dict(_call_with(self.defines_fn, bound, self.where, "defines"))

    def bytes_for(self, bound: Mapping[str, Any]) -> int | None:
        if self.bytes_moved is None:
            return None
        return int(_call_with(self.bytes_moved, bound, self.where, "bytes_moved"))

    def vector_params(self) -> list[str]:
        """The parameters that set a vector width in elements: as declared, else those named like one
        (``VECTOR_NAME``: VEC, VECTOR, WIDTH, PACK)."""
        if self.vectors is not None:
            return list(self.vectors)
        return [n for n in self.space.params if VECTOR_NAME.search(n)]

    def work_for(self, bound: Mapping[str, Any]) -> int | None:
        """The elements the kernel's threads share out, as declared (``work=``); None: not declared."""
        if self.work_fn is None:
            return None
        return int(_call_with(self.work_fn, bound, self.where, "work"))

    def flops_for(self, bound: Mapping[str, Any]) -> int | None:
        if self.flops is None:
            return None
        return int(_call_with(self.flops, bound, self.where, "flops"))

    def case_args(self, case: Case) -> dict[str, Any]:
        """The case's arguments bound to the function signature, tensors as specs."""
        return dict(self.bind(**case.args).arguments)

    def case_key(self, case: Case) -> dict[str, Any]:
        return self.key(self.case_args(case))

    def case_id(self, case: Case) -> str:
        return case.id or _auto_case_id(case, self.case_key(case))

    def check_config(self, config: Config, key: Mapping[str, Any], what: str) -> None:
        """Raise a SpaceError if ``config`` is not a valid point for ``key``."""
        try:
            self.space.check_names(list(key))
        except SpaceError as exc:  # the Space does not know which target it belongs to
            raise SpaceError(exc.message, where=self.where, hint=exc.hint) from None
        broken = self.space.violated(config, key)
        if not broken:
            return
        key_s = ", ".join(f"{k}={v}" for k, v in key.items())
        if not any(True for _ in self.space.feasible(key)):
            raise SpaceError(
                f"the space has no valid point for key {key_s}: the constraints "
                f"{', '.join(repr(c.text) for c in self.space.constraints)} rule out all "
                f"{self.space.size} configurations", where=self.where,
                hint="widen the Space, relax a constraint, or drop this case")
        raise SpaceError(f"the {what} {dict(config)} is not valid for key {key_s}: "
                         f"{'; '.join(broken)}", where=self.where,
                         hint=f"choose a {what} that satisfies the constraints")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ._runtime import call_target

        return call_target(self, args, kwargs)


def _call_with(fn: Callable[..., Any], bound: Mapping[str, Any], where: str, what: str) -> Any:
    params = inspect.signature(fn).parameters
    accepts_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in bound.items() if accepts_all or k in params}
    try:
        return fn(**kwargs)
    except KtuneError:
        raise
    except Exception as exc:
        raise KtuneError(f"the {what} function failed: {type(exc).__name__}: {exc}", where=where,
                         hint=f"its parameters must be named like the kernel function's "
                              f"({', '.join(bound)})") from exc


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: A quoted ``#include "name"``; the angle-bracket form names system headers and is left out.
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)


def read_local(path: Path) -> str | None:
    """The text of the file at ``path``, or None where there is no file."""
    return path.read_text() if path.is_file() else None


def include_candidates(including: Path, source: Path, name: str) -> list[Path]:
    """Where the compile looks for ``#include "name"`` met in the file ``including``: that file's
    folder, then the kernel source's (the ``-I`` folder the backends add)."""
    folders = dict.fromkeys([including.parent, source.parent])
    return [Path(os.path.normpath(folder / name)) for folder in folders]


def include_closure(source: Path, text: str, read: Callable[[Path], str | None]) -> dict[Path, str]:
    """The local files that ``text``, the kernel source at ``source``, includes, directly or through
    each other, with their texts: each quoted ``#include`` that ``read`` finds at one of its
    ``include_candidates`` (``read`` gives a file's text, or None where it has none), each file once,
    in the order first met. Includes found nowhere are left to the compiler (NVRTC's and system
    headers)."""
    found: dict[Path, str] = {}

    def visit(including: Path, body: str) -> None:
        for name in INCLUDE.findall(body):
            for candidate in include_candidates(including, source, name):
                if candidate in found or candidate == source:
                    break
                included = read(candidate)
                if included is not None:
                    found[candidate] = included
                    visit(candidate, included)
                    break

    visit(source, text)
    return found


def include_name(source: Path, path: Path) -> str:
    """How ``path``, an include of the kernel source at ``source``, is named: relative to its folder."""
    return Path(os.path.relpath(path, source.parent)).as_posix()


def deps_hash(source: Path, files: Mapping[Path, str]) -> str | None:
    """A hash of the kernel source's ``include_closure`` (each file's name from ``include_name`` and
    its text, in order); None when there are no files."""
    if not files:
        return None
    h = hashlib.sha256()
    for path, text in files.items():
        for part in (include_name(source, path), text):
            data = part.encode()
            h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]


def pin_includes(source: Path, text: str, headers: Mapping[Path, str], folder: Path) -> str:
    """``text``, the kernel source at ``source``, with each ``#include`` of one of ``headers`` (its
    include closure, by path, with the texts to compile) pointed at a copy of that text written under
    ``folder``, in the layout of its path relative to the kernel's folder; the copies' includes are
    pointed the same way. The compile then reads these texts, whatever the files hold now."""
    copies = {p: folder.joinpath(*("_up_" if part == ".." else part
                                   for part in PurePosixPath(include_name(source, p)).parts))
              for p in headers}

    def pin(including: Path, body: str) -> str:
        def to_copy(m: re.Match[str]) -> str:
            for candidate in include_candidates(including, source, m.group(1)):
                if candidate in copies:
                    return m.group(0)[:m.start(1) - m.start()] + copies[candidate].as_posix() + '"'
            return m.group(0)

        return INCLUDE.sub(to_copy, body)

    for p, body in headers.items():
        copies[p].parent.mkdir(parents=True, exist_ok=True)
        copies[p].write_text(pin(p, body))
    return pin(source, text)


_REGISTRY: dict[str, Target] = {}


def registered() -> dict[str, Target]:
    """Targets defined so far, by ``module:name``."""
    return dict(_REGISTRY)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VECTOR_NAME = re.compile(r"VEC|WIDTH|PACK", re.I)  # a parameter named like a vector width (VECTOR too)


def target(
    *,
    sources: Mapping[str, str | Path],
    space: Space,
    default: Mapping[str, Value],
    key: Callable[..., Mapping[str, Any]],
    cases: Sequence[Case],
    reference: Callable[..., Any],
    tolerance: Tolerance | Mapping[str, Tolerance] | None = None,
    bytes_moved: Callable[..., int] | None = None,
    flops: Callable[..., int] | None = None,
    defines: Callable[..., Mapping[str, Value]] | None = None,
    kernel: str | None = None,
    name: str | None = None,
    vectors: Sequence[str] | None = None,
    work: Callable[..., int] | None = None,
) -> Callable[[Callable[..., Any]], Target]:
    """Mark a kernel launcher as a pytest-ktune target.

    The decorated function takes a ``kernel`` handle first (``kernel.params``,
    ``kernel.empty``, ``kernel.launch``) and then the kernel's arguments.
    ``sources`` maps ``"cuda"`` and/or ``"opencl"`` to source files; the
    space's parameters (and ``defines``) reach the source as ``-D`` macros.
    """

    def wrap(fn: Callable[..., Any]) -> Target:
        file = Path(inspect.getfile(fn)).resolve()
        tname = name or fn.__name__
        where = f"target {tname} ({file})"
        if not isinstance(space, Space):
            raise SpaceError("space= must be a ktune.Space", where=where,
                             hint="write space=ktune.Space(BLOCK=[...], ...)")
        unknown_backends = sorted(set(sources) - set(BACKENDS))
        if unknown_backends or not sources:
            raise KtuneError(f"sources= names unknown backends {unknown_backends}" if unknown_backends
                             else "sources= is empty", where=where,
                             hint=f"use the backends {', '.join(BACKENDS)}")
        resolved = {b: (file.parent / p).resolve() for b, p in sources.items()}
        missing = sorted(set(space.names) - set(default))
        extra = sorted(set(default) - set(space.names))
        if missing or extra:
            raise SpaceError(
                f"default= {dict(default)} does not match the space's parameters "
                f"({', '.join(space.names)})" + (f": missing {missing}" if missing else "")
                + (f": unknown {extra}" if extra else ""), where=where,
                hint="give default= one value for each parameter of the Space")
        for p in space.names:
            if not _IDENT.match(p):
                raise SpaceError(f"parameter name {p!r} is not a valid C identifier", where=where,
                                 hint="parameters become -D macros; use names like BLOCK")
        if vectors is not None:
            if isinstance(vectors, str):
                raise SpaceError(f"vectors={vectors!r} is a string", where=where,
                                 hint=f"give a list of parameter names: vectors=[{vectors!r}]")
            for v in vectors:
                if v not in space.params:
                    raise SpaceError(f"vectors= names {v!r}, which is not a parameter of the space "
                                     f"({', '.join(space.names)})", where=where,
                                     hint="list the parameters that set how many elements a thread loads at once")
                bad = [x for x in space.params[v] if isinstance(x, bool) or not isinstance(x, int) or x < 1]
                if bad:
                    raise SpaceError(f"vectors= names {v!r}, whose values {bad} are not element counts",
                                     where=where, hint="a vector width is a whole number of elements, 1 or more")
        if not cases:
            raise KtuneError("cases= is empty", where=where,
                             hint="declare at least one ktune.Case the kernel must handle")
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if not params:
            raise KtuneError("the kernel function must take the kernel handle as its first argument",
                             where=where, hint=f"write def {fn.__name__}(kernel, ...)")
        call_sig = sig.replace(parameters=params[1:])
        t = Target(
            name=tname, fn=fn, sources=resolved, space=space, default=dict(default),
            key_fn=key, cases=tuple(cases), reference=reference, file=file,
            module=fn.__module__, kernel_name=kernel or fn.__name__, tolerance=tolerance,
            bytes_moved=bytes_moved, flops=flops, defines_fn=defines,
            vectors=None if vectors is None else tuple(vectors), work_fn=work, _signature=call_sig,
        )
        for c in t.cases:
            try:
                call_sig.bind(**c.args)
            except TypeError as exc:
                raise KtuneError(f"case {c.id or c.args} does not fit the function's signature: {exc}",
                                 where=where, hint="name each case argument like the function's "
                                                   "parameters") from None
        if "opencl" in resolved:
            for c in t.cases:
                bf16 = sorted(k for k, v in c.tensors.items() if is_bfloat16(v.dtype))
                if bf16 and c.runs_on("opencl"):
                    raise KtuneError(
                        f"case {t.case_id(c)} has bfloat16 tensors ({', '.join(bf16)}) but may run on "
                        "the opencl backend, which has no bfloat16", where=where,
                        hint="bfloat16 runs on the cuda backend: give the case backends=['cuda']")
        _REGISTRY[f"{t.module}:{t.name}"] = t
        return t

    return wrap
