"""Whether the default's rows of new bench-search runs equal those of earlier runs in every field but the
wall seconds (issue 30, fifth round): per-seed trials to 3 % and 5 %, quartiles, hit rates, the fraction
of the optimum after 10 and 20 trials, the final result. Run from the repository root:

    python3 benchmarks/results/bench-search-hub/issue30e/scripts/same_rows.py NEW_FOLDER OLD_FOLDER

Each ``NEW_FOLDER/<name>/bench-search.json`` is compared with ``OLD_FOLDER/<name>/bench-search.json``,
landscape by landscape (the ``ktune`` strategy's row)."""

import json
import sys
from pathlib import Path

new_root, old_root = Path(sys.argv[1]), Path(sys.argv[2])
same = differ = 0
for path in sorted(new_root.glob("*/bench-search.json")):
    old_path = old_root / path.parent.name / "bench-search.json"
    if not old_path.exists():
        print(f"{path.parent.name}: no earlier run")
        continue
    old = {land["file"]: land for land in json.loads(old_path.read_text())["landscapes"]}
    for land in json.loads(path.read_text())["landscapes"]:
        a = next(s for s in land["strategies"] if s["strategy"] == "ktune")
        b = next(s for s in old[land["file"]]["strategies"] if s["strategy"] == "ktune")
        fields = [k for k in a if k != "wall_s" and a.get(k) != b.get(k)]
        if fields:
            differ += 1
            print(f"{path.parent.name} {land['file']}: different in {', '.join(fields)}")
        else:
            same += 1
print(f"{same} landscape(s) the same in every field but the wall seconds, {differ} different")
