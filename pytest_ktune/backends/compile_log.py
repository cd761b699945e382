"""Turn a compiler's log into one that names the real file and shows the lines."""

from __future__ import annotations

import re

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
