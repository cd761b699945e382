"""What a case is compared with: the program its baseline recorded, or the program at a git ref.

A case whose program differs from its reference (the kernel source, the files it includes, the
parameters) is judged by a same-run A/B against that reference, whatever any recorded time says;
``Reference.changes`` says what differs. The reference comes from the record's baseline (its
parameters, and its source from git at the baseline's commit) or, under ``--ktune-base REF``, from
``REF`` itself: its source, its included files and its params file's parameters (``BaseRef``).
Where the module that declares the target changed since that commit, the reference is the commit's
whole target (``gate.snapshot``, ``of_whole_target``): its launcher runs the B side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pytest_ktune.core import git
from pytest_ktune.core.errors import KtuneError, StoreError
from pytest_ktune.core.includes import (
    deps_hash,
    include_closure,
    include_name,
    pin_includes,
    read_local,
    source_hash,
)
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Baseline, Record, Store
from pytest_ktune.core.target import Target
from pytest_ktune.gate.snapshot import Snapshot, Unavailable, WholeTarget
from pytest_ktune.measure.worker import TargetRef

__all__ = [
    "BaseRef",
    "Reference",
    "Unavailable",
    "at_ref",
    "baseline_label",
    "missing_at_head",
    "of_baseline",
    "of_whole_target",
]


@dataclass(frozen=True)
class Reference:
    """The B side of an A/B: the parameters, and the source text to compile where it is not the
    current one (its includes pinned to the reference's copies); ``changes`` lists what differs from
    what runs now, empty where nothing does."""

    label: str  # "the baseline (commit abc123)", "origin/main (def456)"
    params: Mapping[str, Value]
    source: str | None
    changes: tuple[str, ...]
    # B's whole target (its commit's copy of the module, ``gate.snapshot``) where its launcher module
    # changed; None: the current target's launcher runs B's source and parameters.
    target: TargetRef | None = None

    @property
    def changed(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True)
class BaseRef:
    """``--ktune-base REF`` resolved once per run: the commit, and its params file's records (None
    where REF has no params file)."""

    name: str
    commit: str
    root: Path
    store: Store | None

    @cached_property
    def snapshot(self) -> Snapshot:
        """REF's files (each read from git once) and its whole targets (its tree unpacked once a run)."""
        return Snapshot(self.root, self.commit, self.label)

    def file(self, path: Path) -> str | None:
        """The text of ``path`` at REF (None where REF has no such file); each file read from git once."""
        return self.snapshot.file(path)

    @classmethod
    def load(cls, root: Path, name: str, params_path: Path) -> BaseRef:
        """``name`` resolved in the project's git repository; a KtuneError saying what to fetch where
        git does not know it, or where REF's params file is damaged."""
        commit = git.output(root, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        if not commit or not commit.strip():
            raise KtuneError(f"--ktune-base {name}: git knows no commit of that name in {root}",
                             hint="fetch it first (e.g. `git fetch origin main`, and check out with "
                                  "fetch-depth: 0 in CI), or name a commit that exists")
        commit = commit.strip()
        text = git.file_at(root, commit, params_path)
        store = None
        if text is not None:
            try:
                store = Store.from_text(text, params_path)
            except StoreError as exc:
                raise KtuneError(f"--ktune-base {name}: the params file at {commit[:12]} is damaged: "
                                 f"{exc.message}", where=str(params_path),
                                 hint="name another ref, or mend the file there") from None
        return cls(name=name, commit=commit, root=root, store=store)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.commit[:12]})"

    def record(self, target: str, device: str, key: Mapping[str, Any]) -> Record | None:
        return self.store.find(target, device, key) if self.store else None


def _changes(target: Target, backend: str, *, old_hash: str, old_deps: str | None, params: Mapping[str, Value],
             old_params: Mapping[str, Value], deps_claimed: bool = True) -> tuple[str, ...]:
    """What differs between the program that runs now and the reference's, in words."""
    out = []
    current_hash = target.source_hash(backend)
    if old_hash != current_hash:
        out.append(f"source {old_hash} -> {current_hash}")
    current_deps = target.deps_hash(backend)
    if deps_claimed and old_deps != current_deps:
        path = target.source_path(backend)
        names = ", ".join(include_name(path, p) for p in target.includes(backend))
        out.append(f"included files{f' ({names})' if names else ''} {old_deps or 'none'} -> {current_deps or 'none'}")
    if dict(old_params) != dict(params):
        out.append(f"parameters {dict(old_params)} -> {dict(params)}")
    return tuple(out)


def baseline_label(base: Baseline) -> str:
    return f"the baseline (commit {(base.commit or 'none')[:12]})"


def of_baseline(target: Target, backend: str, base: Baseline, *, params: Mapping[str, Value], root: Path,
                scratch: Path) -> Reference:
    """The baseline's program as the reference; its source read from git at the baseline's commit
    where it changed (written under ``scratch`` with its includes). Raises Unavailable where git
    cannot give it."""
    label = baseline_label(base)
    old_params = target.complete(base.params)  # the current launcher runs it: a record of an older space, whole
    changes = _changes(target, backend, old_hash=base.source_hash, old_deps=base.deps_hash, params=params,
                       old_params=old_params, deps_claimed=base.deps_hash is not None)
    same_file = base.source_hash == target.source_hash(backend)
    same_includes = base.deps_hash in (None, target.deps_hash(backend))  # None: the baseline makes no claim
    if same_file and same_includes:
        return Reference(label=label, params=old_params, source=None, changes=changes)
    text = _old_source(target, backend, root, base.commit, base.source_hash, same_file=same_file,
                       what="the baseline's")
    if not same_includes:
        text = _pin_old_includes(target, backend, root=root, commit=base.commit, text=text,
                                 want_deps=base.deps_hash, scratch=scratch, what="the baseline's")
    return Reference(label=label, params=old_params, source=text, changes=changes)


def at_ref(target: Target, backend: str, ref: BaseRef, *, ref_params: Mapping[str, Value] | None,
           params: Mapping[str, Value], scratch: Path) -> Reference | None:
    """REF's program as the reference: its source and included files as REF holds them, and the
    parameters REF's params file records for this device and key (``ref_params``; the target's default
    where it records none). None where REF has no such source (a target new since REF)."""
    path = target.source_path(backend)
    if target.in_memory(backend):
        raise Unavailable("source held in Python", f"The source is a ktune.Source held in Python "
                          f"({target.file.name}); git holds files, not the texts a program makes, so {ref.name}'s "
                          "version of it cannot be read")
    old = ref.file(path)
    if old is None:
        return None
    headers = include_closure(path, old, ref.file)
    old_deps = deps_hash(path, headers)
    old_params = target.complete(ref_params) if ref_params is not None else dict(target.default)
    changes = _changes(target, backend, old_hash=source_hash(old), old_deps=old_deps, params=params,
                       old_params=old_params)
    same_file = source_hash(old) == target.source_hash(backend)
    same_includes = old_deps == target.deps_hash(backend)
    text = None if same_file and same_includes else pin_includes(path, old, headers, scratch)
    return Reference(label=ref.label, params=old_params, source=text, changes=changes)


def of_whole_target(target: Target, backend: str, whole: WholeTarget, *, label: str, params: Mapping[str, Value],
                    old_params: Mapping[str, Value], scratch: Path, recorded: Baseline | None = None) -> Reference:
    """A commit's whole target as the reference (``gate.snapshot``): its launcher, its source and included
    files from the commit's copy, and ``old_params``. ``recorded``: the baseline it stands for, whose
    source must be that commit's (else Unavailable). Where its included files differ from the current
    ones, the source comes pinned to them (under ``scratch``), so that no compiled program of the
    current source, keyed by its text, stands in for it."""
    old_target = whole.target
    old_params = old_target.complete(old_params)  # its launcher runs it: a record of an older space, whole
    path = old_target.source_path(backend)
    try:
        text = old_target.source_text(backend)
    except KtuneError as exc:
        raise Unavailable(f"{label}'s source cannot be read", f"{label}'s {target.name} ({whole.module}) names a "
                                                               f"source that cannot be read: {exc.message}") from None
    headers = include_closure(path, text, read_local)
    old_hash, old_deps = source_hash(text), deps_hash(path, headers)
    if recorded is not None and (recorded.source_hash != old_hash or recorded.deps_hash not in (None, old_deps)):
        raise Unavailable("old source not in git",
                          f"The baseline's source is not the one its commit holds (recorded from uncommitted "
                          f"files?), so that commit's {whole.module} does not stand for it")
    changes = _changes(target, backend, old_hash=old_hash, old_deps=old_deps, params=params, old_params=old_params,
                       deps_claimed=recorded is None or recorded.deps_hash is not None)
    if whole.changed:
        changes = (f"launcher module {whole.module} changed", *changes)
    pinned = pin_includes(path, text, headers, scratch) if old_deps != target.deps_hash(backend) else None
    return Reference(label=label, params=dict(old_params), source=pinned, changes=changes,
                     target=whole.ref if changes else None)


def _old_source(target: Target, backend: str, root: Path, commit: str | None, want_hash: str, *, same_file: bool,
                what: str) -> str:
    if same_file:
        return target.source_text(backend)
    if target.in_memory(backend):
        raise Unavailable("old source not in git",
                          f"The source is a ktune.Source held in Python ({target.file.name}) and changed since "
                          f"{what[:-2]}; git holds files, not the texts a program makes")
    path = target.source_path(backend)
    old = git.file_at(root, commit, path) if commit else None
    if old is None or source_hash(old) != want_hash:
        raise Unavailable("old source not in git",
                          f"The source changed since {what[:-2]}, and git holds no copy of {what} source at "
                          f"commit {commit or '(none recorded)'}")
    return old


def _pin_old_includes(target: Target, backend: str, *, root: Path, commit: str | None, text: str,
                      want_deps: str | None, scratch: Path, what: str) -> str:
    path = target.source_path(backend)
    not_in_git: list[Path] = []

    def read_old(p: Path) -> str | None:
        old = git.file_at(root, commit, p) if commit else None
        if old is None and p.is_file():
            not_in_git.append(p)
        return old

    headers = include_closure(path, text, read_old)
    if deps_hash(path, headers) != want_deps:
        names = ", ".join(include_name(path, p) for p in not_in_git)
        headers_named = f"header{'s' if len(not_in_git) > 1 else ''} {names}" if names else "headers"
        raise Unavailable(f"old {headers_named} not in git",
                          f"The files the source includes changed since {what[:-2]}, and git holds no copy of "
                          f"{what} {headers_named} at commit {commit or '(none recorded)'}")
    return pin_includes(path, text, headers, scratch)


def missing_at_head(ref: BaseRef, head: Store | None, *, target: str, key: Mapping[str, Any], machine: str,
                    case_id: str) -> list[str]:
    """What ``ref``'s params file holds for this target and key that the params file here lacks: a
    record of any device, or a baseline timing of this case on this machine. Empty where nothing is
    missing."""
    if ref.store is None:
        return []
    missing = []
    for rec in ref.store.for_target(target):
        if key_string(rec.key) != key_string(key):
            continue
        here = head.find(target, rec.device, key) if head else None
        if here is None:
            missing.append(f"the record for {rec.device}")
            continue
        had = rec.baseline is not None and case_id in rec.baseline.timings_on(machine)
        if had and (here.baseline is None or case_id not in here.baseline.timings_on(machine)):
            missing.append("the baseline timing of this case on this machine")
    return missing
