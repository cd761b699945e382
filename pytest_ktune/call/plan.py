"""How one target's production calls run: the call plan, made on its first call and kept on the target.

A ``CallPlan`` holds what the first call worked out: the argument binding (``call.binding``), the params
file (``core.paramsfile``: read once, and again only when it changes on disk, looked at no more than once a
second, or on ``ktune.reload()``), and the dispatch cache (``call.dispatch``): per call signature, the
``Entry`` of its route, key and defines, with the recorded parameters, the compiled program and the
``ProductionKernel`` handle the target's function receives, made once and reused.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from time import monotonic
from typing import Any

import numpy as np

from pytest_ktune.call.binding import Binder, Caller, array_arguments
from pytest_ktune.call.dispatch import LIMIT, READERS, TENSORS, Signature, Uncacheable, checking, read_by, reader, value
from pytest_ktune.call.kernel import Entry, ProductionKernel
from pytest_ktune.call.native import route_for, router
from pytest_ktune.call.route import Route
from pytest_ktune.core.errors import BackendUnavailable, CompileError, KtuneError, LaunchError
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.paramsfile import ParamsFile, reload_all, watch
from pytest_ktune.core.paths import params_path
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import target_id
from pytest_ktune.core.target import Target, install_call
from pytest_ktune.measure.runtime import compile_target

_NO_DEFINES: dict[str, Value] = {}
_NOTHING: dict[str, Any] = {}  # what a route's finish gets for a call it viewed by position


class CallPlan:
    """How one target's production calls run; made on its first call and kept for the process."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.binder = Binder(target)
        self.key_of = Caller(target.key_fn, target, "key")
        self.defines_of = Caller(target.defines_fn, target, "defines") if target.defines_fn is not None else None
        declared = array_arguments(target)
        self.arrays: tuple[tuple[str, frozenset[np.dtype[Any]], bool], ...] = tuple(
            (n, dts, n not in target.strided) for n, dts in declared.items())
        self.array_names = tuple(declared)
        takers = [(c.takes_all, c.names) for c in (self.key_of, self.defines_of) if c is not None]
        read = read_by(takers, [n for n in self.binder.order if n not in declared])
        # No declared array: the device is found among any arguments, which no signature covers.
        self.signature = Signature([*self.array_names, *read]) if target.key_cache and declared else None
        # A call of k positional arguments and no keywords (the common one) has a signature of k and the
        # arguments at these positions: those left out are the defaults, the same in every such call.
        self._positions: dict[int, tuple[int, ...]] = {}
        # The signature of such a call is (k, then a type and what was read of it per position): where each
        # declared array's read is, for the routes' views (``Route.view_args``).
        self.slots: dict[int, tuple[tuple[int, int], ...]] = {}
        if self.signature is not None:
            names = set(self.signature.names)
            for k in self.binder.positional_counts():
                at = self._positions[k] = tuple(i for i, n in enumerate(self.binder.positional[:k]) if n in names)
                self.slots[k] = tuple((i, 2 + 2 * j) for j, i in enumerate(at) if self.binder.positional[i] in declared)
        self.fn = target.fn
        self._dispatch: dict[tuple[Any, ...], Entry] = {}
        # The signature and entry of the last call the positional fast path served (``call``): compared first.
        self._last: tuple[tuple[Any, ...], Entry] | None = None
        self._missed = False  # whether a call missed ``_last`` since it was last replaced
        self._entries: dict[tuple[Any, ...], Entry] = {}  # by route, key and defines
        self._file: ParamsFile | None = None
        self._target_id = ""
        self._lock = threading.Lock()
        self.checking = checking()

    # -- the call ----------------------------------------------------------------------------------------
    def __call__(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        return call(self.target, *args, **kwargs)

    def _call(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], pf: ParamsFile,
              by_position: tuple[Any, ...] | None) -> Any:
        """A call by name: bound to the function's parameters; ``by_position`` is its positional signature,
        under which the entry is kept too."""
        bound = self.binder.bind(args, kwargs)
        entry = None
        sig = None
        if self.signature is not None:
            try:
                sig = self.signature(bound)
                entry = self._dispatch.get(sig)
            except (Uncacheable, AttributeError, TypeError):  # unhashable, or not an array after all
                sig = None
        if entry is None:
            entry, seen = self._first(sig, bound, pf)
            route = entry.route
        else:
            route = entry.route
            if entry.generation != pf.generation and not route.capturing():
                # A params file that changed during a CUDA graph capture is followed after it: compiling and
                # loading a module is not allowed while a stream is being captured.
                self._resolve(entry.key, entry.defines, route, pf)
            seen = bound if route.native else route.view(self, bound)
            if self.checking:
                self._check_pure(entry, seen)
        kernel = entry.kernel
        try:
            result = self.target.fn(kernel, **seen)
        except (CompileError, LaunchError) as exc:
            raise self._named(exc) from None
        if not entry.launched:
            if not kernel.launches:
                raise KtuneError("the function returned without launching a kernel", where=self.target.where,
                                 hint="call kernel.launch(grid, block, args) in it")
            entry.launched = True
        if by_position is not None and sig is not None:
            self._remember(by_position, entry)
        return result if route.native else route.finish(result, bound, seen)

    def _first(self, sig: tuple[Any, ...] | None, bound: dict[str, Any],
               pf: ParamsFile) -> tuple[Entry, dict[str, Any]]:
        """The first call of a signature: pick the route, check every array, run key and defines, find the
        entry (resolving it where the params file is newer) and remember it for the signature."""
        route = self._route(bound)
        seen = route.prepare(self, bound)
        key = dict(self.key_of(seen))
        defines = dict(self.defines_of(seen)) if self.defines_of is not None else _NO_DEFINES
        entry = self._entries.get(_entry_key(route, key, defines))
        if entry is None or (entry.generation != pf.generation and not route.capturing()):
            entry = self._resolve(key, defines, route, pf)
        if sig is not None:
            self._remember(sig, entry)
        return entry, seen

    def _remember(self, sig: tuple[Any, ...], entry: Entry) -> None:
        if len(self._dispatch) >= LIMIT:
            self._dispatch.clear()
        self._dispatch[sig] = entry

    def _route(self, bound: Mapping[str, Any]) -> Route:
        for name in self.array_names:
            a = bound.get(name)
            if a is not None:
                return route_for(a, self, name)
        for name, a in bound.items():  # no declared array given: any array among the arguments
            if router(type(a)) is not None:
                return route_for(a, self, name)
        raise BackendUnavailable(
            "no CuPy, PyOpenCL or torch array among the arguments, so the device is unknown",
            where=self.target.where, hint="pass device arrays (cupy.ndarray, pyopencl.array.Array or torch.Tensor)")

    def _check_pure(self, entry: Entry, seen: Mapping[str, Any]) -> None:
        """The debug check of the dispatch cache's contract: this call's key and defines are the entry's."""
        key = dict(self.key_of(seen))
        defines = dict(self.defines_of(seen)) if self.defines_of is not None else _NO_DEFINES
        for what, now, cached in (("key", key, entry.key), ("defines", defines, entry.defines)):
            if now != cached:
                raise KtuneError(
                    f"the {what} function gave {now!r} where an earlier call with the same signature (the arrays' "
                    f"types, dtypes, shapes, strides and devices, and the scalar arguments it takes) gave "
                    f"{cached!r}: the dispatch cache would have run the kernel for the earlier one",
                    where=self.target.where,
                    hint=f"make {what} read only the arrays' shapes, dtypes and devices and the scalar arguments "
                         "it takes, or declare the target with key_cache=False")

    # -- the first call of a route and key -----------------------------------------------------------------
    def _check_file(self) -> ParamsFile:
        pf = self._file
        if pf is None:
            path = params_path(self.target.file.parent)
            self._target_id = target_id(self.target, path.parent)
            pf = self._file = watch(path)
        else:
            pf.refresh()
        return pf

    def _resolve(self, key: dict[str, Any], defines: dict[str, Value], route: Route, pf: ParamsFile) -> Entry:
        """The entry of ``route``, ``key`` and ``defines`` with the parameters the params file records now;
        an entry that the dispatch cache already holds is updated in place, so every signature sees it."""
        with self._lock:
            generation = pf.generation
            target = self.target.for_backend(route.backend.name)  # its per_backend space and default
            record = pf.find(self._target_id, route.backend.device.id, key)
            params = target.complete(record.params) if record is not None else dict(target.default)
            target.check_config(params, key, "recorded configuration" if record else "default")
            try:
                program = compile_target(route.backend, target, params, defines)
                kernel = ProductionKernel(route.backend, program, params, target.kernel_name, route, where=target.where)
            except (CompileError, LaunchError) as exc:
                raise self._named(exc) from None
            ck = _entry_key(route, key, defines)
            entry = self._entries.get(ck)
            if entry is None:
                entry = self._entries[ck] = Entry(route, kernel, generation, key, defines)
            else:
                entry.kernel, entry.generation = kernel, generation
            return entry

    def _named(self, exc: KtuneError) -> KtuneError:
        if exc.where.startswith("target "):
            return exc
        # Backends know the source file, not the target: name both.
        return type(exc)(exc.message, where=f"{self.target.where}, source {exc.where}", hint=exc.hint)

    def forget(self) -> None:
        """Drop what was worked out from the params file (``ktune.reload``): the next call looks again."""
        with self._lock:
            self._dispatch.clear()
            self._last = None
            self._entries.clear()
            self._file = None
            self.checking = checking()

    # -- errors a call can meet --------------------------------------------------------------------------
    def bad_argument(self, name: str, what: str, hint: str) -> KtuneError:
        return KtuneError(f"argument {name} {what}", where=self.target.where, hint=hint)

    def bad_dtype(self, name: str, dtype: str, allowed: frozenset[np.dtype[Any]]) -> KtuneError:
        names = ", ".join(sorted(d.name for d in allowed))
        return self.bad_argument(name, f"has dtype {dtype}, which the target does not declare for it "
                                       f"(its cases give {names})",
                                 f"convert {name} to one of {names}, or declare a ktune.Case with a {dtype} "
                                 f"{name} (and check the kernel handles it)")

    def not_contiguous(self, name: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> KtuneError:
        return self.bad_argument(name, f"is not contiguous (shape {shape}, strides {strides}); the kernel reads "
                                       "it as one dense block",
                                 f"pass {name}.contiguous() (torch) or ascontiguousarray({name}); a target whose "
                                 f"kernel takes strides declares strided=['{name}']")


def call(target: Target, /, *args: Any, **kwargs: Any) -> Any:
    """A production call of ``target``: calling a target runs this, as its ``__call__`` (``install_call``).

    A call of positional arguments whose signature the dispatch cache knows (with the params file as it was,
    and the debug check off) reads the signature from them in place, and calls the target's function with them
    as they are (a native route) or as the route views them, in this one frame; any other call goes to the
    plan's ``_call``, which binds it by name."""
    plan: CallPlan | None = target._plan
    if plan is None:
        plan = plan_for(target)
    pf = plan._file
    if pf is None or monotonic() >= pf.next_check:  # the params file's follow-up: one comparison a call
        pf = plan._check_file()
    if kwargs or (positions := plan._positions.get(len(args))) is None:
        return plan._call(args, kwargs, pf, None)
    parts: list[Any] = [len(args)]
    readers = READERS
    try:
        for i in positions:
            v = args[i]
            t = type(v)
            parts.append(t)
            read = readers.get(t)
            if read is None:
                if t in TENSORS:  # what call.torchio.layout reads, without its frame
                    parts.append((v.dtype, v.shape, v.device, v.is_contiguous()))
                    continue
                read = reader(t)
            parts.append(v if read is value else read(v))  # a scalar as it is, without the reader's frame
        sig = tuple(parts)
        # The last signature served here first (a server calls one shape over and over): a comparison of two
        # tuples that share most of their parts, where the lookup hashes every part; then the lookup. The
        # last one gives way at every second miss, so calls that alternate between signatures still find it.
        last = plan._last
        if last is not None and sig == last[0]:
            entry: Entry | None = last[1]
        else:
            entry = plan._dispatch.get(sig)
            if entry is not None and entry.launched:
                if last is None or plan._missed:
                    plan._last, plan._missed = (sig, entry), False
                else:
                    plan._missed = True
    except (Uncacheable, AttributeError, TypeError):  # unhashable, or not an array after all
        return plan._call(args, kwargs, pf, None)
    if entry is None or entry.generation != pf.generation or not entry.launched or plan.checking:
        return plan._call(args, kwargs, pf, sig)
    route = entry.route
    try:
        if route.native:
            return plan.fn(entry.kernel, *args)
        seen = route.view_args(plan, args, sig)
        if seen is None:  # the route looks at this call as a whole (and names what is wrong with it)
            return plan._call(args, kwargs, pf, None)
        result = plan.fn(entry.kernel, *seen)
    except (CompileError, LaunchError) as exc:
        raise plan._named(exc) from None
    # A result that is one of the route's views goes back as its tensor, as the route's finish would give it.
    if type(result) is route.view_type:
        return result.tensor  # type: ignore[attr-defined]
    return route.finish(result, _NOTHING, _NOTHING)


install_call(call)


def _entry_key(route: Route, key: Mapping[str, Any], defines: Mapping[str, Value]) -> tuple[Any, ...]:
    try:
        ck: tuple[Any, ...] = (route, tuple(key.items()), tuple(defines.items()))
        hash(ck)
    except TypeError:  # an unhashable key or define value: its text names it
        ck = (route, key_string(key), repr(sorted((k, str(v)) for k, v in defines.items())))
    return ck


# -- plans, by target ---------------------------------------------------------------------------------------
_PLANS: list[CallPlan] = []
_PLANS_LOCK = threading.Lock()


def plan_for(target: Target) -> CallPlan:
    """The target's call plan, made on its first call and kept on it (``Target._plan``)."""
    with _PLANS_LOCK:
        plan: CallPlan | None = target._plan
        if plan is None:
            plan = CallPlan(target)
            object.__setattr__(target, "_plan", plan)  # a frozen dataclass: its one cache slot is set here
            _PLANS.append(plan)
        return plan


def reload() -> None:
    """Look at the params files again now, and drop every cached lookup, so that the next call of each
    target finds its params file again (``KTUNE_PARAMS`` included) and reads what it records."""
    for plan in list(_PLANS):
        plan.forget()
    reload_all()
