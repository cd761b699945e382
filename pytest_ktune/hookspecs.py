"""The extension points of pytest-ktune: hooks a conftest or a plugin implements to supply a
backend, a sampler or a write-back mode. Registered through ``pytest_addhooks``.

Each hook maps a name (what the user gives ``--ktune-backend``, ``--ktune-sampler`` or
``--ktune-write``) to the thing that makes it, and returns None for a name it does not know. The
first implementation that answers wins; the built-in backends, samplers and modes are themselves
implementations (``pytest_ktune.run.extensions.Builtins``), marked ``trylast``, so a conftest's
implementation is asked first and may replace a built-in name too. Names are asked for when the run
starts, so an unknown one is an error before anything is timed.

A conftest that runs every kernel of its suite on its own backend::

    # conftest.py
    from mybackend import MyBackend   # implements pytest_ktune.backends.Backend, with name = "opencl"

    def pytest_ktune_backend(name):
        return MyBackend if name == "my-opencl" else None

then ``pytest --ktune --ktune-backend my-opencl``. The name on the command line picks the factory;
the backend's own ``name`` is the language of the sources it compiles (``cuda`` or ``opencl``), so
it runs the targets' sources of that language, and its records are that backend's. The ``ktune``
command asks the same hooks of the plugins that register themselves under the entry-point group
``ktune``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from pytest_ktune.backends.base import BackendFactory
    from pytest_ktune.tuner.samplers import SamplerFactory
    from pytest_ktune.writeback.deliver import WriteBack

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_ktune_backend(name: str) -> BackendFactory | None:
    """The factory of the backend called ``name``: a callable of no arguments that returns an object
    implementing ``pytest_ktune.backends.Backend`` (``pytest_ktune.testing.BackendContract`` is the
    test suite it should pass), whose ``name`` says which sources it compiles. None: not a name
    this implementation knows.

    ``auto`` is resolved before the hook is asked: to ``cuda`` where a GPU is visible, else
    ``opencl``. The tuner's worker processes make their backend again from the factory, which they
    import by its module and name: define it in an importable module.
    """


@hookspec(firstresult=True)
def pytest_ktune_sampler(name: str) -> SamplerFactory | None:
    """The factory of the sampler called ``name``: a callable that takes a
    ``pytest_ktune.tuner.samplers.SamplerRequest`` (the seed, the parameters' encoding and the key's
    feasible configurations) and returns an Optuna sampler. The tuner enqueues its warm starts and
    device priors first; the sampler proposes the rest. None: not a name this implementation knows.
    """


@hookspec(firstresult=True)
def pytest_ktune_write_back(mode: str) -> WriteBack | None:
    """What to do with tuned winners in mode ``mode``: a callable that takes a
    ``pytest_ktune.writeback.deliver.WriteRequest`` (the project root, the params file, the tunes'
    outcomes with the records they leave, the agent stage's templates, the device) and returns one
    line for the terminal, or raises a KtuneError when it cannot deliver (the run then fails). The
    tuner and the agent write none of the user's files: a mode is given every write of the run, so
    one that answers for a built-in name (``file``, say) decides all of them.
    """
