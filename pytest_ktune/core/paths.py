"""Where the params file is: one rule for the pytest plugin, the ``ktune`` command and production calls.

In order, the first that applies:

1. the path given on the command line (``--ktune-params``, ``ktune --params``);
2. the ``KTUNE_PARAMS`` environment variable;
3. the path the project's configuration names (the ``ktune_params`` ini key, ``params`` in
   ``[tool.ktune]``), relative to the file that names it;
4. the nearest ``ktune-params.json`` in the starting folder or one above it: the rootdir for
   pytest, ``--root`` (or the current folder) for the command line, the folder of the target's
   file for a production call;
5. ``ktune-params.json`` in the project root (the starting folder where there is none): where a
   first baseline or tune writes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

FILENAME = "ktune-params.json"
ENV = "KTUNE_PARAMS"


def nearest(start: Path) -> Path | None:
    """``ktune-params.json`` in ``start`` or the nearest folder above it; None where there is none."""
    for folder in [start, *start.parents]:
        candidate = folder / FILENAME
        if candidate.is_file():
            return candidate
    return None


def params_path(start: Path, *, explicit: str | Path | None = None, root: Path | None = None,
                env: Mapping[str, str] | None = None, configured: Path | None = None) -> Path:
    """The params file by the rule above (the file need not exist yet), as an absolute path;
    ``explicit`` relative to ``root``, ``configured`` absolute."""
    base = (root or start).resolve()
    if explicit:
        return (base / Path(explicit).expanduser()).resolve()
    named = (os.environ if env is None else env).get(ENV)
    if named:
        return Path(named).expanduser().resolve()
    if configured is not None:
        return configured.resolve()
    found = nearest(start.resolve())
    return found if found is not None else base / FILENAME
