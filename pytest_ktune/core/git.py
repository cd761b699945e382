"""The one way the package runs git: GitPython's command runner, for read-only queries here (the
commit a baseline was recorded at, old sources, the state of the tree) and for the write-back's
plumbing (``writeback.repo``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_ktune.core.errors import KtuneError

QUERY_TIMEOUT_S = 30.0
EXPORT_TIMEOUT_S = 300.0  # a whole tree, written out: longer than a query


class GitUnavailable(KtuneError):
    """git cannot be run: GitPython is missing, or finds no git executable."""


def _runner(cwd: Path) -> Any:
    try:
        import git
    except ImportError as exc:  # GitPython missing, or no git executable on PATH
        raise GitUnavailable(f"git cannot be used: {exc}",
                             hint="install git and GitPython (`pip install gitpython`)") from None
    return git.Git(str(cwd))


def execute(cwd: Path, args: Sequence[str], *, env: Mapping[str, str] | None = None,
            timeout: float | None = None) -> tuple[int, str, str]:
    """``git ARGS`` in ``cwd``: its exit status, standard output and standard error, as text.

    ``env`` adds to the process's environment. Raises GitUnavailable where git cannot run at all.
    """
    status, out, err = _runner(cwd).execute(["git", *args], with_extended_output=True, with_exceptions=False,
                                            env=dict(env) if env else None, strip_newline_in_stdout=False,
                                            kill_after_timeout=timeout)
    return int(status), str(out), str(err)


def output(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str | None:
    """The standard output of a read-only ``git ARGS``; None where it fails, times out, or git cannot run."""
    try:
        status, out, _ = execute(cwd, args, env={"GIT_OPTIONAL_LOCKS": "0", **(env or {})},
                                 timeout=QUERY_TIMEOUT_S)
    except (GitUnavailable, OSError):
        return None
    return out if status == 0 else None


def head_commit(root: Path) -> str | None:
    """HEAD's full hash, or None outside a git repository or before the first commit."""
    out = output(root, "rev-parse", "--verify", "-q", "HEAD")
    return out.strip() if out else None


def file_at(root: Path, commit: str, path: Path) -> str | None:
    """The text of ``path`` as committed in ``commit``, or None if git cannot give it."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    return output(root, "show", f"{commit}:./{rel.as_posix()}")


def differs_from_head(root: Path, path: Path) -> bool:
    """Whether ``path`` has changes that HEAD does not hold (or is not tracked)."""
    tracked = output(root, "ls-files", "--error-unmatch", str(path))
    if tracked is None:
        return True
    out = output(root, "status", "--porcelain", "--", str(path))
    return bool(out and out.strip())


def export_tree(root: Path, commit: str, dest: Path) -> None:
    """Write the files that ``commit`` holds under the folder ``dest``: ``git archive`` of the commit,
    unpacked there (of the whole commit where ``root`` is the repository's top folder; of the folder
    ``root`` only, where it is one below). Read-only for the repository: its index, work tree and HEAD are left alone. A
    KtuneError saying why where git cannot give them."""
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    archive = dest.with_name(dest.name + ".tar")
    try:
        status, _, err = execute(root, ["archive", "--format=tar", f"--output={archive}", commit],
                                 env={"GIT_OPTIONAL_LOCKS": "0"}, timeout=EXPORT_TIMEOUT_S)
        if status != 0:
            raise KtuneError(f"git archive {commit[:12]} failed: {err.strip() or f'exit status {status}'}",
                             where=str(root), hint="check that the commit exists here (git fetch it first)")
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    finally:
        archive.unlink(missing_ok=True)
