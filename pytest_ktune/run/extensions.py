"""The built-in backends, samplers and write-back modes as hook implementations, and the names a run
was given resolved through the hooks into what makes them (``Extensions``).

``Builtins`` implements the hooks of ``pytest_ktune.hookspecs`` with ``trylast``, so that a conftest
or a plugin is asked first. The pytest plugin registers it beside the user's plugins; the ``ktune``
command makes its own plugin manager (``cli_manager``) with it and the plugins of the entry-point
group ``ktune``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.names import AUTO

if TYPE_CHECKING:
    from pytest_ktune.backends.base import BackendFactory
    from pytest_ktune.tuner.samplers import SamplerFactory
    from pytest_ktune.writeback.deliver import WriteBack

hookimpl = pluggy.HookimplMarker("pytest")
ENTRY_POINTS = "ktune"  # the entry-point group whose plugins the ``ktune`` command loads


class Builtins:
    """The built-in implementations of the extension hooks (asked last)."""

    @hookimpl(trylast=True)
    def pytest_ktune_backend(self, name: str) -> BackendFactory | None:
        from pytest_ktune.backends import builtin_factory

        return builtin_factory(name)

    @hookimpl(trylast=True)
    def pytest_ktune_sampler(self, name: str) -> SamplerFactory | None:
        from pytest_ktune.tuner.samplers import builtin_factory

        return builtin_factory(name)

    @hookimpl(trylast=True)
    def pytest_ktune_write_back(self, mode: str) -> WriteBack | None:
        from pytest_ktune.writeback.deliver import builtin_write_back

        return builtin_write_back(mode)


class HookRelay(Protocol):
    """The part of pytest's (or a pluggy manager's) ``hook`` relay that the extensions use."""

    pytest_ktune_backend: Any
    pytest_ktune_sampler: Any
    pytest_ktune_write_back: Any


@dataclass(frozen=True)
class Extensions:
    """The backend, sampler and write-back mode of a run, made by whichever implementation answered
    for their names. ``backend`` None: the built-in backend ``auto`` resolves to."""

    backend: BackendFactory | None = None
    sampler: SamplerFactory | None = None
    write_back: WriteBack | None = None


def resolve(hook: HookRelay, *, backend: str, sampler: str | None, write: str | None) -> Extensions:
    """Ask the hooks for each name (``sampler`` and ``write`` None: not used by this run); a name no
    implementation knows is a KtuneError saying which option and what is known."""
    from pytest_ktune import backends
    from pytest_ktune.tuner.samplers import unknown as unknown_sampler
    from pytest_ktune.writeback.deliver import unknown as unknown_mode

    factory = None
    if backend != AUTO:
        factory = hook.pytest_ktune_backend(name=backend)
        if factory is None:
            raise backends.unknown(backend)
    make_sampler = None
    if sampler is not None:
        make_sampler = hook.pytest_ktune_sampler(name=sampler)
        if make_sampler is None:
            raise unknown_sampler(sampler)
    write_back = None
    if write is not None:
        write_back = hook.pytest_ktune_write_back(mode=write)
        if write_back is None:
            raise unknown_mode(write)
    return Extensions(backend=factory, sampler=make_sampler, write_back=write_back)


class _Manager(pluggy.PluginManager):
    """A plugin manager that, as pytest's does, takes a plugin's plain ``pytest_ktune_*`` functions as
    hook implementations, so that one module serves as a conftest and as a ``ktune`` plugin."""

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith("pytest_ktune_") and callable(getattr(plugin, name, None)):
            return pluggy.HookimplOpts(wrapper=False, hookwrapper=False, optionalhook=False, tryfirst=False,
                                       trylast=False, specname=None)
        return opts


def cli_manager() -> pluggy.PluginManager:
    """The ``ktune`` command's plugin manager: the hookspecs, the built-ins, and the plugins of the
    entry-point group ``ktune``."""
    from pytest_ktune import hookspecs

    pm = _Manager("pytest")
    pm.add_hookspecs(hookspecs)
    pm.register(Builtins(), "ktune-builtins")
    try:
        pm.load_setuptools_entrypoints(ENTRY_POINTS)
    except Exception as exc:  # a broken third-party plugin: say which, do not crash the command
        raise KtuneError(f"a plugin of the entry-point group {ENTRY_POINTS!r} failed to load: "
                         f"{type(exc).__name__}: {exc}", hint="fix or uninstall that plugin") from None
    return pm
