"""The backend contract on the CUDA backend; skipped where no NVIDIA GPU is visible."""

from __future__ import annotations

import pytest

from pytest_ktune.backends import Backend, create
from pytest_ktune.testing import BackendContract

pytestmark = pytest.mark.gpu


class TestCudaBackend(BackendContract):
    @pytest.fixture
    def backend(self) -> Backend:
        return create("cuda")
