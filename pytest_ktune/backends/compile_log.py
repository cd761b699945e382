"""Turn a compiler's log into one that names the real file and shows the lines."""

from __future__ import annotations

import os
import re
from pathlib import Path

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


#: Set to 1 to have every compiler message of a build shown, once each (the gate's summary, the tuner's
#: workers and production calls print them); without it they are kept, and shown with a failure.
OUTPUT_VARIABLE = "KTUNE_COMPILER_OUTPUT"


def output_asked() -> bool:
    """Whether ``KTUNE_COMPILER_OUTPUT`` asks for the compiler's messages (any value but '', 0, no, false)."""
    return os.environ.get(OUTPUT_VARIABLE, "").strip().lower() not in ("", "0", "no", "false", "off")


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
