#!/usr/bin/env bash
# Issue 25 and 26's device call (written in session 13, run in session 14): the example's baselines that name old sources re-recorded
# (the GLUs' and fused add + RMSNorm's richer templates, tuned in session 12) and the Triton targets' first
# H200 baselines, recorded by one cuda run that now gates its Triton targets in a second measurement process;
# then what the Triton cases add to the warm gate: the whole example's cuda gate with them and without them
# (their modules left out of the copy), each cold once and warm twice, on fresh copies of the project as re-recorded. The second
# backend's gpu tests first. Each step has a time limit (seconds, after its name; 520 in all).
# Usage: OUT=DIR bash benchmarks/h200_s14_gate.sh   (the wheels in .whl/)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
unset TRITON_INTERPRET
step tests_gpu 90 python3 -m pytest -p no:cacheprovider -q -rs tests/plugin/test_second_backend.py \
    tests/plugin/test_triton.py
step baselines 100 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend cuda example_project -q -rs \
    --ktune-update-baseline -k "silu_and_mul or gelu_tanh_and_mul or fused_add_rmsnorm or triton_"
cp example_project/ktune-params.json "$OUT/ktune-params.json"
step gate_with_triton 180 python3 benchmarks/gate_cost.py cost --backend cuda --runs 3 --label with-triton \
    --out "$OUT/gate_with_triton.json"
step gate_without_triton 180 python3 benchmarks/gate_cost.py cost --backend cuda --runs 3 \
    --without "kernels/triton_*.py" \
    --label without-triton --out "$OUT/gate_without_triton.json"
ls "$OUT"
