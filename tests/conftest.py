"""Skip ``gpu``-marked tests, with the reason, where no NVIDIA GPU is visible; and the fixtures of a
throwaway PostgreSQL server (``postgres_server``, ``postgres_url``, ``postgres_fresh_url``: see
tests/postgres.py) for the tests that share an Optuna study between processes."""

from __future__ import annotations

import pytest
from postgres import postgres_fresh_url, postgres_server, postgres_url  # noqa: F401  (fixtures)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from pytest_ktune.backends.cuda import gpu_visible

    if gpu_visible():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (pip install 'pytest-ktune[cuda]'); "
                                   "none is visible here")
    for item in gpu_items:
        item.add_marker(skip)
