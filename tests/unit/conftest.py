"""Fixtures of the unit tests: ``backend``, a backend of each kind the example's template tests run on (OpenCL
here, CUDA on a GPU), for the tests that ask for it and define no ``backend`` of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_ktune.backends import Backend, create
from pytest_ktune.core.errors import BackendUnavailable

BACKENDS = ["opencl", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    try:
        be = create(request.param)
    except BackendUnavailable as exc:  # pragma: no cover - CI installs PoCL
        pytest.skip(f"{exc.message}; {exc.hint}")
    yield be
    be.release()
