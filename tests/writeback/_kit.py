"""Throwaway git repositories, a bare remote, and a small fake of GitHub's pull-request API.

Every test of writing back builds a real repository in its own temporary
folder, takes a :class:`State` of it before and after, and checks that only the
ktune branch (and its remote-tracking ref) changed.
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pytest_ktune.writeback.change import Change

TOKEN = "ghp_TESTtoken0123456789abcdefSECRET"
REPOSITORY = "acme/kernels"

OLD_PARAMS = '{\n  "format": "pytest-ktune/1",\n  "records": []\n}\n'
NEW_PARAMS = '{\n  "format": "pytest-ktune/1",\n  "records": [\n    {"params": {"BLOCK": 128}}\n  ]\n}\n'
NEWER_PARAMS = '{\n  "format": "pytest-ktune/1",\n  "records": [\n    {"params": {"BLOCK": 512}}\n  ]\n}\n'
KERNEL = "__kernel void scale(__global float* out) { out[0] = 1.0f; }\n"
NEW_KERNEL = "__kernel void scale(__global float* out) { out[0] = 2.0f; }\n"

BODY = "| key | before µs | after µs |\n| --- | --- | --- |\n| T64-H4096 | 12.50 | 9.75 |\n"


def change(params: str = NEW_PARAMS, **extra: str) -> Change:
    return Change(files={"ktune-params.json": params, **extra}, title="ktune: tune rmsnorm on NVIDIA H200",
                  body_markdown=BODY, targets=("kernels/rmsnorm.py::rmsnorm",), device="NVIDIA H200 [cuda]")


def git(cwd: Path, *args: str, check: bool = True) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {out.stderr}")
    return out.stdout


def make_repo(path: Path, *, files: dict[str, str] | None = None) -> Path:
    """A repository on ``main`` with one commit holding ``files`` (default: a params file and a kernel;
    ``{}``: no commit at all)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "ktune tests")
    git(path, "config", "user.email", "ktune-tests@example.invalid")
    git(path, "config", "commit.gpgsign", "false")
    for rel, text in (files if files is not None else {"ktune-params.json": OLD_PARAMS,
                                                       "kernels/scale.cl": KERNEL}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    if files != {}:
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", "initial")
    return path


def make_remote(path: Path, repo: Path, name: str = "origin") -> Path:
    """A bare repository holding ``repo``'s main, added to ``repo`` as ``name``."""
    git(path.parent, "init", "-q", "--bare", "-b", "main", str(path))
    git(repo, "remote", "add", name, str(path))
    git(repo, "push", "-q", name, "main")
    git(repo, "branch", "-q", "--set-upstream-to", f"{name}/main")
    return path


def refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


@dataclass(frozen=True)
class State:
    """What the user sees of a repository: HEAD, the index, the working tree and the refs."""

    head: str
    head_ref: str
    staged: str
    status: str
    index: bytes
    files: dict[str, bytes]
    refs: dict[str, str]

    @classmethod
    def of(cls, repo: Path) -> State:
        files = {p.relative_to(repo).as_posix(): p.read_bytes() for p in sorted(repo.rglob("*"))
                 if p.is_file() and ".git" not in p.relative_to(repo).parts}
        index = repo / ".git" / "index"
        return cls(head=git(repo, "rev-parse", "HEAD", check=False).strip(),
                   head_ref=git(repo, "symbolic-ref", "-q", "HEAD", check=False).strip(),
                   staged=git(repo, "diff", "--cached"),
                   status=git(repo, "-c", "core.fsmonitor=false", "--no-optional-locks", "status", "--porcelain"),
                   index=index.read_bytes() if index.exists() else b"", files=files, refs=refs(repo))

    def without_ktune_refs(self) -> State:
        kept = {r: s for r, s in self.refs.items() if not r.startswith(("refs/heads/ktune/", "refs/remotes/"))}
        remotes = {r: s for r, s in self.refs.items()
                   if r.startswith("refs/remotes/") and "/ktune/" not in r}
        return State(self.head, self.head_ref, self.staged, self.status, self.index, self.files,
                     {**kept, **remotes})


def assert_untouched(before: State, after: State) -> None:
    """HEAD, the index, the working tree and every ref but the ktune branches are as they were."""
    assert after.head == before.head
    assert after.head_ref == before.head_ref
    assert after.staged == before.staged
    assert after.status == before.status
    assert after.index == before.index
    assert after.files == before.files
    assert after.without_ktune_refs().refs == before.without_ktune_refs().refs


# -- a fake GitHub -------------------------------------------------------------------------------------


@dataclass
class FakeGitHub:
    """The three pull-request endpoints ktune uses; ``fail[method] = (status, body)`` makes one fail."""

    token: str = TOKEN
    repository: str = REPOSITORY
    pulls: list[dict[str, Any]] = field(default_factory=list)
    fail: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def methods(self) -> list[str]:
        return [m for m, _, _ in self.requests]

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((method, self.path, payload))
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._reply(401, {"message": "Bad credentials"})
                    return
                if method in fake.fail:
                    status, body = fake.fail[method]
                    self._reply(status, body)
                    return
                prefix = f"/repos/{fake.repository}/pulls"
                path, _, query = self.path.partition("?")
                if not path.startswith(prefix):
                    self._reply(404, {"message": "Not Found"})
                    return
                if method == "GET" and path == prefix:
                    from urllib.parse import parse_qs

                    q = parse_qs(query)
                    owner = fake.repository.split("/")[0]
                    head = q.get("head", [""])[0]
                    found = [p for p in fake.pulls if f"{owner}:{p['head']['ref']}" == head and p["state"] == "open"]
                    self._reply(200, found)
                elif method == "POST" and path == prefix:
                    assert payload is not None
                    number = len(fake.pulls) + 1
                    pr = {"number": number, "state": "open", "title": payload["title"], "body": payload["body"],
                          "head": {"ref": payload["head"]}, "base": {"ref": payload["base"]},
                          "html_url": f"https://github.example/{fake.repository}/pull/{number}"}
                    fake.pulls.append(pr)
                    self._reply(201, pr)
                elif method == "PATCH" and path.startswith(prefix + "/"):
                    assert payload is not None
                    number = int(path.rsplit("/", 1)[1])
                    pr = next(p for p in fake.pulls if p["number"] == number)
                    pr.update(title=payload["title"], body=payload["body"])
                    self._reply(200, pr)
                else:
                    self._reply(404, {"message": "Not Found"})

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
