#!/usr/bin/env bash
# The default alone (strategy ktune), 11 seeds, one process, on the goal's union and the held-out files
# (issue 30, sixth round), into OUT: the hub's twelve files (OUT/<kernel>-<GPU>/), the project's 25
# landscapes with and without priors (OUT/landscapes[-<root>][-no-priors]/, each on the project copy
# issue30c ran it on), and the three held-out PyPI files (OUT/heldout/<kernel>-<GPU>/). Then each row
# compared, field for field, with the earlier runs (issue30c's and issue30d's).
# Usage, from the repository root: bash benchmarks/results/bench-search-hub/issue30f/scripts/default_runs.sh OUT
set -uo pipefail
out=$1
R=benchmarks/results/bench-search-hub; C=$R/issue30c; D=$R/issue30d
run() { python3 -m pytest_ktune.cli bench-search "$@" --seeds 11 --jobs 1 --strategies ktune; }
for f in benchmarks/results/kernel-tuner-hub/*_milo/*.json.gz; do
    k=$(basename "$(dirname "$f")" _milo); g=$(basename "$f" .json.gz)
    mkdir -p "$out/$k-$g"; run "$f" --out "$out/$k-$g" > "$out/$k-$g/log.txt" 2>&1 || echo "failed: $f"
done
for pair in landscapes:example_project landscapes-rmsnorm_v1:tests/data/rmsnorm_v1 \
            landscapes-fused_add_rmsnorm_v1:tests/data/fused_add_rmsnorm_v1 landscapes-glu_v1:tests/data/glu_v1; do
    name=${pair%%:*}; root=${pair#*:}
    mapfile -t files < <(python3 -c "import json,sys; [print(l['file']) for l in json.load(open(sys.argv[1]))['landscapes']]" \
        "$C/$name/bench-search.json")
    for priors in "" "-no-priors"; do
        o=$out/$name$priors; mkdir -p "$o"
        run "${files[@]}" --root "$root" ${priors:+--no-priors} --out "$o" > "$o/log.txt" 2>&1 || echo "failed: $o"
    done
done
for f in benchmarks/results/kernel-tuner-pypi/vector_add/A4000.json.gz benchmarks/results/kernel-tuner-pypi/vector_add/RTX4000Ada.json.gz \
         benchmarks/results/kernel-tuner-pypi/convolution/RTX2080Ti.json.gz; do
    k=$(basename "$(dirname "$f")"); g=$(basename "$f" .json.gz)
    mkdir -p "$out/heldout/$k-$g"; run "$f" --out "$out/heldout/$k-$g" > "$out/heldout/$k-$g/log.txt" 2>&1 || echo "failed: $f"
done
python3 $R/issue30e/scripts/same_rows.py "$out" "$C"
python3 $R/issue30e/scripts/same_rows.py "$out/heldout" "$D/heldout"
