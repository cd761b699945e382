"""Delivering what a tune found: the built-in write-back modes (nothing, the params file in place, a
patch, a commit, a pull request), and what a plugin's mode is given (``pytest_ktune_write_back``).

This is the one path by which a tune changes the user's files: the tuner and the agent stage only
produce the changes (records, in each ``TuneOutcome``; templates, as ``TemplateChange``), and the
run's mode (a built-in one here, or a plugin's, which may replace any name) writes them, or not."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_ktune.core import git
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.keys import key_label
from pytest_ktune.core.names import WRITE_MODES
from pytest_ktune.core.store import Record, Store
from pytest_ktune.core.text import us
from pytest_ktune.core.version import __version__
from pytest_ktune.tuner.outcome import TemplateChange, TuneOutcome
from pytest_ktune.writeback.change import Change, NothingToWrite, WritebackError
from pytest_ktune.writeback.github import open_pr
from pytest_ktune.writeback.modes import commit_branch, write_file, write_patch


@dataclass(frozen=True)
class WriteRequest:
    """What a write-back mode is given at the end of a run that tuned."""

    mode: str
    root: Path  # the project root (inside a git repository for the git modes)
    params_path: Path
    outcomes: tuple[TuneOutcome, ...]  # every key tuned, winners (``changes`` and ``record`` set) or not
    device: str
    command: str  # how the run was started, for "reproduce with"
    copy_bandwidth: Callable[[], float | None]  # the device's, measured on first call (bytes/s)
    templates: tuple[TemplateChange, ...] = ()  # the agent stage's verified templates that beat their base

    @property
    def winners(self) -> list[TuneOutcome]:
        return [o for o in self.outcomes if o.changes and o.record is not None]

    def records(self, *, all_tuned: bool) -> list[Record]:
        """The records to write: the winners' and the templates' (with ``all_tuned``, also those of
        the keys whose parameters were kept, which say when they were tuned)."""
        tuned = [o.record for o in self.outcomes if o.record is not None and (all_tuned or o.changes)]
        return [*tuned, *(r for t in self.templates for r in t.records)]

    def files(self) -> dict[str, str]:
        """The templates' new files, by path relative to the project root."""
        return {rel: text for t in self.templates for rel, text in t.files.items()}


#: A write-back mode: does its work and returns one line for the terminal; raises a KtuneError when
#: what was asked cannot be delivered (the run then fails).
WriteBack = Callable[[WriteRequest], str]


def change_body(req: WriteRequest) -> str:
    """The markdown of a commit message or pull request: a before/after table per tuned key, and a
    paragraph per template."""
    parts = [f"pytest-ktune {__version__} tuned these kernels on **{req.device}**. Each winner was verified on "
             "every case against the reference, then timed interleaved (A/B) against the parameters it replaces, "
             "in the same run.", ""]
    copy_bandwidth = req.copy_bandwidth() if req.winners else None
    for o in req.winners:
        before = " ".join(f"{k}={v}" for k, v in o.current_params.items())
        after = " ".join(f"{k}={v}" for k, v in o.best_params.items())
        parts += [f"### {o.target} [{key_label(o.key)}]", "", f"`{before}` → `{after}` ({o.decision}; "
                  f"{o.trials_text()}, study `{o.study}`)", "",
                  "| case | before µs | after µs | ratio | GB/s before → after | % of copy bandwidth |",
                  "| --- | ---: | ---: | ---: | --- | --- |"]
        for c in o.changes:
            gbps = pct = "-"
            if c.bytes_moved:
                gb_b, gb_a = c.bytes_moved / c.before_s / 1e9, c.bytes_moved / c.after_s / 1e9
                gbps = f"{gb_b:,.0f} → {gb_a:,.0f}"
                if copy_bandwidth:
                    pct = f"{100 * gb_b * 1e9 / copy_bandwidth:.0f}% → {100 * gb_a * 1e9 / copy_bandwidth:.0f}%"
            parts.append(f"| {c.case_id} | {us(c.before_s * 1e6)} | {us(c.after_s * 1e6)} | "
                         f"x{c.before_s / c.after_s:.3f} | {gbps} | {pct} |")
        parts.append("")
    for t in req.templates:
        parts += [f"### {t.target}: a verified template", "", t.summary, "",
                  "New files: " + ", ".join(f"`{rel}`" for rel in sorted(t.files)), ""]
    parts += ["Reproduce with:", "", "```sh", req.command, "```", ""]
    return "\n".join(parts)


def _nothing(req: WriteRequest) -> str | None:
    if req.winners or req.templates:
        return None
    return "nothing to write: no tuned configuration beat the parameters in use"


def _none(req: WriteRequest) -> str:
    n = len(req.winners) + len(req.templates)
    return _nothing(req) or (
        f"{n} tuned winner(s) NOT written (--ktune-write=none, the default): rerun with --ktune-write=file, "
        "patch, commit or pr to keep them (the studies and the decisions are kept under .ktune/; nothing is "
        "re-timed)")


def _params_text(req: WriteRequest, *, all_tuned: bool) -> str:
    """The params file as it is on disk now, with the run's records in it. A WritebackError when it
    cannot be read."""
    try:
        store = Store.load(req.params_path)
    except KtuneError as exc:
        raise WritebackError(exc.message, where=exc.where, hint=exc.hint) from None
    for r in req.records(all_tuned=all_tuned):
        store.records[r.ident] = r
    return store.render()


def _title(req: WriteRequest) -> tuple[str, tuple[str, ...]]:
    targets = tuple(sorted({o.target for o in req.winners} | {t.target for t in req.templates}))
    return f"ktune: tuned {', '.join(targets)} on {req.device}", targets


def _file(req: WriteRequest) -> str:
    """The params file (every tuned key's record, kept ones too: they say when they were tuned) and the
    templates' new files, written in place through ``writeback.modes.write_file``."""
    if not req.records(all_tuned=True):
        return "no tuned record to write"
    title, targets = _title(req)
    params = Change(files={req.params_path.name: _params_text(req, all_tuned=True)}, title=title, body_markdown="",
                    targets=targets, device=req.device)
    lines = []
    if req.templates:
        templates = Change(files=req.files(), title=title, body_markdown="", targets=targets, device=req.device,
                           new_files=frozenset(req.files()))
        lines.append(f"templates: {write_file(req.root, templates)}")
    said = write_file(req.params_path.parent, params)
    n = len(req.records(all_tuned=True))
    lines.append(f"wrote {n} tuned record(s) to {req.params_path}" if said.startswith("wrote") else
                 f"{req.params_path} already holds the {n} tuned record(s)")
    return "; ".join(lines)


def change_of(req: WriteRequest) -> Change | str:
    """The params file with the winners in it, and the templates' new files, as a Change; or why there
    is none to make. A WritebackError when the params file cannot be read, or lies outside the project."""
    nothing = _nothing(req)
    if nothing is not None:
        return nothing
    try:
        rel = req.params_path.resolve().relative_to(req.root.resolve()).as_posix()
    except ValueError:
        raise WritebackError(f"the params file {req.params_path} is outside the project root {req.root}",
                             hint="give --ktune-params a path inside the project, or use --ktune-write=file") from None
    title, targets = _title(req)
    return Change(files={**req.files(), rel: _params_text(req, all_tuned=False)}, title=title,
                  body_markdown=change_body(req), targets=targets, device=req.device,
                  new_files=frozenset(req.files()))


def _git_mode(write: Callable[[Path, Change], str]) -> WriteBack:
    """A mode that delivers the change through git; a WritebackError (raised) when it cannot."""

    def mode(req: WriteRequest) -> str:
        change = change_of(req)
        if isinstance(change, str):
            return change
        try:
            return write(req.root, change)
        except NothingToWrite as exc:
            return f"nothing to write: {exc.message}"

    return mode


def _patch(root: Path, change: Change) -> str:
    path = write_patch(root, change, root / ".ktune" / "patches")
    return f"patch written to {path}; apply it with: git apply {path} (from the repository's top level)"


def _commit(root: Path, change: Change) -> str:
    branch, sha = commit_branch(root, change)
    return (f"committed {sha[:12]} on the new branch {branch}; your checkout is unchanged "
            f"(see it with: git show {branch})")


def _pr(root: Path, change: Change) -> str:
    pr = open_pr(root, change)
    return f"{'opened' if pr.created else 'updated'} pull request #{pr.number}: {pr.url} (branch {pr.branch})"


_BUILTIN: dict[str, WriteBack] = {"none": _none, "file": _file, "patch": _git_mode(_patch),
                                  "commit": _git_mode(_commit), "pr": _git_mode(_pr)}
assert tuple(_BUILTIN) == WRITE_MODES


_GIT_MODES: dict[str, Callable[[Path, Change], str]] = {"patch": _patch, "commit": _commit, "pr": _pr}


def deliver_change(mode: str, root: Path, change: Change) -> str:
    """``change`` delivered through git by the built-in mode ``mode`` (patch, commit or pr), your
    checkout untouched: one line for the terminal, "NOT written: …" where it could not be."""
    try:
        return _GIT_MODES[mode](root, change)
    except NothingToWrite as exc:
        return f"nothing to write: {exc.message}"
    except WritebackError as exc:
        return f"NOT written: {exc.render()}"


def git_mode(mode: str) -> bool:
    """Whether ``mode`` delivers through git (a patch, a commit or a pull request)."""
    return mode in _GIT_MODES


def preflight(mode: str, root: Path, env: Mapping[str, str] | None = None) -> None:
    """Refuse, before anything is tuned, a built-in mode that could not deliver: a git mode outside a
    git repository, ``pr`` without a GitHub token. A WritebackError saying what to do."""
    if mode not in _GIT_MODES:
        return
    if git.output(root, "rev-parse", "--show-toplevel") is None:
        raise WritebackError(f"--ktune-write={mode} delivers through git, but {root} is not in a git repository",
                             hint="run inside a clone of the repository, or use --ktune-write=file")
    if mode == "pr" and not (os.environ if env is None else env).get("GITHUB_TOKEN"):
        raise WritebackError("--ktune-write=pr opens a pull request with GITHUB_TOKEN, which is not set",
                             hint="set GITHUB_TOKEN (in a workflow: `env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}`), "
                                  "or use --ktune-write=commit or patch")


def builtin_write_back(mode: str) -> WriteBack | None:
    """The built-in write-back mode called ``mode``; None for a mode it does not know."""
    return _BUILTIN.get(mode)


def unknown(mode: str) -> KtuneError:
    return KtuneError(f"unknown write-back mode {mode!r}",
                      hint=f"use one of {', '.join(WRITE_MODES)}, or a mode a plugin supplies through the "
                           "pytest_ktune_write_back hook")
