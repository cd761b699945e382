"""Errors a user can meet. Each names the target, the file and what to do next."""

from __future__ import annotations


class KtuneError(Exception):
    """Base class for every error pytest-ktune raises on purpose.

    ``where`` is the target and file the error concerns; ``hint`` is the next
    step for the user. Both are printed with the message, so the plugin never
    needs to show a traceback from our own code.
    """

    def __init__(self, message: str, *, where: str = "", hint: str = "") -> None:
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        parts = [f"{self.where}: {self.message}" if self.where else self.message]
        if self.hint:
            parts.append(f"next step: {self.hint}")
        return "\n".join(parts)


class SpaceError(KtuneError):
    """A parameter space, constraint or default that cannot be used."""


class CompileError(KtuneError):
    """A kernel source that the backend's compiler rejected."""


class LaunchError(KtuneError):
    """A kernel launch that the device refused or that failed while running."""


class LimitError(LaunchError):
    """A launch that breaks a device limit (threads, registers or shared memory per block).

    The tuner records such a configuration as infeasible rather than failed.
    """


class ReferenceShapeError(KtuneError):
    """A reference whose outputs do not match the kernel's in number, shape or dtype."""


class StoreError(KtuneError):
    """A params file that cannot be read or written."""


class BackendUnavailable(KtuneError):
    """A backend whose packages or device are missing on this machine."""


class MismatchError(KtuneError):
    """A kernel whose output disagrees with the reference."""


class KtuneWarning(UserWarning):
    """A problem that does not stop a production call: a damaged params file, whose last good records (or
    the defaults) stay in use."""
