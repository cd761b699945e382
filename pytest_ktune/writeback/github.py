"""Mode `pr`: the ktune branch pushed, and its pull request opened or updated through GitHub's REST API."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ktune.core.version import __version__
from pytest_ktune.writeback.change import (
    Change,
    NothingToWrite,
    PullRequest,
    WritebackError,
    check_paths,
    commit_message,
    redact,
)
from pytest_ktune.writeback.repo import Repo, prepare

DEFAULT_API_URL = "https://api.github.com"


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
    check_paths(change, str(repo_root))
    repo = Repo.open(repo_root, secrets)
    url = repo.remote_url(remote)
    slug = repository or os.environ.get("GITHUB_REPOSITORY") or parse_repository(url)
    if not slug or not re.fullmatch(r"[\w.-]+/[\w.-]+", slug):
        said = f"{slug!r}" if slug else f"{remote}'s URL {url}"
        raise repo.error(f"cannot tell the GitHub repository from {said}", hint="set GITHUB_REPOSITORY=owner/name")
    p = prepare(repo_root, change, branch, date, secrets=secrets, repo=repo)
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
        sha = repo.commit(tree, parents, commit_message(change, p.branch))

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


def _undo_push(repo: Repo, remote: str, branch: str, pushed: str, before: str | None) -> str:
    """Put the remote's branch back; returns '' or what went wrong."""
    if before is None:
        ok, out = repo.push(remote, "", branch, lease=pushed, delete=True)
    else:
        ok, out = repo.push(remote, before, branch, lease=pushed, force=True)
    return "" if ok else (out or "no reason given")
