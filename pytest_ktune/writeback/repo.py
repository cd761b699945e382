"""git plumbing for the write-back: objects, trees, commits and refs, never the user's index or working tree."""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_ktune.core import git
from pytest_ktune.writeback.change import TRAILER, Change, WritebackError, branch_name, check_paths, redact

_FALLBACK_NAME = "pytest-ktune"


_FALLBACK_EMAIL = "pytest-ktune@users.noreply.github.com"


_NETWORK_TIMEOUT_S = 300.0


class Repo:
    """git plumbing through GitPython's command runner, with the token kept out of every message."""

    def __init__(self, top: Path, prefix: str, secrets: Sequence[str]) -> None:
        self.top = top
        self.prefix = prefix
        self.secrets = tuple(secrets)

    @classmethod
    def open(cls, root: Path, secrets: Sequence[str] = ()) -> Repo:
        root = Path(root)
        if not root.is_dir():
            raise WritebackError("the folder does not exist", where=str(root),
                                 hint="run from the project root, inside a clone of the repository")
        status, out, err = _execute(root, ["rev-parse", "--show-toplevel", "--show-prefix"], None)
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
        return _execute(self.top, args, env, timeout)

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


def _execute(cwd: Path, args: Sequence[str], env: Mapping[str, str] | None,
             timeout: float | None = None) -> tuple[int, str, str]:
    try:
        return git.execute(cwd, args, env=env, timeout=timeout)
    except git.GitUnavailable as exc:
        raise WritebackError(exc.message, hint=exc.hint) from None


@dataclass(frozen=True)
class Prepared:
    repo: Repo
    branch: str
    base: str
    head: str
    files: dict[str, bytes]


def prepare(repo_root: Path, change: Change, branch: str | None, date: _dt.date | None, *,
             secrets: Sequence[str] = (), repo: Repo | None = None) -> Prepared:
    """The checks every git mode makes before creating anything."""
    check_paths(change, str(repo_root))
    repo = repo or Repo.open(repo_root, secrets)
    base = repo.current_branch()
    head = repo.head()
    files = repo.full_paths(change)
    repo.refuse_dirty(list(files))
    name = branch or branch_name(change, date)
    repo.check_branch_name(name)
    if name == base:
        raise repo.error(f"HEAD is on {name}, the branch ktune would write to",
                         hint="check out the branch the results belong on (e.g. `git switch main`)")
    return Prepared(repo=repo, branch=name, base=base, head=head, files=files)
