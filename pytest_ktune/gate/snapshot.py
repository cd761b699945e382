"""A commit's whole target: the module that declares it as that commit holds it, loaded from a copy of
the commit's files, so that an A/B's reference side runs that commit's launcher (the function that
computes the grid, the block and the arguments, its ``key`` and ``defines``, the declaration itself)
on that commit's kernel sources and includes.

The copy is ``git archive``'s, unpacked once per commit under ``.ktune/ref/`` (the user's work tree,
index and HEAD are never touched), and only when some target's module changed since that commit. The
module is loaded from the copy under an alias name (``ALIAS``), beside the current one in
``sys.modules``; the targets it declares register under that alias, so no name collides. What it
imports (sibling modules, the package it sits in) is the current tree's: only the file that declares
the target, and the kernel sources it names, come from the commit.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from pytest_ktune.core import git
from pytest_ktune.core.case import Case
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import Target
from pytest_ktune.core.text import first_line, one_line
from pytest_ktune.measure.worker import NoSuchTarget, TargetRef, import_target

ALIAS = "_ktune_at_"  # a commit's copy of module ``pkg.mod`` is ``pkg._ktune_at_<commit>_mod``
KEEP = 4  # commits' copies kept under .ktune/ref (the most recently used)


class Unavailable(Exception):
    """The reference's program cannot be had (from git, or from its module), so no A/B against it can run."""

    def __init__(self, note: str, why: str) -> None:
        super().__init__(why)
        self.note = note  # a few words for the summary
        self.why = why  # a sentence for a failure's message


@dataclass(frozen=True)
class WholeTarget:
    """A commit's version of a target, as the B side of an A/B runs it."""

    target: Target  # as it runs on the backend; its sources in the commit's copy
    ref: TargetRef  # how the measurement process loads it
    module: str  # the module's file, relative to the project root (for the summary)
    changed: bool  # whether that file differs from the work tree's (in more than comments and layout)


def same_python(old: str, new: str) -> bool:
    """Whether two texts of a module are the same program: the same syntax tree (comments, blank lines
    and layout do not count)."""
    if old == new:
        return True
    try:
        return ast.dump(ast.parse(old)) == ast.dump(ast.parse(new))
    except (SyntaxError, ValueError):
        return False


class Snapshot:
    """One commit's files, read from git once each (``file``), and the targets its modules declare
    (``whole_target``), loaded from one copy of its tree made on first need."""

    def __init__(self, root: Path, commit: str, label: str) -> None:
        self.root = root
        self.commit = commit
        self.label = label
        self._files: dict[Path, str | None] = {}
        self._tree: Path | None = None
        self._top: Path | None = None
        self._changed: dict[Path, bool] = {}  # by module file: the work tree's is read once a run
        self._targets: dict[tuple[Path, str, str], WholeTarget | Unavailable | None] = {}

    def file(self, path: Path) -> str | None:
        """The text of ``path`` at the commit (None where it has no such file)."""
        if path not in self._files:
            self._files[path] = git.file_at(self.root, self.commit, path)
        return self._files[path]

    def relative(self, path: Path) -> Path | None:
        try:
            return path.resolve().relative_to(self.root.resolve())
        except ValueError:
            return None

    def launcher_changed(self, target: Target) -> bool:
        """Whether the file that declares ``target`` differs between the commit and the work tree (False
        where the commit has no such file: nothing to run instead)."""
        if target.file not in self._changed:
            old = self.file(target.file) if self.relative(target.file) is not None else None
            try:
                self._changed[target.file] = old is not None and not same_python(old, target.file.read_text())
            except OSError:
                self._changed[target.file] = True
        return self._changed[target.file]

    def whole_target(self, target: Target, backend: str, case: Case) -> WholeTarget | None:
        """The commit's ``target`` (its module loaded from the commit's copy), able to run ``case``; None
        where the commit has no copy of its module, or (a target new since then) neither the target nor
        its source. Raises Unavailable where the module does not load or lacks the target."""
        k = (target.file, target.name, backend)
        if k not in self._targets:
            try:
                self._targets[k] = self._load(target, backend)
            except Unavailable as exc:
                self._targets[k] = exc
        found = self._targets[k]
        if isinstance(found, Unavailable):
            raise found
        if found is not None:
            try:
                found.target.bind(**case.args)
            except TypeError as exc:
                raise Unavailable(f"{self.label}'s launcher takes other arguments",
                                  f"{self.label}'s {target.name} in {found.module} cannot take this case's "
                                  f"arguments ({exc}), so its launcher cannot run it") from None
        return found

    def _load(self, target: Target, backend: str) -> WholeTarget | None:
        rel = self.relative(target.file)
        if rel is None or self.file(target.file) is None:
            return None
        copy = self.tree() / target.file.resolve().relative_to(self.top())
        ref = TargetRef(module=alias(target.module, self.commit), file=str(copy), name=target.name,
                        sys_path=tuple(sys.path), copy=True)
        where = f"{self.label}'s {rel.as_posix()}"
        try:
            old = import_target(ref).for_backend(backend)
        except NoSuchTarget:
            if self.file(target.source_path(backend)) is None:
                return None  # a target new since the commit: nothing to compare with
            raise Unavailable(f"{where} has no target {target.name}",
                              f"{where} declares no target named {target.name} (renamed since?), though it "
                              f"has its source; run with a --ktune-base that has it, or record a baseline "
                              f"(--ktune-update-baseline)") from None
        except Exception as exc:
            text = exc.message if isinstance(exc, KtuneError) else f"{type(exc).__name__}: {exc}"
            raise Unavailable(f"{where} does not import ({one_line(first_line(text) or 'no message', 120)})",
                              f"{where}, loaded beside the current module (its own imports resolve to the "
                              f"current tree), fails: {text}; make that version importable, or compare with "
                              f"another commit (--ktune-base)") from None
        if backend not in old.sources:
            raise Unavailable(f"{where} has no {backend} source for {target.name}",
                              f"{where} declares {target.name} without a {backend} source")
        return WholeTarget(target=old, ref=ref, module=rel.as_posix(), changed=self.launcher_changed(target))

    def top(self) -> Path:
        """The repository's top folder (the project root may sit below it): the copy's layout is its."""
        if self._top is None:
            out = git.output(self.root, "rev-parse", "--show-toplevel")
            self._top = Path(out.strip()).resolve() if out and out.strip() else self.root.resolve()
        return self._top

    def tree(self) -> Path:
        """The commit's files, unpacked once under ``.ktune/ref/<commit>`` (kept for the next run)."""
        if self._tree is not None:
            return self._tree
        folder = self.root / ".ktune" / "ref"
        tree = folder / self.commit
        if not tree.is_dir():
            partial = folder / f"{self.commit}.partial-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            try:
                git.export_tree(self.top(), self.commit, partial)
            except KtuneError as exc:
                shutil.rmtree(partial, ignore_errors=True)
                raise Unavailable(f"{self.label}'s files cannot be read",
                                  f"git cannot write out {self.label}'s files: {exc.message}") from None
            try:
                partial.rename(tree)
            except OSError:  # another run unpacked it first
                shutil.rmtree(partial, ignore_errors=True)
        os.utime(tree)
        _prune(folder, keep=tree)
        self._tree = tree
        return tree


def alias(module: str, commit: str) -> str:
    """The name a commit's copy of ``module`` is loaded under: in the same package, so that its relative
    imports find the current package's modules."""
    package, _, leaf = module.rpartition(".")
    name = f"{ALIAS}{commit[:12]}_{leaf}"
    return f"{package}.{name}" if package else name


def _prune(folder: Path, *, keep: Path) -> None:
    """Copies of other commits beyond the KEEP most recently used go."""
    trees = sorted((p for p in folder.iterdir() if p.is_dir() and ".partial-" not in p.name),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in trees[KEEP:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
