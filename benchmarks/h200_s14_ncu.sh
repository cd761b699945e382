#!/usr/bin/env bash
# Issue 26, step 4: Nsight Compute profiles of the cases where the tuned example kernel still trails the best
# alternative (benchmarks/ncu_cases.py names them): for each case, our production call and the alternatives that
# beat it, one profiled launch each after the warm-ups, with the speed-of-light, occupancy, launch and warp-state
# sections and every stall reason's cycles per issued instruction. The clocks are left alone (METHOD.md).
# Writes one CSV and one log per case and implementation under $OUT/ncu/ (packed into $OUT/ncu.tar.gz) and their
# table to $OUT/ncu.md. Each profile has a time limit of 75 s.
# Usage: OUT=DIR bash benchmarks/h200_s14_ncu.sh   (the wheels in .whl/)
set -uo pipefail
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
unset TRITON_INTERPRET
mkdir -p "$OUT/ncu"
ncu --version | tail -n 1 > "$OUT/ncu/version.txt"
python3 benchmarks/ncu_cases.py list | while read -r case impls; do
    for impl in $impls; do
        start=$(date +%s)
        ncu_case "$case" "$impl" "$OUT/ncu"
        echo "$case $impl: exit $? in $(( $(date +%s) - start )) s"
    done
done
python3 benchmarks/ncu_cases.py table "$OUT"/ncu/*.csv --out "$OUT/ncu.md" > /dev/null
tar -czf "$OUT/ncu.tar.gz" -C "$OUT" ncu && rm -rf "$OUT/ncu"
cat "$OUT/ncu.md"
