#!/usr/bin/env bash
# Session 12's second device call for issue 25 (its tests and the call's cost ran in h200_s12_call.sh): the
# example's Triton cases gated cold and warm (what they add to a warm gate: goal <= 15 s) and Liger-Kernel's
# own Triton RMSNorm tuned against Liger's heuristic on every shape of benchmarks/liger_rmsnorm.py, with the
# time those steps lacked in h200_triton.sh. Each step has a time limit (seconds, after its name; 440 in all).
# Usage: OUT=DIR bash benchmarks/h200_s12_triton.sh   (the wheels in .whl/, liger-kernel's among them)
set -uo pipefail
TAIL=6
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
unset TRITON_INTERPRET
step gate_triton 130 python3 benchmarks/gate_cost.py cost --backend triton -k triton_ --runs 2 --label triton \
    --out "$OUT/gate_triton.json"
step liger 310 python3 benchmarks/triton_liger.py --trials 8 --out "$OUT/triton_liger.json"
ls "$OUT"
