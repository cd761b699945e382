"""What goes back to the model: texts that name no path of this machine, and compile logs cut to its own source.

Everything a tool call answers passes through ``for_model``: a path under the project root becomes
the path relative to it, and any other absolute path ``<path>``. A compile log is rebuilt by
``compile_log`` from the compiler's diagnostics that point at the proposal's own source (file names
replaced by the source's name, each with its line of the proposal); a diagnostic inside an included
header is counted, not shown, since its text would quote that file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# An absolute path of two components or more (a division such as 'a / b' or '(x)/8' is not one).
_ABSOLUTE = re.compile(r"(?<![\w.~])/(?:[\w.+@~-]+/)+[\w.+@~-]*")
# PoCL (clang): "error: /path/file.cl:3:14: message"; clang and nvcc: "/path/file.cl:3:14: error: message";
# NVRTC: "/path/kern.cu(3): error: message".
_DIAGNOSTICS = (
    re.compile(r"^\s*(?P<kind>error|warning|fatal error):\s+(?P<file>\S+?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
               r"(?P<msg>.*)$"),
    re.compile(r"^\s*(?P<file>\S+?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?P<kind>error|warning|fatal error):\s*"
               r"(?P<msg>.*)$"),
    re.compile(r"^\s*(?P<file>\S+?)\((?P<line>\d+)\):\s*(?P<kind>error|warning)[^:]*:\s*(?P<msg>.*)$"),
)
MAX_DIAGNOSTICS = 8


def for_model(text: str, root: Path | None = None) -> str:
    """``text`` with the paths of this machine taken out (see the module docstring)."""
    roots = []
    if root is not None:
        roots = sorted({str(root), str(root.resolve())}, key=len, reverse=True)

    def replace(m: re.Match[str]) -> str:
        path = m.group(0)
        for r in roots:
            if path == r or path.startswith(r.rstrip("/") + "/"):
                rest = path[len(r):].lstrip("/")
                return rest or "."
        return "<path>"

    return _ABSOLUTE.sub(replace, text)


def for_model_json(value: Any, root: Path | None = None) -> Any:
    """``for_model`` over every string of a JSON value."""
    if isinstance(value, str):
        return for_model(value, root)
    if isinstance(value, dict):
        return {for_model(str(k), root): for_model_json(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [for_model_json(v, root) for v in value]
    return value


def compile_log(detail: str, source: str, source_name: str, headers: set[str]) -> str:
    """The compiler's complaints about the proposal's own source, each with its line; ``headers`` are
    the file names of the headers it includes (their diagnostics are counted only)."""
    lines = source.splitlines()
    shown: list[str] = []
    in_headers = 0
    for raw in detail.splitlines():
        m = next((d.match(raw) for d in _DIAGNOSTICS if d.match(raw)), None)
        if m is None:
            continue
        name = Path(m.group("file")).name
        if name in headers:
            in_headers += 1
            continue
        n = int(m.group("line"))
        col = f":{m.group('col')}" if m.group("col") else ""
        text = f"{source_name}:{n}{col}: {m.group('kind')}: {for_model(m.group('msg').strip())}"
        if 1 <= n <= len(lines):
            text += f"\n  {n:5d} | {lines[n - 1].rstrip()[:200]}"
        if text not in shown:
            shown.append(text)
    out = shown[:MAX_DIAGNOSTICS]
    if len(shown) > MAX_DIAGNOSTICS:
        out.append(f"(and {len(shown) - MAX_DIAGNOSTICS} more)")
    if in_headers:
        out.append(f"{in_headers} diagnostic(s) inside included headers, not shown: check the names and macros "
                   "your source passes to them")
    if not out:
        return "the compiler rejected the source, and its log names no line of it"
    return "\n".join(out)


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line (its lines joined by ' | '), cut to ``limit`` characters: a console line."""
    flat = " | ".join(part.strip() for part in text.splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
