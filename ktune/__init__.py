"""``import ktune``: the short name of pytest_ktune (installed as the top-level package ``ktune``)."""

from pytest_ktune import *  # noqa: F403
from pytest_ktune import __all__, __version__  # noqa: F401
