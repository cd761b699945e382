"""An OpenAI-compatible chat endpoint on 127.0.0.1 that replays scripted conversations.

For tests and offline benchmarks of the agent loop: the real ``openai`` client talks to it over HTTP,
so retries, timeouts, tool-call parsing and usage accounting run exactly as against a hosted model.
No network beyond the loopback interface is used.

A scenario is a list of :class:`Canned` answers, replayed in order to the requests whose ``model``
field names the scenario::

    script = {"good": [Canned(completion(tool_calls=[tool_call("analyze", {})])),
                       Canned(completion(content="done"))]}
    with StubServer(script) as server:   # server.base_url -> http://127.0.0.1:PORT/v1
        ...

A canned answer may be an HTTP error (``status=429`` with ``headers={"Retry-After": "0"}``, 500),
slow (``delay_s``), or check what the client sent (``expect``: a function of the request's JSON that
returns a complaint, or '' when satisfied). Complaints, and requests past the end of a script, are
collected in ``server.problems`` for the test to assert empty.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


def tool_call(name: str, arguments: Mapping[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """One tool call of a canned answer; ``arguments`` as an object, or as raw text (to send bad JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": raw}}


def completion(*, content: str | None = None, tool_calls: Sequence[Mapping[str, Any]] = (),
               refusal: str | None = None, usage: tuple[int, int] | None = (120, 40),
               model: str = "stub") -> dict[str, Any]:
    """A ``chat.completion`` body with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = [dict(c) for c in tool_calls]
    body: dict[str, Any] = {
        "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if tool_calls else "stop"}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


@dataclass(frozen=True)
class Canned:
    """One scripted answer."""

    body: Mapping[str, Any] | None = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    expect: Callable[[Mapping[str, Any]], str] | None = None

    @classmethod
    def error(cls, status: int, message: str, **kw: Any) -> Canned:
        return cls(body={"error": {"message": message, "type": "stub_error", "code": status}}, status=status, **kw)


@dataclass
class Exchange:
    """A request the server received, with the headers it came with."""

    scenario: str
    index: int
    headers: dict[str, str]
    body: dict[str, Any]


class StubServer:
    """The server; a context manager that starts it in a daemon thread and stops it."""

    def __init__(self, scenarios: Mapping[str, Sequence[Canned]]) -> None:
        self.scenarios = {k: list(v) for k, v in scenarios.items()}
        self.requests: list[Exchange] = []
        self.problems: list[str] = []
        self._next: dict[str, int] = dict.fromkeys(self.scenarios, 0)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def sent(self, scenario: str) -> list[dict[str, Any]]:
        """The request bodies the client sent for ``scenario``, in order."""
        return [e.body for e in self.requests if e.scenario == scenario]

    def _take(self, scenario: str, headers: dict[str, str], body: dict[str, Any]) -> Canned | None:
        with self._lock:
            script = self.scenarios.get(scenario)
            if script is None:
                self.problems.append(f"a request for the unknown scenario {scenario!r}")
                return None
            i = self._next[scenario]
            self._next[scenario] = i + 1
            self.requests.append(Exchange(scenario, i, headers, body))
            if i >= len(script):
                self.problems.append(f"{scenario}: request {i + 1} is past the end of its script ({len(script)})")
                return None
            canned = script[i]
        if canned.expect is not None:
            complaint = canned.expect(body)
            if complaint:
                with self._lock:
                    self.problems.append(f"{scenario}: request {i + 1}: {complaint}")
        return canned

    def start(self) -> StubServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _send(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] = {}) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout): nothing to answer

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "the request is not JSON", "type": "bad_request"}})
                    return
                canned = server._take(str(body.get("model", "")), dict(self.headers.items()), body)
                if canned is None:
                    self._send(500, {"error": {"message": "the stub has no scripted answer for this request",
                                               "type": "stub_exhausted"}})
                    return
                if canned.delay_s:
                    time.sleep(canned.delay_s)
                self._send(canned.status, canned.body or {}, canned.headers)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
