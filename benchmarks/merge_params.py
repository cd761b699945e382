"""Merge params-file records measured on a GPU machine into the project's params file.

The GPU machine runs a copy of the project without its git history, so the baselines it records carry
no commit. Here, beside the history, each such baseline gets the newest commit whose copy of the
source has the baseline's source hash; a baseline whose source no commit holds is refused, because
the gate could not read that source back.

Run: ``python3 benchmarks/merge_params.py example_project/ktune-params.json FROM.json [FROM.json...]
[--device H200]``
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

common.add_repo_to_path()

from pytest_ktune.core import git as _git  # noqa: E402
from pytest_ktune.core.includes import source_hash  # noqa: E402
from pytest_ktune.core.store import Record, Store  # noqa: E402


def commit_for(root: Path, source_path: str, wanted: str) -> str | None:
    """The newest commit whose ``source_path`` (relative to ``root``) hashes to ``wanted``."""
    for commit in (_git.output(root, "log", "--format=%H", "--", source_path) or "").split():
        text = _git.file_at(root, commit, root / source_path)
        if text is not None and source_hash(text) == wanted:
            return commit
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("sources", type=Path, nargs="+")
    ap.add_argument("--device", default="", help="only records whose device contains this text")
    ap.add_argument("--changed-only", action="store_true",
                    help="only records that differ from the destination's (files made from copies of it)")
    ap.add_argument("--keep-commits", action="store_true",
                    help="merge as recorded, without looking commits up (a copy without git history)")
    args = ap.parse_args()
    dest = Store.load(args.dest)
    root = args.dest.resolve().parent
    updates: list[Record] = []
    for src in args.sources:
        for measured in Store.load(src).records.values():
            if args.device not in measured.device:
                continue
            old = dest.records.get(measured.ident)
            if args.changed_only and old is not None and old.to_json() == measured.to_json():
                continue
            b = measured.baseline
            if b is not None and b.commit is None and not args.keep_commits:
                commit = commit_for(root, b.source_path, b.source_hash)
                if commit is None:
                    print(f"refused: {measured.target} {dict(measured.key)}: no commit holds {b.source_path} "
                          f"with hash {b.source_hash}; commit that source first", file=sys.stderr)
                    return 1
                measured = dataclasses.replace(measured, baseline=dataclasses.replace(b, commit=commit))  # noqa: PLW2901
            updates.append(measured)
    dest.save(updates)
    print(f"merged {len(updates)} record(s) into {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
