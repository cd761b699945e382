"""Mode ``pr``: push the ktune branch and open or update its pull request; undo everything on failure.

GitHub is a local HTTP server (see _kit.FakeGitHub) and the remote a bare
repository. After every run the user's repository, the remote's refs and the
pull requests are checked, and the token must appear in no message or output.
"""

from __future__ import annotations

import datetime as dt
import traceback
from pathlib import Path

import pytest

from pytest_ktune.writeback.change import NothingToWrite, PullRequest, WritebackError
from pytest_ktune.writeback.github import open_pr

from ._kit import (
    BODY,
    NEW_KERNEL,
    NEW_PARAMS,
    NEWER_PARAMS,
    OLD_PARAMS,
    REPOSITORY,
    TOKEN,
    FakeGitHub,
    State,
    assert_untouched,
    change,
    git,
    refs,
)

DAY = dt.date(2026, 11, 30)
BRANCH = "ktune/rmsnorm-nvidia-h200-cuda-20261130"
HEAD_REF = f"refs/heads/{BRANCH}"


def _open(repo: Path, github: FakeGitHub, params: str = NEW_PARAMS, **kwargs: object) -> PullRequest:
    options: dict[str, object] = {"api_url": github.url, "token": TOKEN, "repository": REPOSITORY, "date": DAY}
    options.update(kwargs)
    return open_pr(repo, change(params), **options)  # type: ignore[arg-type]


def _no_token_in(capfd: pytest.CaptureFixture[str], *texts: str) -> None:
    out, err = capfd.readouterr()
    for text in (out, err, *texts):
        assert TOKEN not in text


def _failed(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + str(exc.args)


def test_opens_a_pull_request(repo: Path, remote: Path, github: FakeGitHub,
                              capfd: pytest.CaptureFixture[str]) -> None:
    before = State.of(repo)

    pr = _open(repo, github)

    assert pr.created and pr.number == 1 and pr.branch == BRANCH
    assert pr.url.endswith("/acme/kernels/pull/1")
    assert github.methods() == ["GET", "POST"]
    _, path, payload = github.requests[1]
    assert path == "/repos/acme/kernels/pulls"
    assert payload == {"title": "ktune: tune rmsnorm on NVIDIA H200", "head": BRANCH, "base": "main", "body": BODY}
    assert "head=acme%3Aktune%2Frmsnorm-nvidia-h200-cuda-20261130" in github.requests[0][1]
    assert "state=open" in github.requests[0][1]
    after = State.of(repo)
    assert_untouched(before, after)
    assert after.refs[HEAD_REF] == pr.sha
    assert refs(remote)[HEAD_REF] == pr.sha
    assert refs(remote)["refs/heads/main"] == before.head
    assert git(remote, "show", f"{pr.sha}:ktune-params.json") == NEW_PARAMS
    assert git(repo, "rev-parse", f"{pr.sha}^@").split() == [before.head]
    _no_token_in(capfd, repr(pr))


def test_token_and_repository_from_the_environment(repo: Path, remote: Path, github: FakeGitHub,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_REPOSITORY", REPOSITORY)
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    pr = open_pr(repo, change(), date=DAY)
    assert pr.created and refs(remote)[HEAD_REF] == pr.sha


def test_a_rerun_updates_the_open_pull_request(repo: Path, remote: Path, github: FakeGitHub) -> None:
    first = _open(repo, github)
    before = State.of(repo)

    second = _open(repo, github, NEWER_PARAMS)

    assert not second.created and second.number == first.number
    assert github.methods() == ["GET", "POST", "GET", "PATCH"]
    assert github.requests[-1][1] == "/repos/acme/kernels/pulls/1"
    assert len(github.pulls) == 1
    # on top of the first commit; HEAD is already in the branch, so one parent: a fast-forward push
    assert git(repo, "rev-parse", f"{second.sha}^@").split() == [first.sha]
    assert refs(remote)[HEAD_REF] == second.sha == refs(repo)[HEAD_REF]
    assert git(repo, "show", f"{second.sha}:ktune-params.json") == NEWER_PARAMS
    assert_untouched(before, State.of(repo))


def test_a_rerun_after_main_moved_merges_it_in(repo: Path, remote: Path, github: FakeGitHub) -> None:
    first = _open(repo, github)
    (repo / "README").write_text("more\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "more")
    git(repo, "push", "-q", "origin", "main")
    head = git(repo, "rev-parse", "HEAD").strip()

    second = _open(repo, github, NEWER_PARAMS)

    assert git(repo, "rev-parse", f"{second.sha}^@").split() == [first.sha, head]
    # the pull request's diff against main is this run's change alone
    assert git(repo, "diff", "--name-only", head, second.sha).split() == ["ktune-params.json"]
    assert git(remote, "merge-base", "--is-ancestor", first.sha, second.sha, check=False) == ""


def test_a_rerun_from_a_fresh_clone_builds_on_the_remote_branch(repo: Path, remote: Path, github: FakeGitHub,
                                                                 tmp_path: Path) -> None:
    first = _open(repo, github)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    git(clone, "config", "user.name", "ci")
    git(clone, "config", "user.email", "ci@example.invalid")
    before = State.of(clone)

    second = _open(clone, github, NEWER_PARAMS)

    assert git(clone, "rev-parse", f"{second.sha}^@").split() == [first.sha]
    assert refs(remote)[HEAD_REF] == second.sha
    after = State.of(clone)
    assert_untouched(before, after)
    assert "refs/remotes/origin/main" in after.refs  # fetching the branch left the other refs alone


def test_a_rerun_fetches_what_another_clone_pushed(repo: Path, remote: Path, github: FakeGitHub,
                                                   tmp_path: Path) -> None:
    first = _open(repo, github)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    second = _open(clone, github, NEWER_PARAMS)
    assert git(repo, "cat-file", "-t", second.sha, check=False) == ""  # not here yet
    before = State.of(repo)

    third = _open(repo, github, NEW_PARAMS)

    assert git(repo, "rev-parse", f"{third.sha}^@").split() == [second.sha]
    assert git(repo, "merge-base", "--is-ancestor", first.sha, third.sha, check=False) == ""
    after = State.of(repo)
    assert_untouched(before, after)
    assert after.refs[HEAD_REF] == third.sha == refs(remote)[HEAD_REF]
    # the fetch updated no ref; the push, as any push does, the branch's remote-tracking ref
    assert {r for r in after.refs if after.refs[r] != before.refs.get(r)} == \
        {HEAD_REF, f"refs/remotes/origin/{BRANCH}"}


def test_a_local_branch_ahead_of_the_remote_one_is_refused(repo: Path, remote: Path, github: FakeGitHub) -> None:
    _open(repo, github)
    message = "local\n\nGenerated-by: pytest-ktune"
    local = git(repo, "commit-tree", "-p", HEAD_REF, "-m", message, f"{HEAD_REF}^{{tree}}")
    git(repo, "update-ref", HEAD_REF, local.strip())
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError, match="has commits that origin's does not"):
        _open(repo, github, NEWER_PARAMS)
    _nothing_made(repo, remote, before, remote_before)


def test_the_same_texts_again_only_refresh_the_pull_request(repo: Path, remote: Path, github: FakeGitHub) -> None:
    first = _open(repo, github)
    again = _open(repo, github)
    assert again.sha == first.sha and not again.created
    assert github.methods() == ["GET", "POST", "GET", "PATCH"]


def test_unchanged_texts_open_nothing(repo: Path, remote: Path, github: FakeGitHub) -> None:
    before = State.of(repo)
    with pytest.raises(NothingToWrite):
        _open(repo, github, OLD_PARAMS)
    assert State.of(repo).refs == before.refs
    assert "POST" not in github.methods()


# -- refusals before anything is made ------------------------------------------------------------------


def _nothing_made(repo: Path, remote: Path, before: State, remote_before: dict[str, str]) -> None:
    after = State.of(repo)
    assert_untouched(before, after)
    assert after.refs == before.refs
    assert refs(remote) == remote_before


def test_no_token_is_refused_before_anything(repo: Path, remote: Path, github: FakeGitHub) -> None:
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError, match="no GitHub token") as info:
        _open(repo, github, token=None)
    assert "GITHUB_TOKEN" in info.value.hint
    assert github.requests == []
    _nothing_made(repo, remote, before, remote_before)


def test_a_dirty_params_file_is_refused_before_any_request(repo: Path, remote: Path, github: FakeGitHub) -> None:
    (repo / "ktune-params.json").write_text(OLD_PARAMS + " ")
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError, match="has changes that HEAD does not hold"):
        _open(repo, github)
    assert github.requests == []
    _nothing_made(repo, remote, before, remote_before)


def test_a_detached_head_is_refused(repo: Path, remote: Path, github: FakeGitHub) -> None:
    git(repo, "checkout", "-q", "--detach")
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError, match="HEAD is detached"):
        _open(repo, github)
    _nothing_made(repo, remote, before, remote_before)


def test_an_unknown_remote_is_refused(repo: Path, remote: Path, github: FakeGitHub) -> None:
    with pytest.raises(WritebackError, match="no remote 'upstream'"):
        _open(repo, github, remote="upstream")


def test_a_repository_that_cannot_be_named_is_refused(repo: Path, remote: Path, github: FakeGitHub) -> None:
    with pytest.raises(WritebackError, match="cannot tell the GitHub repository") as info:
        _open(repo, github, repository=None)  # the remote is a local path
    assert "GITHUB_REPOSITORY" in info.value.hint


@pytest.mark.parametrize("answer", [
    (401, "Bad credentials", "secret"),
    (403, "Resource not accessible by integration", "pull-requests: write"),
    (404, "Not Found", "repository's name"),
    (500, "Server Error", "run again later"),
], ids=lambda a: str(a[0]))
def test_api_errors_stop_before_anything_is_made(repo: Path, remote: Path, github: FakeGitHub,
                                                 capfd: pytest.CaptureFixture[str],
                                                 answer: tuple[int, str, str]) -> None:
    status, message, hint = answer
    github.fail["GET"] = (status, {"message": message, "documentation_url": "https://docs.github.com"})
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError) as info:
        _open(repo, github)
    assert f"GitHub answered {status}: {message}" in str(info.value)
    assert hint in info.value.hint
    _nothing_made(repo, remote, before, remote_before)
    _no_token_in(capfd, _failed(info.value))


def test_a_wrong_token_is_a_401(repo: Path, remote: Path, github: FakeGitHub,
                                capfd: pytest.CaptureFixture[str]) -> None:
    wrong = TOKEN[::-1]
    with pytest.raises(WritebackError, match="GitHub answered 401: Bad credentials") as info:
        _open(repo, github, token=wrong)
    _no_token_in(capfd, _failed(info.value))
    assert wrong not in _failed(info.value)


def test_an_unreachable_api(repo: Path, remote: Path, github: FakeGitHub) -> None:
    url = github.url
    github.stop()
    with pytest.raises(WritebackError, match="cannot reach the GitHub API"):
        _open(repo, github, api_url=url)
    assert "refs/heads/" + BRANCH not in refs(repo)


def test_a_remote_branch_ktune_did_not_make_is_not_built_on(repo: Path, remote: Path, github: FakeGitHub) -> None:
    git(repo, "checkout", "-q", "-b", "someone")
    (repo / "theirs.txt").write_text("work\n")
    git(repo, "add", "theirs.txt")
    git(repo, "commit", "-q", "-m", "their work")
    git(repo, "push", "-q", "origin", f"someone:{HEAD_REF}")
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "someone")
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError, match="holds a commit that ktune did not make"):
        _open(repo, github)
    _nothing_made(repo, remote, before, remote_before)


# -- failures after the branch was made: everything is put back -----------------------------------------


def test_a_rejected_push_removes_the_local_branch(repo: Path, remote: Path, github: FakeGitHub,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'ktune/* branches are protected here' >&2\nexit 1\n")
    hook.chmod(0o755)
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError, match="origin rejected the push") as info:
        _open(repo, github)
    assert "protected here" in str(info.value)
    assert "contents: write" in info.value.hint
    assert github.methods() == ["GET"]
    _nothing_made(repo, remote, before, remote_before)
    _no_token_in(capfd, _failed(info.value))


@pytest.mark.parametrize("status", [422, 502])
def test_a_refused_pull_request_removes_both_branches(repo: Path, remote: Path, github: FakeGitHub,
                                                      capfd: pytest.CaptureFixture[str], status: int) -> None:
    github.fail["POST"] = (status, {"message": "Validation Failed",
                                    "errors": [{"resource": "PullRequest", "code": "custom",
                                                "message": "No commits between main and " + BRANCH}]})
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError) as info:
        _open(repo, github)
    text = str(info.value)
    assert f"GitHub answered {status}: Validation Failed (No commits between main and {BRANCH})" in text
    assert f"origin's {BRANCH} was put back as it was" in text
    _nothing_made(repo, remote, before, remote_before)
    _no_token_in(capfd, _failed(info.value))


def test_a_failed_update_puts_the_previous_tip_back(repo: Path, remote: Path, github: FakeGitHub) -> None:
    first = _open(repo, github)
    github.fail["PATCH"] = (500, {"message": "Server Error"})
    before, remote_before = State.of(repo), refs(remote)
    with pytest.raises(WritebackError, match="GitHub answered 500: Server Error"):
        _open(repo, github, NEWER_PARAMS)
    _nothing_made(repo, remote, before, remote_before)
    assert refs(remote)[HEAD_REF] == first.sha == refs(repo)[HEAD_REF]
    assert github.pulls[0]["body"] == BODY


def test_a_token_in_the_remote_url_never_shows(repo: Path, remote: Path, github: FakeGitHub,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    # A remote that names the token in its URL, on a port where nothing listens.
    git(repo, "remote", "set-url", "origin", f"http://x-access-token:{TOKEN}@127.0.0.1:9/acme/kernels.git")
    before = State.of(repo)
    with pytest.raises(WritebackError) as info:
        _open(repo, github, repository=None)  # acme/kernels is read from the URL
    assert github.requests and github.requests[0][1].startswith("/repos/acme/kernels/pulls")
    assert "x-access-token" not in str(info.value)
    assert_untouched(before, State.of(repo))
    assert State.of(repo).refs == before.refs
    _no_token_in(capfd, _failed(info.value))


def test_a_second_file_goes_into_the_same_commit(repo: Path, remote: Path, github: FakeGitHub) -> None:
    c = change(**{"kernels/scale.cl": NEW_KERNEL})
    pr = open_pr(repo, c, api_url=github.url, token=TOKEN, repository=REPOSITORY, date=DAY)
    assert git(remote, "diff", "--name-only", "main", pr.sha).split() == ["kernels/scale.cl", "ktune-params.json"]
