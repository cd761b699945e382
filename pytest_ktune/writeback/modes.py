"""Writing a tune's results back to the user's repository: in place, as a patch, a branch or a pull request.

The four modes of ``--ktune-write``:

``file``
    :func:`write_file` replaces the files in the working tree, atomically. The
    only mode that touches the working tree.
``patch``
    :func:`write_patch` saves a unified diff against HEAD that ``git apply``
    takes, under ``.ktune/patches/``.
``commit``
    :func:`commit_branch` creates the branch ``ktune/<targets>-<device>-<date>``
    from HEAD with one commit holding the changed files.
``pr``
    :func:`open_pr` commits as ``commit`` does, pushes the branch and opens a
    pull request on GitHub, or updates the one already open for that branch.

The git modes never touch HEAD, the index, the working tree or any ref but the
ktune branch: blobs, trees and commits are written to the object database, the
tree is built in a temporary index (``GIT_INDEX_FILE``), the commit made with
``git commit-tree`` and the branch set with ``git update-ref`` against its
expected old value. When a later step fails, what was created is removed again.

Re-running ``pr`` mode on the same day gives the same branch name. When that
branch already exists — on the remote, locally, or both — from an earlier
ktune run, the new commit goes on top of it instead of replacing it: its
parents are the branch's tip and HEAD (only the tip when HEAD is already in the
branch), and its tree is HEAD's with the new files. The push is then a
fast-forward, needs no force, and the pull request's diff against its base is
exactly this run's change; the open pull request gets the new title and body.
A branch whose tip ktune did not make (every ktune commit carries the trailer
``Generated-by: pytest-ktune``) is never built on: someone else's work would be
superseded.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from pytest_ktune.core.files import write_atomic
from pytest_ktune.writeback.change import (
    Change,
    NothingToWrite,
    WritebackError,
    branch_name,
    check_paths,
    commit_message,
)
from pytest_ktune.writeback.repo import Repo, prepare


def write_file(root: Path, change: Change) -> str:
    """Write every file of ``change`` in place under ``root``, each atomically; a one-line summary.

    Every file is checked before any is written: one of ``change.new_files`` that exists with another
    text, or a path that leads out of ``root`` through a link, refuses the change with nothing written."""
    root = Path(root)
    check_paths(change, str(root))
    todo = []
    for rel, text in sorted(change.files.items()):
        path = root.joinpath(*rel.split("/"))
        if not path.parent.resolve().is_relative_to(root.resolve()) or (path.is_symlink() and rel in change.new_files):
            raise WritebackError(f"{rel} would be written outside {root} (through a link); nothing was written",
                                 where=str(path), hint="remove the link, or deliver with --ktune-write=patch")
        try:
            same = path.is_file() and path.read_bytes() == text.encode()
        except OSError as exc:
            raise WritebackError(f"cannot read {rel}: {exc.strerror}", where=str(path),
                                 hint="check the file's permissions") from None
        if same:
            continue
        if rel in change.new_files and path.exists():
            raise WritebackError(f"{rel} exists with another text; nothing was written", where=str(path),
                                 hint="move the old file away and rerun (the decision is kept), or deliver with "
                                      "--ktune-write=patch, commit or pr")
        todo.append((rel, path, text))
    written = []
    for rel, path, text in todo:
        try:
            write_atomic(path, text.encode())
        except OSError as exc:
            raise WritebackError(f"cannot write {rel}: {exc.strerror}", where=str(path),
                                 hint="check the folder's permissions and free space") from None
        written.append(rel)
    if not written:
        return "nothing written: the files already hold these texts"
    return f"wrote {', '.join(written)}"


def write_patch(repo_root: Path, change: Change, out_dir: Path, *, date: _dt.date | None = None) -> Path:
    """Save a unified diff of ``change`` against HEAD, which ``git apply`` takes at the repository's top level.

    The diff is made by git from a tree built in the object database; the file
    is named after the branch that ``commit`` mode would create. Returns its path.
    """
    check_paths(change, str(repo_root))
    repo = Repo.open(repo_root)
    head = repo.head()
    files = repo.full_paths(change)
    tree, changed = repo.build_tree(files, head)
    if not changed:
        raise repo.error("nothing to write: HEAD already holds these texts", cls=NothingToWrite)
    diff = repo.run("-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false", "-c", "core.quotePath=true",
                    "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--full-index",
                    "--src-prefix=a/", "--dst-prefix=b/", head, tree, what="git diff")
    out = Path(out_dir) / f"{branch_name(change, date).replace('/', '-')}.patch"
    try:
        write_atomic(out, diff.encode())
    except OSError as exc:
        raise WritebackError(f"cannot write the patch: {exc.strerror}", where=str(out),
                             hint="check the folder's permissions and free space") from None
    return out


def commit_branch(repo_root: Path, change: Change, *, branch: str | None = None,
                  date: _dt.date | None = None) -> tuple[str, str]:
    """Create ``branch`` (default :func:`branch_name`) from HEAD with one commit holding ``change``.

    Refuses, before creating anything, outside git, on a detached HEAD, when a
    file of ``change`` has uncommitted changes, and when the branch exists.
    Returns the branch's name and the commit's hash.
    """
    p = prepare(repo_root, change, branch, date)
    repo = p.repo
    if repo.rev(f"refs/heads/{p.branch}") is not None:
        raise repo.error(f"the branch {p.branch} already exists",
                         hint=f"look at it, merge or delete it (`git branch -D {p.branch}`), then run again")
    tree, changed = repo.build_tree(p.files, p.head)
    if not changed:
        raise repo.error("nothing to commit: HEAD already holds these texts", cls=NothingToWrite)
    sha = repo.commit(tree, [p.head], commit_message(change, p.branch))
    repo.set_ref(p.branch, sha, None, f"ktune: {change.title}")
    return p.branch, sha
