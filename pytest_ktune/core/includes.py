"""A kernel source's local includes: found, hashed, and pinned to the texts a baseline was measured on."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: A quoted ``#include "name"``; the angle-bracket form names system headers and is left out.
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)


def read_local(path: Path) -> str | None:
    """The text of the file at ``path``, or None where there is no file."""
    return path.read_text() if path.is_file() else None


def include_candidates(including: Path, source: Path, name: str) -> list[Path]:
    """Where the compile looks for ``#include "name"`` met in the file ``including``: that file's
    folder, then the kernel source's (the ``-I`` folder the backends add)."""
    folders = dict.fromkeys([including.parent, source.parent])
    return [Path(os.path.normpath(folder / name)) for folder in folders]


def include_closure(source: Path, text: str, read: Callable[[Path], str | None]) -> dict[Path, str]:
    """The local files that ``text``, the kernel source at ``source``, includes, directly or through
    each other, with their texts: each quoted ``#include`` that ``read`` finds at one of its
    ``include_candidates`` (``read`` gives a file's text, or None where it has none), each file once,
    in the order first met. Includes found nowhere are left to the compiler (NVRTC's and system
    headers)."""
    found: dict[Path, str] = {}

    def visit(including: Path, body: str) -> None:
        for name in INCLUDE.findall(body):
            for candidate in include_candidates(including, source, name):
                if candidate in found or candidate == source:
                    break
                included = read(candidate)
                if included is not None:
                    found[candidate] = included
                    visit(candidate, included)
                    break

    visit(source, text)
    return found


def include_name(source: Path, path: Path) -> str:
    """How ``path``, an include of the kernel source at ``source``, is named: relative to its folder."""
    return Path(os.path.relpath(path, source.parent)).as_posix()


def deps_hash(source: Path, files: Mapping[Path, str]) -> str | None:
    """A hash of the kernel source's ``include_closure`` (each file's name from ``include_name`` and
    its text, in order); None when there are no files."""
    if not files:
        return None
    h = hashlib.sha256()
    for path, text in files.items():
        for part in (include_name(source, path), text):
            data = part.encode()
            h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]


def pin_includes(source: Path, text: str, headers: Mapping[Path, str], folder: Path) -> str:
    """``text``, the kernel source at ``source``, with each ``#include`` of one of ``headers`` (its
    include closure, by path, with the texts to compile) pointed at a copy of that text written under
    ``folder``, in the layout of its path relative to the kernel's folder; the copies' includes are
    pointed the same way. The compile then reads these texts, whatever the files hold now."""
    copies = {p: folder.joinpath(*("_up_" if part == ".." else part
                                   for part in PurePosixPath(include_name(source, p)).parts))
              for p in headers}

    def pin(including: Path, body: str) -> str:
        def to_copy(m: re.Match[str]) -> str:
            for candidate in include_candidates(including, source, m.group(1)):
                if candidate in copies:
                    return m.group(0)[:m.start(1) - m.start()] + copies[candidate].as_posix() + '"'
            return m.group(0)

        return INCLUDE.sub(to_copy, body)

    for p, body in headers.items():
        copies[p].parent.mkdir(parents=True, exist_ok=True)
        copies[p].write_text(pin(p, body))
    return pin(source, text)
