"""What a write-back writes: the new texts of files, and how the commit or pull request describes them."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.redact import redact as core_redact
from pytest_ktune.core.version import __version__

TRAILER = "Generated-by: pytest-ktune"


@dataclass(frozen=True)
class Change:
    """What to write back: new full texts of files, and how to describe them.

    ``files`` maps a path relative to the root the functions are given (the
    repository's top level or a folder inside it), in posix form, to the file's
    new text. ``body_markdown`` is the before/after table the caller built; it
    becomes the commit message's body and the pull request's description.
    ``targets`` (target ids or names) and ``device`` name the branch. ``new_files``: paths of
    ``files`` that must not exist yet (a template the agent made): a file mode that finds one
    already there with another text refuses the whole change, so no file of the user's is replaced.
    """

    files: Mapping[str, str]
    title: str
    body_markdown: str
    targets: tuple[str, ...]
    device: str
    new_files: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PullRequest:
    """The pull request :func:`open_pr` created or updated."""

    number: int
    url: str
    branch: str
    sha: str
    created: bool


class WritebackError(KtuneError):
    """Results could not be written back; the message says why and what to do."""


class NothingToWrite(WritebackError):
    """The new texts are those HEAD already holds: there is nothing to commit or propose."""


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` without ``secrets`` and without any credentials of a URL: a git remote's user can be
    a token itself."""
    return core_redact(text, secrets, whole_credentials=True)


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9._]+", "-", text.lower())
    s = re.sub(r"\.{2,}", ".", s)
    s = re.sub(r"-{2,}", "-", s)
    return s.strip("-.")


def branch_name(change: Change, date: _dt.date | None = None) -> str:
    """``ktune/<targets>-<device>-<YYYYMMDD>``, within git's rules for ref names.

    Targets are named by their last ``::`` part; more than three are shortened to
    the first two and a count.
    """
    day = date or _dt.datetime.now(_dt.timezone.utc).date()
    names = [_slug(t.rsplit("::", 1)[-1]) for t in change.targets]
    names = [n for n in dict.fromkeys(names) if n] or ["kernels"]
    if len(names) > 3:
        names = [*names[:2], f"{len(names) - 2}-more"]
    parts = ["+".join(names)[:80], _slug(change.device)[:40], day.strftime("%Y%m%d")]
    name = "-".join(p.strip("-.") for p in parts if p.strip("-."))
    if name.endswith(".lock"):
        name = name[: -len(".lock")]
    return f"ktune/{name}"


def check_paths(change: Change, where: str) -> None:
    if not change.files:
        raise WritebackError("the change holds no files", where=where,
                             hint="pass the new params-file text in Change.files")
    for path in change.files:
        p = PurePosixPath(path)
        if (not path or "\\" in path or p.is_absolute() or any(part in ("", ".", "..") for part in path.split("/"))
                or p.parts[0] == ".git"):
            raise WritebackError(f"{path!r} is not a plain relative path inside the repository", where=where,
                                 hint="give paths relative to the project root, in posix form, without '..'")


def commit_message(change: Change, branch: str) -> str:

    body = change.body_markdown.strip("\n")
    parts = [change.title.strip(), body, f"{TRAILER} {__version__} ({branch})"]
    return "\n\n".join(p for p in parts if p) + "\n"
