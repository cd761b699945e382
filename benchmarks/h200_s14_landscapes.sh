#!/usr/bin/env bash
# Issue 26, step 4, continued: whole landscapes of the richer norm templates on the shapes where ncu shows the tuned
# kernel behind (benchmarks/results/h200-2026-12-03-s14-ncu): RMSNorm at T=1 and T=64 x H=4096 and T=16384 x
# H=8192, fp16, and fused add + RMSNorm at T=1 x H=4096 fp16, every feasible configuration timed (ktune record),
# to see whether the space holds a configuration that closes the gap the 40-trial tunes left.
# Each step has a time limit (seconds, after its name).
# Usage: OUT=DIR bash benchmarks/h200_s14_landscapes.sh   (the wheels in .whl/)
set -uo pipefail
TAIL=3
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
unset TRITON_INTERPRET
mkdir -p "$OUT/landscapes"
rec() {  # NAME SECONDS TARGET KEY...
    local name=$1 limit=$2 target=$3; shift 3
    local keys=()
    for k in "$@"; do keys+=(--key "$k"); done
    step "$name" "$limit" python3 -m pytest_ktune.cli record "$target" --root example_project --backend cuda \
        "${keys[@]}" --out "$OUT/landscapes/$name.json.gz"
}
rec rmsnorm-T1-H4096-float16 110 rmsnorm T=1 H=4096 dtype=float16
rec rmsnorm-T64-H4096-float16 150 rmsnorm T=64 H=4096 dtype=float16
rec rmsnorm-T16384-H8192-float16 170 rmsnorm T=16384 H=8192 dtype=float16
rec fused_add_rmsnorm-T1-H4096-float16 110 fused_add_rmsnorm T=1 H=4096 dtype=float16
ls -l "$OUT/landscapes"
