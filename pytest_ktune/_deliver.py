"""Delivering what a tune found: nothing, the params file in place, a patch, a commit or a pull request."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ._errors import KtuneError
from ._store import Store
from ._tuner import TuneOutcome, key_label

WRITE_MODES = ("none", "file", "patch", "commit", "pr")


def _us(s: float) -> str:
    return f"{s * 1e6:,.2f}"


def change_body(outcomes: Sequence[TuneOutcome], *, device: str, copy_bandwidth: float | None,
                command: str) -> str:
    """The markdown of a commit message or pull request: a before/after table per tuned key."""
    from . import __version__

    parts = [f"pytest-ktune {__version__} tuned these kernels on **{device}**. Each winner was verified on every "
             "case against the reference, then timed interleaved (A/B) against the parameters it replaces, "
             "in the same run.", ""]
    for o in outcomes:
        if not o.changes:
            continue
        before = " ".join(f"{k}={v}" for k, v in o.current_params.items())
        after = " ".join(f"{k}={v}" for k, v in o.best_params.items())
        parts += [f"### {o.target} [{key_label(o.key)}]", "", f"`{before}` → `{after}` ({o.decision}; "
                  f"{o.timed} trials, study `{o.study}`)", "",
                  "| case | before µs | after µs | ratio | GB/s before → after | % of copy bandwidth |",
                  "| --- | ---: | ---: | ---: | --- | --- |"]
        for c in o.changes:
            gbps = pct = "-"
            if c.bytes_moved:
                gb_b, gb_a = c.bytes_moved / c.before_s / 1e9, c.bytes_moved / c.after_s / 1e9
                gbps = f"{gb_b:,.0f} → {gb_a:,.0f}"
                if copy_bandwidth:
                    pct = f"{100 * gb_b * 1e9 / copy_bandwidth:.0f}% → {100 * gb_a * 1e9 / copy_bandwidth:.0f}%"
            parts.append(f"| {c.case_id} | {_us(c.before_s)} | {_us(c.after_s)} | "
                         f"x{c.before_s / c.after_s:.3f} | {gbps} | {pct} |")
        parts.append("")
    parts += ["Reproduce with:", "", "```sh", command, "```", ""]
    return "\n".join(parts)


def deliver(mode: str, *, root: Path, params_path: Path, outcomes: Sequence[TuneOutcome], device: str,
            copy_bandwidth: float | None, command: str) -> str:
    """Apply ``mode`` to the tunes' results; returns one line for the terminal."""
    from . import _writeback as wb

    winners = [o for o in outcomes if o.changes and o.record is not None]
    if mode == "file":
        n = sum(1 for o in outcomes if o.written)
        return f"wrote {n} tuned record(s) to {params_path}" if n else "no tuned record to write"
    if not winners:
        return "nothing to write: no tuned configuration beat the parameters in use"
    if mode == "none":
        return (f"{len(winners)} tuned winner(s) NOT written (--ktune-write=none, the default): rerun with "
                "--ktune-write=file, patch, commit or pr to keep them (the studies are saved; nothing is re-timed)")
    try:
        store = Store.load(params_path)
    except KtuneError as exc:
        return f"NOT written: {exc.render()}"
    for o in winners:
        assert o.record is not None
        store.records[o.record.ident] = o.record
    try:
        rel = params_path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return f"NOT written: the params file {params_path} is outside the project root {root}"
    targets = tuple(sorted({o.target for o in winners}))
    change = wb.Change(
        files={rel: store.render()},
        title=f"ktune: tuned {', '.join(targets)} on {device}",
        body_markdown=change_body(winners, device=device, copy_bandwidth=copy_bandwidth, command=command),
        targets=targets, device=device)
    try:
        if mode == "patch":
            path = wb.write_patch(root, change, root / ".ktune" / "patches")
            return f"patch written to {path}; apply it with: git apply {path} (from the repository's top level)"
        if mode == "commit":
            branch, sha = wb.commit_branch(root, change)
            return (f"committed {sha[:12]} on the new branch {branch}; your checkout is unchanged "
                    f"(see it with: git show {branch})")
        if mode == "pr":
            pr = wb.open_pr(root, change)
            return f"{'opened' if pr.created else 'updated'} pull request #{pr.number}: {pr.url} (branch {pr.branch})"
    except wb.NothingToWrite as exc:
        return f"nothing to write: {exc.message}"
    except wb.WritebackError as exc:
        return f"NOT written: {exc.render()}"
    raise KtuneError(f"unknown write mode {mode!r}", hint=f"use one of {', '.join(WRITE_MODES)}")
