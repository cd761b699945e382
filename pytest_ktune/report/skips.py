"""The ktune items a run skipped, said in one line with their reasons: without ``-rs`` pytest shows
only an ``s`` per item, and a run on a machine without a GPU skips most of a project's items."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pytest_ktune.report.results import ItemOutcome

MAX_REASONS = 4  # the most common reasons are named; the others are counted
REASON_WIDTH = 90  # a reason longer than this is cut, with "…"


def _reason(o: ItemOutcome) -> str:
    """The skip's reason, without the target's name where it starts with it (so that one reason
    of many targets counts once), on one line."""
    text = " ".join(o.message.split()) or "no reason given"
    if text.startswith(f"{o.name} "):
        text = text[len(o.name) + 1:]
    return text if len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 1] + "…"


def skip_line(outcomes: Sequence[ItemOutcome]) -> str | None:
    """``108 of 184 ktune items skipped: 96 case declared for cuda only, not opencl; 12 has no opencl
    source (...)`` with the targets of each reason where few; None when nothing was skipped."""
    skipped = [o for o in outcomes if o.outcome == "skipped"]
    if not skipped:
        return None
    counts = Counter(_reason(o) for o in skipped)
    targets: dict[str, set[str]] = {}
    for o in skipped:
        targets.setdefault(_reason(o), set()).add(o.name)
    ordered = sorted(counts.items(), key=lambda rn: (-rn[1], rn[0]))  # the commonest first, ties by text
    parts = []
    for reason, n in ordered[:MAX_REASONS]:
        names = sorted(targets[reason])
        which = f" ({', '.join(names)})" if len(names) <= 3 else f" ({len(names)} targets)"
        parts.append(f"{n} {reason}{which}")
    rest = sum(n for _, n in ordered[MAX_REASONS:])
    if rest:
        parts.append(f"{rest} for {len(counts) - MAX_REASONS} other reason(s)")
    return (f"{len(skipped)} of {len(outcomes)} ktune items skipped (pytest -rs lists each): "
            + "; ".join(parts))
