"""Test helpers shipped with pytest-ktune.

``BackendContract`` is the behaviour every backend promises. To check a
backend, subclass it in a test module and give it a ``backend`` fixture::

    import pytest
    from pytest_ktune.backends import Backend, create
    from pytest_ktune.testing import BackendContract

    class TestMyBackend(BackendContract):
        @pytest.fixture
        def backend(self) -> Backend:
            return create("opencl")

``openai_stub`` serves scripted chat completions on a loopback port, for tests of the agent.
``fake_cuda`` stands in for CuPy and for torch's CUDA tensors, to run the CUDA routes of production calls
without a GPU.

May import: every layer below the skins; it sits beside them, for users' own test suites.
"""

from __future__ import annotations

from pytest_ktune.testing.contract import BackendContract

__all__ = ["BackendContract"]
