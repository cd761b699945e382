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
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ._errors import KtuneError

TRAILER = "Generated-by: pytest-ktune"
DEFAULT_API_URL = "https://api.github.com"
_FALLBACK_NAME = "pytest-ktune"
_FALLBACK_EMAIL = "pytest-ktune@users.noreply.github.com"
_NETWORK_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Change:
    """What to write back: new full texts of files, and how to describe them.

    ``files`` maps a path relative to the root the functions are given (the
    repository's top level or a folder inside it), in posix form, to the file's
    new text. ``body_markdown`` is the before/after table the caller built; it
    becomes the commit message's body and the pull request's description.
    ``targets`` (target ids or names) and ``device`` name the branch.
    """

    files: Mapping[str, str]
    title: str
    body_markdown: str
    targets: tuple[str, ...]
    device: str


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


# -- text helpers --------------------------------------------------------------------------------------

_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` without the given secrets, nor any user and password written into a URL."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}***@", text)


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


def _check_paths(change: Change, where: str) -> None:
    if not change.files:
        raise WritebackError("the change holds no files", where=where,
                             hint="pass the new params-file text in Change.files")
    for path in change.files:
        p = PurePosixPath(path)
        if (not path or "\\" in path or p.is_absolute() or any(part in ("", ".", "..") for part in path.split("/"))
                or p.parts[0] == ".git"):
            raise WritebackError(f"{path!r} is not a plain relative path inside the repository", where=where,
                                 hint="give paths relative to the project root, in posix form, without '..'")


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        Path(tmp).chmod(mode if mode is not None else 0o666 & ~_umask())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- mode "file" ---------------------------------------------------------------------------------------


def write_file(root: Path, change: Change) -> str:
    """Write every file of ``change`` in place under ``root``, each atomically; a one-line summary."""
    root = Path(root)
    _check_paths(change, str(root))
    written = []
    for rel, text in sorted(change.files.items()):
        path = root.joinpath(*rel.split("/"))
        try:
            if path.exists() and path.read_bytes() == text.encode():
                continue
            _atomic_write(path, text.encode())
        except OSError as exc:
            raise WritebackError(f"cannot write {rel}: {exc.strerror}", where=str(path),
                                 hint="check the folder's permissions and free space") from None
        written.append(rel)
    if not written:
        return "nothing written: the files already hold these texts"
    return f"wrote {', '.join(written)}"


# -- git -----------------------------------------------------------------------------------------------


class _Repo:
    """git plumbing through GitPython's command runner, with the token kept out of every message."""

    def __init__(self, top: Path, prefix: str, secrets: Sequence[str]) -> None:
        self.top = top
        self.prefix = prefix
        self.secrets = tuple(secrets)
        self._git = _git_runner(top)

    @classmethod
    def open(cls, root: Path, secrets: Sequence[str] = ()) -> _Repo:
        root = Path(root)
        if not root.is_dir():
            raise WritebackError("the folder does not exist", where=str(root),
                                 hint="run from the project root, inside a clone of the repository")
        runner = _git_runner(root)
        status, out, err = _execute(runner, ["git", "rev-parse", "--show-toplevel", "--show-prefix"], None)
        lines = out.splitlines()
        if status != 0 or not lines:
            said = err.strip().splitlines()[0] if err.strip() else ""
            raise WritebackError("not a git repository, so ktune cannot commit, diff or open a pull request "
                                 f"here{f' (git: {said})' if said else ''}", where=str(root),
                                 hint="run inside a clone of the repository, or use --ktune-write=file")
        prefix = lines[1] if len(lines) > 1 else ""
        return cls(Path(lines[0]), prefix, secrets)

    # running
    def run_status(self, *args: str, env: Mapping[str, str] | None = None,
                   timeout: float | None = None) -> tuple[int, str, str]:
        return _execute(self._git, ["git", *args], env, timeout)

    def run(self, *args: str, env: Mapping[str, str] | None = None, what: str = "",
            hint: str = "", timeout: float | None = None) -> str:
        status, out, err = self.run_status(*args, env=env, timeout=timeout)
        if status != 0:
            raise self.error(f"{what or 'git ' + args[0]} failed: {err.strip() or f'exit status {status}'}",
                             hint=hint)
        return out

    def error(self, message: str, hint: str = "", cls: type[WritebackError] = WritebackError) -> WritebackError:
        return cls(redact(message, self.secrets), where=redact(str(self.top), self.secrets),
                   hint=redact(hint, self.secrets))

    # queries
    def rev(self, name: str) -> str | None:
        status, out, _ = self.run_status("rev-parse", "--verify", "-q", name)
        return out.strip() if status == 0 and out.strip() else None

    def head(self) -> str:
        sha = self.rev("HEAD^{commit}")
        if sha is None:
            raise self.error("the repository has no commit yet", hint="commit the project first")
        return sha

    def current_branch(self) -> str:
        status, out, _ = self.run_status("symbolic-ref", "-q", "--short", "HEAD")
        if status != 0 or not out.strip():
            raise self.error("HEAD is detached, so there is no branch to base a ktune branch and pull request on",
                             hint="check out the branch the results belong on (e.g. `git switch main`), or "
                                  "use --ktune-write=patch")
        return out.strip()

    def full_paths(self, change: Change) -> dict[str, bytes]:
        return {self.prefix + rel: text.encode() for rel, text in sorted(change.files.items())}

    def refuse_dirty(self, paths: Sequence[str]) -> None:
        specs = [f":(top,literal){p}" for p in paths]
        out = self.run("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *specs,
                       env={"GIT_OPTIONAL_LOCKS": "0"}, what="git status")
        dirty = sorted({entry[3:] for entry in out.split("\0") if len(entry) > 3})
        if dirty:
            raise self.error(f"{', '.join(dirty)} has changes that HEAD does not hold (staged, unstaged or "
                             "untracked), so a commit made from HEAD would not match what you have",
                             hint=f"commit or stash them first (`git -C {self.top} stash`), then run again")

    def check_branch_name(self, name: str) -> None:
        status, _, _ = self.run_status("check-ref-format", f"refs/heads/{name}")
        if status != 0:
            raise self.error(f"{name!r} is not a valid branch name", hint="pass another name")

    def is_ancestor(self, a: str, b: str) -> bool:
        return self.run_status("merge-base", "--is-ancestor", a, b)[0] == 0

    def has_commit(self, sha: str) -> bool:
        return self.run_status("cat-file", "-e", f"{sha}^{{commit}}")[0] == 0

    def is_ktune_commit(self, sha: str) -> bool:
        message = self.run("log", "-1", "--format=%B", sha, what="git log")
        return any(line.strip().startswith(TRAILER) for line in message.splitlines())

    def tree_of(self, sha: str) -> str:
        return self.run("rev-parse", f"{sha}^{{tree}}", what="git rev-parse").strip()

    def remote_url(self, remote: str) -> str:
        status, out, _ = self.run_status("remote", "get-url", "--push", remote)
        if status != 0 or not out.strip():
            raise self.error(f"the repository has no remote {remote!r}",
                             hint=f"add it (`git remote add {remote} URL`), or pass another remote")
        return out.strip()

    def upstream_branch(self, branch: str, remote: str) -> str:
        """The name the base branch has on ``remote`` (its upstream's), else its local name."""
        status, out, _ = self.run_status("config", "--get", f"branch.{branch}.remote")
        merge = self.run_status("config", "--get", f"branch.{branch}.merge")[1].strip()
        if status == 0 and out.strip() == remote and merge.startswith("refs/heads/"):
            return merge[len("refs/heads/"):]
        return branch

    def remote_tip(self, remote: str, branch: str) -> str | None:
        out = self.run("ls-remote", "--heads", remote, f"refs/heads/{branch}", what=f"reading {remote}'s branches",
                       hint=f"check that the remote {remote!r} is reachable and that git can authenticate to it",
                       env=_NO_PROMPT, timeout=_NETWORK_TIMEOUT_S)
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref == f"refs/heads/{branch}":
                return sha
        return None

    def fetch(self, remote: str, branch: str) -> None:
        # --refmap= with no value: bring the objects in without updating any remote-tracking ref.
        self.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--refmap=", remote,
                 f"refs/heads/{branch}", what=f"fetching {branch} from {remote}", env=_NO_PROMPT,
                 timeout=_NETWORK_TIMEOUT_S)

    # writing objects (never the index, the working tree or HEAD)
    def build_tree(self, files: Mapping[str, bytes], base: str) -> tuple[str, list[str]]:
        """A tree: ``base``'s with ``files`` replaced; and the paths whose content changed."""
        tmp = Path(tempfile.mkdtemp(prefix="ktune-writeback-"))
        try:
            env = {"GIT_INDEX_FILE": str(tmp / "index")}
            self.run("read-tree", base, env=env, what="git read-tree (into a temporary index)")
            changed = []
            for i, (path, data) in enumerate(files.items()):
                blob_file = tmp / f"blob{i}"
                blob_file.write_bytes(data)
                sha = self.run("hash-object", "-w", f"--path={path}", "--", str(blob_file),
                               what="git hash-object").strip()
                entry = self.run("ls-files", "-s", "-z", "--", f":(top,literal){path}", env=env,
                                 what="git ls-files").split("\0")[0]
                mode, old = (entry.split()[0], entry.split()[1]) if entry else ("100644", "")
                if mode not in ("100644", "100755"):
                    raise self.error(f"{path} is not a regular file in HEAD (mode {mode})",
                                     hint="ktune writes regular files only")
                if sha != old:
                    changed.append(path)
                self.run("update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}", env=env,
                         what="git update-index (of a temporary index)")
            tree = self.run("write-tree", env=env, what="git write-tree").strip()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return tree, changed

    def commit(self, tree: str, parents: Sequence[str], message: str) -> str:
        env = dict(self._identity_env())
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        tmp = Path(tempfile.mkdtemp(prefix="ktune-writeback-"))
        try:
            msg = tmp / "message"
            msg.write_text(message)
            return self.run(*args, "-F", str(msg), env=env, what="git commit-tree",
                            hint="set user.name and user.email (`git config user.email you@example.com`)").strip()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _identity_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for who in ("AUTHOR", "COMMITTER"):
            for what, var, fallback in (("name", "NAME", _FALLBACK_NAME), ("email", "EMAIL", _FALLBACK_EMAIL)):
                if os.environ.get(f"GIT_{who}_{var}"):
                    continue
                if self.run_status("config", "--get", f"user.{what}")[0] != 0:
                    env[f"GIT_{who}_{var}"] = fallback
        return env

    def set_ref(self, branch: str, new: str, old: str | None, reason: str) -> None:
        """Point ``refs/heads/branch`` at ``new`` only if it is ``old`` now (None: does not exist)."""
        status, _, err = self.run_status("update-ref", "-m", reason, f"refs/heads/{branch}", new, old or "")
        if status != 0:
            raise self.error(f"could not set branch {branch}: {err.strip()}",
                             hint="another process changed it meanwhile; run again")

    def restore_ref(self, branch: str, current: str, old: str | None) -> str:
        """Put the branch back as it was; returns '' or what went wrong."""
        if old is None:
            status, _, err = self.run_status("update-ref", "-d", f"refs/heads/{branch}", current)
        else:
            status, _, err = self.run_status("update-ref", "-m", "ktune: undo", f"refs/heads/{branch}", old,
                                             current)
        return "" if status == 0 else redact(err.strip(), self.secrets)

    def push(self, remote: str, sha: str, branch: str, *, lease: str | None = None, force: bool = False,
             delete: bool = False) -> tuple[bool, str]:
        """Push ``sha`` (or a deletion) to ``refs/heads/branch``; (ok, redacted git output)."""
        args = ["push", "--porcelain"]
        if force or delete:
            args.append(f"--force-with-lease=refs/heads/{branch}:{lease or ''}")
        args += [remote, f":refs/heads/{branch}" if delete else f"{sha}:refs/heads/{branch}"]
        status, out, err = self.run_status(*args, env=_NO_PROMPT, timeout=_NETWORK_TIMEOUT_S)
        lines = [line.rstrip() for line in f"{err}\n{out}".splitlines()]
        text = "\n".join(line for line in lines if line and line != "Done")
        return status == 0, redact(text, self.secrets)


_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"}


def _git_runner(cwd: Path) -> Any:
    try:
        import git
    except ImportError as exc:  # GitPython missing, or no git executable on PATH
        raise WritebackError(f"git cannot be used: {exc}",
                             hint="install git and GitPython (`pip install gitpython`)") from None
    return git.Git(str(cwd))


def _execute(runner: Any, cmd: list[str], env: Mapping[str, str] | None,
             timeout: float | None = None) -> tuple[int, str, str]:
    status, out, err = runner.execute(cmd, with_extended_output=True, with_exceptions=False, env=env,
                                      strip_newline_in_stdout=False, kill_after_timeout=timeout)
    return int(status), str(out), str(err)


def _message(change: Change, branch: str) -> str:
    from . import __version__

    body = change.body_markdown.strip("\n")
    parts = [change.title.strip(), body, f"{TRAILER} {__version__} ({branch})"]
    return "\n\n".join(p for p in parts if p) + "\n"


@dataclass(frozen=True)
class _Prepared:
    repo: _Repo
    branch: str
    base: str
    head: str
    files: dict[str, bytes]


def _prepare(repo_root: Path, change: Change, branch: str | None, date: _dt.date | None, *,
             secrets: Sequence[str] = (), repo: _Repo | None = None) -> _Prepared:
    """The checks every git mode makes before creating anything."""
    _check_paths(change, str(repo_root))
    repo = repo or _Repo.open(repo_root, secrets)
    base = repo.current_branch()
    head = repo.head()
    files = repo.full_paths(change)
    repo.refuse_dirty(list(files))
    name = branch or branch_name(change, date)
    repo.check_branch_name(name)
    if name == base:
        raise repo.error(f"HEAD is on {name}, the branch ktune would write to",
                         hint="check out the branch the results belong on (e.g. `git switch main`)")
    return _Prepared(repo=repo, branch=name, base=base, head=head, files=files)


# -- mode "patch" --------------------------------------------------------------------------------------


def write_patch(repo_root: Path, change: Change, out_dir: Path, *, date: _dt.date | None = None) -> Path:
    """Save a unified diff of ``change`` against HEAD, which ``git apply`` takes at the repository's top level.

    The diff is made by git from a tree built in the object database; the file
    is named after the branch that ``commit`` mode would create. Returns its path.
    """
    _check_paths(change, str(repo_root))
    repo = _Repo.open(repo_root)
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
        _atomic_write(out, diff.encode())
    except OSError as exc:
        raise WritebackError(f"cannot write the patch: {exc.strerror}", where=str(out),
                             hint="check the folder's permissions and free space") from None
    return out


# -- mode "commit" -------------------------------------------------------------------------------------


def commit_branch(repo_root: Path, change: Change, *, branch: str | None = None,
                  date: _dt.date | None = None) -> tuple[str, str]:
    """Create ``branch`` (default :func:`branch_name`) from HEAD with one commit holding ``change``.

    Refuses, before creating anything, outside git, on a detached HEAD, when a
    file of ``change`` has uncommitted changes, and when the branch exists.
    Returns the branch's name and the commit's hash.
    """
    p = _prepare(repo_root, change, branch, date)
    repo = p.repo
    if repo.rev(f"refs/heads/{p.branch}") is not None:
        raise repo.error(f"the branch {p.branch} already exists",
                         hint=f"look at it, merge or delete it (`git branch -D {p.branch}`), then run again")
    tree, changed = repo.build_tree(p.files, p.head)
    if not changed:
        raise repo.error("nothing to commit: HEAD already holds these texts", cls=NothingToWrite)
    sha = repo.commit(tree, [p.head], _message(change, p.branch))
    repo.set_ref(p.branch, sha, None, f"ktune: {change.title}")
    return p.branch, sha


# -- mode "pr" -----------------------------------------------------------------------------------------

_REPO_URL = re.compile(
    r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*://(?:[^/@]+@)?[^/:]+(?::\d+)?/|[^/@:]+@[^/:]+:|[^/@:]+:(?!//))"
    r"(?P<path>[^?#]+?)(?:\.git)?/?$")


def parse_repository(url: str) -> str | None:
    """``owner/name`` from a remote URL in https, ssh or scp-like form; None for anything else."""
    m = _REPO_URL.match(url.strip())
    if not m:
        return None
    parts = [p for p in m["path"].split("/") if p]
    if len(parts) < 2:
        return None
    return f"{parts[-2]}/{parts[-1]}"


class _GitHub:
    """The few pull-request endpoints of GitHub's REST API, over urllib."""

    def __init__(self, api_url: str, token: str, repository: str) -> None:
        self.base = api_url.rstrip("/")
        self.token = token
        self.owner, _, self.name = repository.partition("/")

    def _call(self, method: str, path: str, payload: Mapping[str, Any] | None = None,
              query: Mapping[str, str] | None = None) -> Any:
        from . import __version__

        url = f"{self.base}/repos/{urllib.parse.quote(self.owner)}/{urllib.parse.quote(self.name)}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self.token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"pytest-ktune/{__version__}",
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        where = redact(f"{method} {url}", (self.token,))
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, where) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise WritebackError(redact(f"cannot reach the GitHub API: {reason}", (self.token,)), where=where,
                                 hint="check GITHUB_API_URL and the network") from None
        try:
            return json.loads(body) if body else None
        except ValueError:
            raise WritebackError("the GitHub API answered with something that is not JSON", where=where,
                                 hint="check GITHUB_API_URL") from None

    def _http_error(self, exc: urllib.error.HTTPError, where: str) -> WritebackError:
        try:
            raw = exc.read()
            detail = json.loads(raw) if raw else {}
        except (ValueError, OSError):
            detail = {}
        message = str(detail.get("message") or exc.reason) if isinstance(detail, dict) else str(exc.reason)
        errors = detail.get("errors") if isinstance(detail, dict) else None
        if isinstance(errors, list):
            extra = [str(e.get("message") or e.get("code") or e) if isinstance(e, dict) else str(e) for e in errors]
            message = f"{message} ({'; '.join(extra)})" if extra else message
        status = exc.code
        hints = {
            401: "the token was refused: check the secret that GITHUB_TOKEN comes from",
            403: "give the job `permissions: contents: write, pull-requests: write` and allow GitHub Actions to "
                 "create pull requests (the repository's Actions settings), or use a token that may open pull "
                 "requests on this repository",
            404: "check the repository's name (GITHUB_REPOSITORY, or the remote's URL) and that the token can "
                 "see it",
            422: "GitHub refused the request as it stands; see its message",
        }
        hint = hints.get(status, "GitHub failed; run again later" if status >= 500 else "")
        return WritebackError(redact(f"GitHub answered {status}: {message}", (self.token,)), where=where,
                              hint=hint)

    def find_open(self, branch: str) -> dict[str, Any] | None:
        pulls = self._call("GET", "/pulls", query={"head": f"{self.owner}:{branch}", "state": "open"})
        if isinstance(pulls, list):
            for pr in pulls:
                if isinstance(pr, dict) and isinstance(pr.get("number"), int):
                    return pr
        return None

    def create(self, branch: str, base: str, title: str, body: str) -> dict[str, Any]:
        pr = self._call("POST", "/pulls", {"title": title, "head": branch, "base": base, "body": body})
        return pr if isinstance(pr, dict) else {}

    def update(self, number: int, title: str, body: str) -> dict[str, Any]:
        pr = self._call("PATCH", f"/pulls/{number}", {"title": title, "body": body})
        return pr if isinstance(pr, dict) else {}


def open_pr(repo_root: Path, change: Change, *, remote: str = "origin", api_url: str | None = None,
            token: str | None = None, repository: str | None = None, branch: str | None = None,
            date: _dt.date | None = None) -> PullRequest:
    """Commit ``change`` on the ktune branch, push it to ``remote`` and open (or update) its pull request.

    ``token`` defaults to ``GITHUB_TOKEN``; ``repository`` (``owner/name``) to
    ``GITHUB_REPOSITORY``, else the remote's URL; ``api_url`` to
    ``GITHUB_API_URL``, else https://api.github.com. The push uses git's own
    credentials for the remote (actions/checkout leaves the job's token there);
    the token authenticates the REST calls. See the module's docstring for how
    an existing ktune branch is updated. On failure, the local branch and the
    remote's are put back as they were; a message says so where that failed.
    """
    token = token if token is not None else os.environ.get("GITHUB_TOKEN", "")
    if not token:
        raise WritebackError("no GitHub token, so ktune cannot open a pull request", where=str(repo_root),
                             hint="set GITHUB_TOKEN (in a workflow: `env: GITHUB_TOKEN: "
                                  "${{ secrets.GITHUB_TOKEN }}`), or use --ktune-write=commit")
    secrets = (token,)
    _check_paths(change, str(repo_root))
    repo = _Repo.open(repo_root, secrets)
    url = repo.remote_url(remote)
    slug = repository or os.environ.get("GITHUB_REPOSITORY") or parse_repository(url)
    if not slug or not re.fullmatch(r"[\w.-]+/[\w.-]+", slug):
        said = f"{slug!r}" if slug else f"{remote}'s URL {url}"
        raise repo.error(f"cannot tell the GitHub repository from {said}", hint="set GITHUB_REPOSITORY=owner/name")
    p = _prepare(repo_root, change, branch, date, secrets=secrets, repo=repo)
    base = repo.upstream_branch(p.base, remote)
    github = _GitHub(api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL, token, slug)

    existing = github.find_open(p.branch)  # a bad token or repository stops here, before anything is made
    tree, changed = repo.build_tree(p.files, p.head)
    if not changed:
        raise repo.error("nothing to propose: HEAD already holds these texts", cls=NothingToWrite)
    remote_tip = repo.remote_tip(remote, p.branch)
    local_tip = repo.rev(f"refs/heads/{p.branch}")
    if remote_tip is not None and not repo.has_commit(remote_tip):
        repo.fetch(remote, p.branch)
    tip = remote_tip or local_tip
    if tip is not None and not repo.is_ktune_commit(tip):
        where = f"{remote}'s branch" if tip == remote_tip else "the local branch"
        raise repo.error(f"{where} {p.branch} holds a commit that ktune did not make ({tip[:12]})",
                         hint="keep that work: rename or merge it, or pass another branch name")
    if local_tip is not None and remote_tip is not None and local_tip != remote_tip \
            and not repo.is_ancestor(local_tip, remote_tip):
        raise repo.error(f"the local branch {p.branch} has commits that {remote}'s does not",
                         hint=f"push or delete the local branch (`git branch -D {p.branch}`), then run again")

    if tip is not None and repo.tree_of(tip) == tree:
        sha = tip  # the branch holds these texts already; the push is a no-op, the pull request is refreshed
    else:
        parents = [tip] if tip is not None else []
        if tip is None or not repo.is_ancestor(p.head, tip):
            parents.append(p.head)
        sha = repo.commit(tree, parents, _message(change, p.branch))

    moved_local = local_tip != sha
    if moved_local:
        repo.set_ref(p.branch, sha, local_tip, f"ktune: {change.title}")
    try:
        pushed = remote_tip != sha
        if pushed:
            ok, out = repo.push(remote, sha, p.branch)
            if not ok:
                pushed = False
                raise repo.error(f"{remote} rejected the push of {p.branch}: {out or 'no reason given'}",
                                 hint=f"check that this job may push branches to {remote} (contents: write) "
                                      "and that no rule protects ktune/* branches")
        try:
            if existing is not None:
                pr = github.update(int(existing["number"]), change.title, change.body_markdown)
            else:
                pr = github.create(p.branch, base, change.title, change.body_markdown)
        except BaseException as exc:
            if not pushed:
                raise
            undo = _undo_push(repo, remote, p.branch, sha, remote_tip)
            if not isinstance(exc, WritebackError):
                raise
            if undo:
                raise repo.error(f"{exc.message}. The push of {p.branch} to {remote} could not be undone: {undo}",
                                 hint=f"{exc.hint}; then put {remote}'s branch back by hand (`git push {remote} "
                                      f"--delete {p.branch}` if it is new)") from None
            raise repo.error(f"{exc.message}; {remote}'s {p.branch} was put back as it was",
                             hint=exc.hint) from None
    except BaseException as exc:
        undo = repo.restore_ref(p.branch, sha, local_tip) if moved_local else ""
        if undo and isinstance(exc, WritebackError):
            raise repo.error(f"{exc.message}; and the local branch {p.branch} could not be put back: {undo}",
                             hint=f"{exc.hint}; then delete or reset the branch by hand") from None
        raise
    number = pr.get("number")
    return PullRequest(number=number if isinstance(number, int) else 0, url=str(pr.get("html_url") or ""),
                       branch=p.branch, sha=sha, created=existing is None)


def _undo_push(repo: _Repo, remote: str, branch: str, pushed: str, before: str | None) -> str:
    """Put the remote's branch back; returns '' or what went wrong."""
    if before is None:
        ok, out = repo.push(remote, "", branch, lease=pushed, delete=True)
    else:
        ok, out = repo.push(remote, before, branch, lease=pushed, force=True)
    return "" if ok else (out or "no reason given")
