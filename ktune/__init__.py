"""``import ktune``: the short name of pytest_ktune (installed as the top-level package ``ktune``)."""

from pytest_ktune import *  # noqa: F403
from pytest_ktune import __all__ as __all__
from pytest_ktune.core.version import __version__ as __version__
