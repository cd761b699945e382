"""Finding where a kernel source overrides the ``-D`` macros ktune passes it.

Parameters and ``defines=`` reach the source as ``-DNAME=value``. A source (or a file it includes)
that says ``#define NAME ...`` itself replaces that value: the compiler only warns ("macro
redefined"), and the kernel runs with the source's value whatever the tuner chose, or reads out of
bounds. A ``#define`` guarded by ``#ifndef NAME`` (or ``#if !defined(NAME)``, or the ``#else`` of
``#ifdef NAME``) is the way to give a default, and is fine.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_ktune.core.includes import include_closure, read_local

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(.*)$")
_NAME = re.compile(r"^[ \t]+([A-Za-z_]\w*)")
_NOT_DEFINED = re.compile(r"^\s*!\s*defined\s*(?:\(\s*([A-Za-z_]\w*)\s*\)|([A-Za-z_]\w*))\s*$")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)


@dataclass(frozen=True)
class Redefinition:
    """An unguarded ``#define NAME`` of a macro that ktune passes with ``-D``."""

    name: str
    path: Path
    line: int
    text: str

    def render(self) -> str:
        return f"{self.path}:{self.line}: {self.text.strip()}"


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """The source's lines with block comments blanked (their newlines kept) and backslash
    continuations joined, each with the number of its first line."""
    text = _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for i, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start = i
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        out.append((start, "".join([*pending, line])))
        pending = []
    if pending:
        out.append((start, "".join(pending)))
    return out


def _guard(kind: str, rest: str) -> tuple[str | None, str | None]:
    """For an ``#if``-like directive: the macro its first branch is taken only without (``#ifndef X``,
    ``#if !defined(X)``), and the one its ``#else`` branch is taken only without (``#ifdef X``)."""
    m = _NAME.match(rest)
    if kind == "ifndef" and m:
        return m.group(1), None
    if kind == "ifdef" and m:
        return None, m.group(1)
    if kind == "if":
        nd = _NOT_DEFINED.match(rest.split("//", 1)[0])
        if nd:
            return nd.group(1) or nd.group(2), None
    return None, None


def scan(path: Path, text: str, names: Collection[str]) -> list[Redefinition]:
    """The unguarded ``#define``s of ``names`` in one file's ``text``."""
    found: list[Redefinition] = []
    # One frame per open #if: (the macro guarded in the branch being read, the one its #else guards)
    stack: list[tuple[str | None, str | None]] = []
    for number, line in _logical_lines(text):
        m = _DIRECTIVE.match(line)
        if not m:
            continue
        kind, rest = m.group(1), m.group(2)
        if kind in ("if", "ifdef", "ifndef"):
            stack.append(_guard(kind, rest))
        elif kind in ("elif", "elifdef", "elifndef") and stack:
            stack[-1] = (None, None)
        elif kind == "else" and stack:
            stack[-1] = (stack[-1][1], None)
        elif kind == "endif" and stack:
            stack.pop()
        elif kind == "define":
            nm = _NAME.match(rest)
            if nm and nm.group(1) in names and all(g != nm.group(1) for g, _ in stack):
                found.append(Redefinition(nm.group(1), path, number, line))
    return found


@functools.lru_cache(maxsize=256)
def _cached(source: str, text: str, headers: tuple[tuple[Path, str], ...],
            names: frozenset[str]) -> tuple[Redefinition, ...]:
    found = scan(Path(source), text, names)
    for included, body in headers:
        found.extend(scan(included, body, names))
    return tuple(found)


def redefinitions(source: Path, text: str, names: Collection[str],
                  headers: Mapping[Path, str] | None = None) -> list[Redefinition]:
    """The unguarded ``#define``s of ``names`` in the kernel source ``text`` (at ``source``) and in the
    local files it includes (``headers``, the include closure, where the caller has read it already), in
    the order met."""
    if not names:
        return []
    if headers is None:
        headers = include_closure(source, text, read_local)
    return list(_cached(str(source), text, tuple(headers.items()), frozenset(names)))
