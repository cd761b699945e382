"""Turn a compiler's log into one that names the real file and shows the lines; keep a compiler's
chatter out of the user's stderr unless asked for."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

_LINE_REFS = (
    re.compile(r"[(:](\d+)[):](?:(\d+):)?\s*(?:fatal )?error"),
    re.compile(r"\((\d+)\): error"),
    # PoCL puts "error:" first: "error: /tmp/.../tempfile.cl:3:14: use of undeclared identifier".
    re.compile(r"\berror:\s+\S+?:(\d+):(\d+):"),
)


def annotate(log: str, source: str, filename: str, *, context: int = 1) -> str:
    """The compiler's log, followed by each line it complains about with its number."""
    lines = source.splitlines()
    wanted: list[int] = []
    for pattern in _LINE_REFS:
        for m in pattern.finditer(log):
            n = int(m.group(1))
            if 1 <= n <= len(lines) and n not in wanted:
                wanted.append(n)
    out = [log.rstrip()]
    for n in wanted[:5]:
        out.append(f"--- {filename}, line {n}:")
        for i in range(max(1, n - context), min(len(lines), n + context) + 1):
            mark = ">" if i == n else " "
            out.append(f"{mark}{i:5d} | {lines[i - 1]}")
    return "\n".join(out)


COMPILER_OUTPUT_ENV = "KTUNE_COMPILER_OUTPUT"  # 1: let the compiler's own messages through to stderr


def compiler_output_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the user asked to see what compilers print (``KTUNE_COMPILER_OUTPUT=1``)."""
    return (os.environ if env is None else env).get(COMPILER_OUTPUT_ENV, "").strip().lower() in ("1", "true", "yes")


class _Redirect:
    """fd 2 pointed at a temporary file while any thread is inside ``quiet_stderr``: the first to enter
    redirects it, the last to leave puts the saved one back. fd 2 is the process's, so threads that
    compile at once (the agent's tools, a tuner's workers) share one redirect; each saving and restoring its
    own would, interleaved, leave stderr pointing at another's closed file for good."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = -1
        self.sink: Any = None

    def enter(self) -> bool:
        """Redirect fd 2, or count one more thread inside; False where fd 2 cannot be redirected."""
        with self.lock:
            if self.depth == 0:
                try:
                    sys.stderr.flush()
                    saved = os.dup(2)
                except (OSError, ValueError, AttributeError):
                    return False
                sink = tempfile.TemporaryFile()  # noqa: SIM115 - open until the last thread leaves
                try:
                    os.dup2(sink.fileno(), 2)
                except OSError:
                    os.close(saved)
                    sink.close()
                    return False
                self.saved, self.sink = saved, sink
            self.depth += 1
            return True

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                try:
                    os.dup2(self.saved, 2)
                finally:
                    os.close(self.saved)
                    self.sink.close()
                    self.saved, self.sink = -1, None


_REDIRECT = _Redirect()


@contextlib.contextmanager
def quiet_stderr(enabled: bool = True) -> Iterator[None]:
    """Keep what a compiler writes straight to the process's stderr (PoCL's clang prints "N warnings
    generated." there, past Python) out of the user's terminal. Errors are not lost: a failed build
    raises with its log. With ``enabled`` False, or where fd 2 cannot be redirected, nothing changes;
    threads inside at once share one redirect (``_Redirect``)."""
    if not enabled or not _REDIRECT.enter():
        yield
        return
    try:
        yield
    finally:
        _REDIRECT.leave()


# Names compilers give the text they were handed (PoCL's kernel cache, CuPy's hashed files).
_TEMP_NAME = re.compile(r"(?:[^\s:()<>]*/)?(?:tempfile_\w+|[0-9a-f]{32,}\w*)\.(?:cl|cu)\b")
_SUMMARY = re.compile(r"^\s*\d+ (?:warnings?|errors?) generated\.?\s*$")


def clean_log(log: str, filename: str) -> str:
    """A build log as it concerns the user: the compiler's temporary file names replaced by the
    source's, each message line once, counts ("2 warnings generated") left out."""
    name = Path(filename).name
    seen: dict[str, None] = {}
    for raw in log.splitlines():
        line = _TEMP_NAME.sub(name, raw.rstrip())
        if line.strip() and not _SUMMARY.match(line):
            seen.setdefault(line, None)
    return "\n".join(seen)
