"""The read side of the proposal sandbox: which files a proposal's source may bring in, decided before any is read.

A proposal's source is the model's text, and every ``#include`` in it is a file the compiler would read
(and quote, in its errors). So, before anything is read or compiled:

- every include directive is found, however it is spelled: after line splices, past comments, with
  ``%:`` and ``??=`` for ``#``, as ``include``, ``include_next``, ``import`` or ``embed``; and once more by a
  plain search of the whole text, so that a directive a comment or a string seems to hide is checked as
  well. Each must name its file literally (``#include MACRO`` is refused), and so must
  ``__has_include``; a ``pragma ... dependency`` (which makes the compiler look at a file) is refused;
- a quoted name must be relative, without ``..``, and must lie, once resolved (symbolic links
  included), under the allowed folders: the kernel source's folder and the folders of the headers the
  base kernel itself includes. The file must be a regular text file of at most ``MAX_HEADER`` bytes;
- an angle-bracket name is a system header: refused for OpenCL (OpenCL C needs none, and a compiler
  would look for it in the machine's include folders), a plain relative name for CUDA (the toolkit's
  and NVRTC's own headers, such as ``cuda_fp16.h``).

A refusal is a ``ProposalError`` whose message quotes the directive as the model wrote it and names no
path of this machine. The headers a kernel's own headers include are resolved in the same folders.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_ktune.agent._proposal import ProposalError
from pytest_ktune.core.target import Target

MAX_HEADER = 1 << 20
_HINT = ("include only headers that sit beside the kernel source, by a relative name without '..' "
         "(e.g. #include \"common.clh\"), or put the code in the source itself")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*$")
_HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".clh", ".inc", ".inl")
_FILE_DIRECTIVES = ("include", "include_next", "import", "embed")
# A directive anywhere in the text: '#' (or a digraph or trigraph for it), blanks and comments, the name.
_ANYWHERE = re.compile(r"(?:#|%:|\?\?=)[ \t]*(?:/\*.*?\*/[ \t]*)*(include_next|include|import|embed)\b", re.S)
_LITERAL = re.compile(r"[ \t]*(?:/\*.*?\*/[ \t]*)*(\"([^\"\n]*)\"|<([^>\n]*)>)", re.S)
_HAS = re.compile(r"\b(__has_include_next|__has_include|__has_embed)\b")
_HAS_LITERAL = re.compile(r"\s*\(\s*(\"([^\"\n]*)\"|<([^>\n]*)>)\s*\)")
_DEPENDENCY = re.compile(r"pragma\b[^\n]*\bdependency\b", re.I)
_AT_LINE_START = re.compile(r"^[ \t]*(?:#|%:|\?\?=)[ \t]*([A-Za-z_]+)(.*)$", re.M)


@dataclass(frozen=True)
class Include:
    """One file directive of a source: its line, the name it gives, and whether in angle brackets."""

    line: int
    name: str
    angled: bool
    text: str  # the directive as written, for messages

    def quoted(self) -> str:
        return f"<{self.name}>" if self.angled else f'"{self.name}"'


def _splice(text: str) -> str:
    """Line splices removed (a backslash, or the trigraph ??/, before a newline), as the preprocessor does first."""
    return re.sub(r"(?:\\|\?\?/)[ \t]*\r?\n", "", text)


def _code(text: str) -> str:
    """``text`` with comments blanked out (newlines kept, so line numbers hold); strings and character
    literals are skipped over, so a '//' inside one is not taken for a comment."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(" " + "\n" * text.count("\n", i, end))
            i = end
        elif c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] not in (c, "\n"):
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def directives(source: str, *, backend: str, who: str = "the source") -> list[Include]:
    """Every file directive of ``source`` (see the module docstring), each checked for a literal, safe
    name; raises ProposalError for one that is not."""
    spliced = _splice(source)
    found: dict[tuple[int, str], Include] = {}

    def add(line: int, literal: re.Match[str] | None, text: str) -> None:
        snippet = " ".join(text.split())[:120]
        if literal is None:
            raise ProposalError(f"{who}, line {line}: {snippet!r} does not name its file literally",
                                hint="write #include \"name\" (a computed #include MACRO is not allowed)")
        angled = literal.group(3) is not None
        name = literal.group(3) if angled else literal.group(2)
        inc = Include(line, name, angled, snippet)
        _check_name(inc, backend=backend, who=who)
        found.setdefault((line, name), inc)

    code = _code(spliced)
    for m in _AT_LINE_START.finditer(code):
        if m.group(1) in _FILE_DIRECTIVES:
            add(_line_of(code, m.start()), _LITERAL.match(m.group(2)), m.group(0))
    for m in _ANYWHERE.finditer(spliced):
        add(_line_of(spliced, m.start()), _LITERAL.match(spliced, m.end()), spliced[m.start():m.end() + 80])
    for m in _HAS.finditer(spliced):
        add(_line_of(spliced, m.start()), _HAS_LITERAL.match(spliced, m.end()), spliced[m.start():m.end() + 80])
    bad = _DEPENDENCY.search(spliced)
    if bad:
        raise ProposalError(f"{who}, line {_line_of(spliced, bad.start())}: a pragma that names a dependency "
                            "makes the compiler look at a file; it is not allowed", hint=_HINT)
    return sorted(found.values(), key=lambda i: (i.line, i.name))


def _check_name(inc: Include, *, backend: str, who: str) -> None:
    if inc.angled and backend != "cuda":
        raise ProposalError(f"{who}, line {inc.line}: #include {inc.quoted()}: an angle-bracket (system) header "
                            f"is not allowed for {backend}", hint=_HINT)
    if not _NAME.match(inc.name) or ".." in inc.name.split("/") or len(inc.name) > 200:
        raise ProposalError(f"{who}, line {inc.line}: #include {inc.quoted()} is not a plain relative name "
                            "(an absolute path, '..', or odd characters)", hint=_HINT)


def allowed_folders(base: Target, backend: str) -> tuple[Path, ...]:
    """Where a proposal's headers may lie: the base source's folder, and the folders of the headers
    the base kernel includes (the project's include folders)."""
    src = base.source_path(backend).resolve()
    folders = [src.parent, *(p.resolve().parent for p in base.includes(backend))]
    return tuple(dict.fromkeys(folders))


def _under(path: Path, folders: Sequence[Path]) -> bool:
    return any(path == f or path.is_relative_to(f) for f in folders)


def _beside(folder: Path) -> str:
    try:
        names = sorted(p.name for p in folder.iterdir() if p.suffix in _HEADER_SUFFIXES and p.is_file())
    except OSError:
        names = []
    return ", ".join(names[:20]) if names else "none"


def _read(path: Path, inc: Include, who: str) -> str:
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ProposalError(f"{who}, line {inc.line}: #include {inc.quoted()} is not a regular file", hint=_HINT)
    if info.st_size > MAX_HEADER:
        raise ProposalError(f"{who}, line {inc.line}: #include {inc.quoted()} is {info.st_size} bytes, more than "
                            f"{MAX_HEADER}", hint=_HINT)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ProposalError(f"{who}, line {inc.line}: #include {inc.quoted()} is not a text file",
                            hint=_HINT) from None


def _locate(name: str, including: Path, src_dir: Path, folders: Sequence[Path]) -> tuple[Path, Path] | None:
    """Where the compiler finds a quoted ``name`` met in a file of ``including`` (that folder, then the
    source's), as (the path as the include names it, the real file); None where it is in neither."""
    for folder in dict.fromkeys([including, src_dir]):
        candidate = Path(os.path.normpath(folder / name))
        if not _under(candidate, folders):
            continue
        if candidate.is_file() or candidate.is_symlink():
            return candidate, candidate.resolve()
    return None


def headers_for(source: str, src_dir: Path, folders: Sequence[Path], *, backend: str) -> dict[Path, str]:
    """The quoted headers ``source`` (the proposal's, compiled as if in ``src_dir``) includes, directly
    or through each other, by the path the include names, with their texts: each checked as the module
    docstring says before it is read. Raises ProposalError for the first that is refused."""
    src_dir = src_dir.resolve()
    found: dict[Path, str] = {}

    def visit(including: Path, text: str, who: str, strict: bool) -> None:
        for inc in directives(text, backend=backend, who=who):
            if inc.angled:
                continue
            where = _locate(inc.name, including, src_dir, folders)
            if where is None:
                if strict:
                    raise ProposalError(f"{who}, line {inc.line}: #include {inc.quoted()}: there is no such header "
                                        f"beside the kernel (the headers there: {_beside(src_dir)})", hint=_HINT)
                continue  # a kernel header's own include left to the compiler, as for the base kernel
            named, real = where
            if not _under(real, folders):
                raise ProposalError(f"{who}, line {inc.line}: #include {inc.quoted()} leads outside the kernel's "
                                    "folder (a symbolic link)", hint=_HINT)
            if named in found:
                continue
            found[named] = _read(real, inc, who)
            visit(named.parent, found[named], f"the header {inc.name}", strict=False)

    visit(src_dir, source, "the source", strict=True)
    return found
