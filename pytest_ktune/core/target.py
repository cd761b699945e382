"""A kernel template as declared: its sources, space, cases and reference (``declare``).

The public ``@ktune.target`` (``pytest_ktune.call.target``) declares a ``Target``; calling one runs its
kernel in production. How a call runs is the ``pytest_ktune.call`` layer's: it installs its call as the
target's ``__call__`` (``install_call``) when it is imported, so this layer knows only the declaration and the seam.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_ktune.core.case import Case, Tolerance, ToleranceSpec
from pytest_ktune.core.dtypes import is_bfloat16
from pytest_ktune.core.errors import KtuneError, SpaceError
from pytest_ktune.core.includes import deps_hash, include_closure, read_local, source_hash
from pytest_ktune.core.names import BACKENDS
from pytest_ktune.core.pykernels import register, resolve_kernel
from pytest_ktune.core.sources import SUFFIXES, Source
from pytest_ktune.core.space import Config, Space, Value
from pytest_ktune.core.threshold import Threshold
from pytest_ktune.core.variants import BackendSpace, resolve
from pytest_ktune.core.words import VECTOR_NAME

#: The backend whose source is a Python function (``@triton.jit``) rather than a C file.
TRITON = "triton"


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
    ``space`` and ``default`` are the shared ones; ``for_backend`` gives the target as it runs on one
    backend, with its ``per_backend`` changes applied.
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
    tolerance: ToleranceSpec | Callable[..., ToleranceSpec] | None = None
    bytes_moved: Callable[..., int] | None = None
    flops: Callable[..., int] | None = None
    defines_fn: Callable[..., Mapping[str, Value]] | None = None
    vectors: tuple[str, ...] | None = None  # the parameters that are vector widths; None: by name
    work_fn: Callable[..., int] | None = None
    threshold: Threshold | None = None  # the target's own regression threshold; None: the run's
    line: int = 0  # the line of ``file`` that declares the target (0: not known)
    # The array arguments the function takes with any strides (it passes them to the kernel); every other
    # array argument of a production call must be C-contiguous.
    strided: tuple[str, ...] = ()
    check_fn: Callable[[Any, Any], Any] | None = None  # check=: judges the outputs against the reference's
    postprocess_fn: Callable[..., Any] | None = None  # postprocess=: run on the device before the comparison
    per_backend: Mapping[str, BackendSpace] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)  # the in-memory sources (ktune.Source), by backend
    resolved_for: str | None = None  # the backend whose per_backend changes ``space`` and ``default`` hold
    # The kernel's name on a backend where it is not ``kernel_name``: a triton source's jit function's own name.
    kernels: Mapping[str, str] = field(default_factory=dict)
    _signature: inspect.Signature = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _declared: Target | None = field(default=None, repr=False, compare=False)
    _views: dict[str, Target] = field(default_factory=dict, repr=False, compare=False)
    # key_cache=False: run key and defines on every production call (see pytest_ktune.call.dispatch)
    key_cache: bool = True
    # The production call's plan (pytest_ktune.call.plan.CallPlan), made on the first call.
    _plan: Any = field(default=None, init=False, repr=False, compare=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the kernel in production: the parameters recorded for this device and key (the default where
        none is), compiled once. ``pytest_ktune.call`` replaces this with its own call (``install_call``: one
        frame from the caller to the target's function); until it is loaded there is no production call."""
        raise KtuneError("the production call is not loaded", where=self.where,
                         hint="declare targets with @ktune.target (import ktune)")

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
        if backend in self.texts:
            return self.texts[backend]
        try:
            return path.read_text()
        except OSError as exc:
            raise KtuneError(f"cannot read {backend} source {path}: {exc.strerror}", where=self.where,
                             hint="fix the path in sources= (relative paths are resolved "
                                  "against the file that defines the target)") from None

    def source_hash(self, backend: str) -> str:
        return source_hash(self.source_text(backend))

    def in_memory(self, backend: str) -> bool:
        """Whether the backend's source is held in Python (``ktune.Source``) rather than read from a file."""
        return backend in self.texts

    # -- backends --------------------------------------------------------
    def for_backend(self, backend: str) -> Target:
        """This target as it runs on ``backend``: its ``per_backend`` space and default applied (the
        target itself where it declares none for that backend)."""
        base = self._declared or self
        if self.resolved_for == backend:
            return self
        if backend not in base.per_backend and backend not in base.kernels:
            return base
        view = base._views.get(backend)
        if view is None:
            space, default = base.space, base.default
            if backend in base.per_backend:
                space, default = resolve(base.space, base.default, base.per_backend[backend], where=base.where,
                                         backend=backend)
            view = replace(base, space=space, default=default, resolved_for=backend, _declared=base, _views={},
                           kernel_name=base.kernels.get(backend, base.kernel_name))
            base._views[backend] = view
        return view

    def carry_over(self, params: Mapping[str, Value]) -> dict[str, Value]:
        """Parameters recorded with another space (another backend's, or an older one) as a point of
        this one where they can be: the values of the parameters this space has, this default for the
        others; parameters it does not have are left out."""
        return {n: params[n] if n in params else self.default[n] for n in self.space.params}

    def complete(self, params: Mapping[str, Value]) -> dict[str, Value]:
        """A configuration recorded before this space gained parameters, with the default's values for
        those it lacks. A template that grows gives its new parameters default values that reproduce the
        kernel it had, so a record written before still means the kernel it was measured on. Parameters
        the space does not have are kept, for the check to name."""
        return {**params, **{n: self.default[n] for n in self.space.params if n not in params}}

    def _includes(self, backend: str) -> dict[Path, str]:
        return include_closure(self.source_path(backend), self.source_text(backend), read_local)

    def includes(self, backend: str) -> list[Path]:
        """The local files the backend's source includes, directly or through each other."""
        return list(self._includes(backend))

    def deps_hash(self, backend: str) -> str | None:
        """A hash of the local files the backend's source includes; None when it includes none."""
        return deps_hash(self.source_path(backend), self._includes(backend))

    # -- calls -----------------------------------------------------------
    @property
    def signature(self) -> inspect.Signature:
        """The function's signature without the leading kernel handle: the signature of a call."""
        return self._signature

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
        (``core.words.VECTOR_NAME``: VEC, VECTOR or PACK as a word of the name, or WIDTH alone)."""
        if self.vectors is not None:
            return [n for n in self.vectors if n in self.space.params]
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

    def tolerance_of(self, case: Case) -> ToleranceSpec | None:
        """The tolerance the case's outputs are checked with: the case's own, else the target's (a
        function of the case's arguments called with them)."""
        if case.tolerance is not None:
            return case.tolerance
        spec = self.tolerance
        if callable(spec):
            spec = _call_with(spec, self.case_args(case), self.where, "tolerance")
            if not isinstance(spec, (Tolerance, Mapping)):
                raise KtuneError(f"the tolerance function returned a {type(spec).__name__}", where=self.where,
                                 hint="return a ktune.Tolerance, or a dict of them by dtype name")
        return spec

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


_REGISTRY: dict[str, Target] = {}
def install_call(call: Callable[..., Any]) -> None:
    """Make ``call(target, *args, **kwargs)`` what calling a target runs (``pytest_ktune.call`` does, on import):
    the production call's fast path is then the target's ``__call__`` itself, not a second frame under it."""
    Target.__call__ = call  # type: ignore[method-assign]


def registered() -> dict[str, Target]:
    """Targets defined so far, by ``module:name``."""
    return dict(_REGISTRY)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _triton_source(src: Any, where: str) -> tuple[Path, str]:
    """A triton source's module file and its jit function's name (the function registered, ``core.pykernels``)."""
    try:
        return register(resolve_kernel(src))
    except (ValueError, OSError, TypeError) as exc:
        raise KtuneError(f"sources['triton']: {exc}", where=where,
                         hint="give the @triton.jit function itself, or 'package.module:function'") from None


def _sources(sources: Mapping[str, Any], file: Path, tname: str,
             where: str) -> tuple[dict[str, Path], dict[str, str], dict[str, str]]:
    """The sources' paths (relative ones against the target's folder), the in-memory texts, and the kernel
    names that a source fixes (a triton source's jit function)."""
    unknown_backends = sorted(set(sources) - set(BACKENDS))
    if unknown_backends or not sources:
        raise KtuneError(f"sources= names unknown backends {unknown_backends}" if unknown_backends
                         else "sources= is empty", where=where,
                         hint=f"use the backends {', '.join(BACKENDS)}")
    paths: dict[str, Path] = {}
    texts: dict[str, str] = {}
    kernels: dict[str, str] = {}
    for b, src in sources.items():
        if b == TRITON:
            paths[b], kernels[b] = _triton_source(src, where)
        elif isinstance(src, Source):
            paths[b] = (file.parent / (src.name or f"{tname}{SUFFIXES[b]}")).resolve()
            texts[b] = src.text
        elif isinstance(src, (str, Path)):
            paths[b] = (file.parent / src).resolve()
        else:
            raise KtuneError(f"sources[{b!r}] is a {type(src).__name__}", where=where,
                             hint="give a path (relative to this file), or ktune.Source(text, name=...)")
    return paths, texts, kernels


def _check_params(space: Space, default: Mapping[str, Value], where: str, on: str = "") -> None:
    missing = sorted(set(space.names) - set(default))
    extra = sorted(set(default) - set(space.names))
    if missing or extra:
        raise SpaceError(
            f"default= {dict(default)} does not match the space's parameters{on} "
            f"({', '.join(space.names)})" + (f": missing {missing}" if missing else "")
            + (f": unknown {extra}" if extra else ""), where=where,
            hint="give default= one value for each parameter of the Space")
    for p in space.names:
        if not _IDENT.match(p):
            raise SpaceError(f"parameter name {p!r} is not a valid C identifier", where=where,
                             hint="parameters become -D macros; use names like BLOCK")


def _check_vectors(vectors: Sequence[str], spaces: Sequence[Space], where: str) -> None:
    if isinstance(vectors, str):
        raise SpaceError(f"vectors={vectors!r} is a string", where=where,
                         hint=f"give a list of parameter names: vectors=[{vectors!r}]")
    for v in vectors:
        holding = [sp for sp in spaces if v in sp.params]
        if not holding:
            raise SpaceError(f"vectors= names {v!r}, which is not a parameter of the space "
                             f"({', '.join(spaces[0].names)})", where=where,
                             hint="list the parameters that set how many elements a thread loads at once")
        bad = [x for sp in holding for x in sp.params[v] if isinstance(x, bool) or not isinstance(x, int) or x < 1]
        if bad:
            raise SpaceError(f"vectors= names {v!r}, whose values {bad} are not element counts",
                             where=where, hint="a vector width is a whole number of elements, 1 or more")


def _check_per_backend(per_backend: Mapping[str, BackendSpace], sources: Mapping[str, Path], where: str) -> None:
    for b, variant in per_backend.items():
        if b not in sources:
            raise SpaceError(f"per_backend= names {b!r}, which has no source in sources=", where=where,
                             hint=f"name only the backends of sources= ({', '.join(sources)})")
        if not isinstance(variant, BackendSpace):
            raise SpaceError(f"per_backend[{b!r}] is a {type(variant).__name__}", where=where,
                             hint="write per_backend={'cuda': ktune.BackendSpace(NAME=[...], drop=[...], "
                                  "default={...})}")


def declare(
    *,
    sources: Mapping[str, Any],
    space: Space,
    default: Mapping[str, Value],
    key: Callable[..., Mapping[str, Any]],
    cases: Sequence[Case],
    reference: Callable[..., Any],
    tolerance: ToleranceSpec | Callable[..., ToleranceSpec] | None = None,
    bytes_moved: Callable[..., int] | None = None,
    flops: Callable[..., int] | None = None,
    defines: Callable[..., Mapping[str, Value]] | None = None,
    kernel: str | None = None,
    name: str | None = None,
    vectors: Sequence[str] | None = None,
    work: Callable[..., int] | None = None,
    threshold: str | None = None,
    strided: Sequence[str] = (),
    check: Callable[[Any, Any], Any] | None = None,
    postprocess: Callable[..., Any] | None = None,
    per_backend: Mapping[str, BackendSpace] | None = None,
    key_cache: bool = True,
) -> Callable[[Callable[..., Any]], Target]:
    """Mark a kernel launcher as a pytest-ktune target.

    The decorated function takes a ``kernel`` handle first (``kernel.params``,
    ``kernel.empty``, ``kernel.launch``) and then the kernel's arguments.
    ``sources`` maps ``"cuda"`` and/or ``"opencl"`` to source files (or ``ktune.Source`` texts), and
    ``"triton"`` to a ``@triton.jit`` function (or ``"package.module:function"``); the space's parameters (and
    ``defines``) reach a C source as ``-D`` macros, a jit function as its ``tl.constexpr`` arguments (and
    ``num_warps``, ``num_stages`` as its launch options); ``per_backend`` says what a backend changes in the
    shared space and default. ``threshold`` (``"median:10%"``) replaces the
    run's regression threshold for this target's performance items. ``strided`` names the array
    arguments the function takes with any strides. ``key_cache=False`` runs ``key`` and ``defines`` on every
    production call, for functions that read more than the arguments' shapes, dtypes, devices and the scalar
    arguments they take (see ``pytest_ktune.call.dispatch``).
    """

    def wrap(fn: Callable[..., Any]) -> Target:
        file = Path(inspect.getfile(fn)).resolve()
        caller = inspect.currentframe()
        caller = caller.f_back if caller is not None else None  # where @ktune.target(...) is applied
        line = caller.f_lineno if caller is not None and Path(caller.f_code.co_filename).resolve() == file \
            else fn.__code__.co_firstlineno
        tname = name or fn.__name__
        where = f"target {tname} ({file})"
        if not isinstance(space, Space):
            raise SpaceError("space= must be a ktune.Space", where=where,
                             hint="write space=ktune.Space(BLOCK=[...], ...)")
        resolved, texts, kernels = _sources(sources, file, tname, where)
        _check_params(space, default, where)
        _check_per_backend(per_backend or {}, resolved, where)
        for what, f in (("check", check), ("postprocess", postprocess)):
            if f is not None and not callable(f):
                raise KtuneError(f"{what}= is not a function", where=where,
                                 hint=f"give {what}= a function (see the guide's Correctness section)")
        own_threshold = None
        if threshold is not None:
            try:
                own_threshold = Threshold.parse(str(threshold))
            except KtuneError as exc:
                raise KtuneError(f"threshold=: {exc.message}", where=where, hint=exc.hint) from None
        if not cases:
            raise KtuneError("cases= is empty", where=where,
                             hint="declare at least one ktune.Case the kernel must handle")
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if not params:
            raise KtuneError("the kernel function must take the kernel handle as its first argument",
                             where=where, hint=f"write def {fn.__name__}(kernel, ...)")
        call_sig = sig.replace(parameters=params[1:])
        if isinstance(strided, str) or any(n not in call_sig.parameters for n in strided):
            raise KtuneError(f"strided={strided!r} names no list of the function's arguments", where=where,
                             hint=f"give the array arguments that may have any strides, e.g. strided=['x'] "
                                  f"(the function's arguments: {', '.join(call_sig.parameters)})")
        t = Target(
            name=tname, fn=fn, sources=resolved, space=space, default=dict(default),
            key_fn=key, cases=tuple(cases), reference=reference, file=file,
            module=fn.__module__, kernel_name=kernel or fn.__name__, tolerance=tolerance,
            bytes_moved=bytes_moved, flops=flops, defines_fn=defines,
            vectors=None if vectors is None else tuple(vectors), work_fn=work, threshold=own_threshold, line=line,
            strided=tuple(strided), check_fn=check, postprocess_fn=postprocess, per_backend=dict(per_backend or {}),
            texts=texts, kernels=kernels, _signature=call_sig, key_cache=bool(key_cache),
        )
        views = [t.for_backend(b) for b in resolved]  # a per-backend space that does not fit fails here
        for v in views:
            if v is not t:
                _check_params(v.space, v.default, where, on=f" on {v.resolved_for}")
        if vectors is not None:
            _check_vectors(vectors, [t.space, *(v.space for v in views if v is not t)], where)
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
