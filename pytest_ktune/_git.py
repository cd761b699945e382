"""Read-only git queries: the commit a baseline was recorded at, and old sources."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def head_commit(root: Path) -> str | None:
    """HEAD's full hash, or None outside a git repository or before the first commit."""
    out = _git(root, "rev-parse", "--verify", "-q", "HEAD")
    return out.strip() if out else None


def file_at(root: Path, commit: str, path: Path) -> str | None:
    """The text of ``path`` as committed in ``commit``, or None if git cannot give it."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    return _git(root, "show", f"{commit}:./{rel.as_posix()}")


def differs_from_head(root: Path, path: Path) -> bool:
    """Whether ``path`` has changes that HEAD does not hold (or is not tracked)."""
    tracked = _git(root, "ls-files", "--error-unmatch", str(path))
    if tracked is None:
        return True
    out = _git(root, "status", "--porcelain", "--", str(path))
    return bool(out and out.strip())
