"""The backend contract on the OpenCL backend (PoCL's CPU device where there is no GPU)."""

from __future__ import annotations

import pytest

from pytest_ktune import BackendUnavailable
from pytest_ktune.backends import Backend, create
from pytest_ktune.testing import BackendContract


class TestOpenCLBackend(BackendContract):
    @pytest.fixture
    def backend(self) -> Backend:
        try:
            return create("opencl")
        except BackendUnavailable as exc:
            pytest.skip(f"{exc.message}; {exc.hint}")
