"""Writing files so that a reader never sees half of one: the one atomic write of the package."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's file-creation mask (read without changing it for longer than the call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` in one rename: a temporary file beside it, then ``os.replace``.

    An existing file keeps its mode; a new one gets 0666 under the umask (0644 under the usual 022),
    as a plain ``open(path, "w")`` would, not the 0600 of a temporary file. The folder is made
    if it is missing. On any failure the temporary file is removed and the old file stays.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~umask()
    blob = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
