"""The backend contract (``pytest_ktune.testing.BackendContract``) run on each shipped backend."""
