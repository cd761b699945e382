#!/usr/bin/env bash
# The triton backend on the H200 (issue 25), one device call of at most 330 s: the Triton tests (the gpu-marked
# contract class and the direct launches' output on the GPU, the interpreter's tests beside them), the example's
# Triton cases gated cold and warm (the warm run is what they add to a gate: goal <= 15 s), a tune of the Triton
# RMSNorm, Liger-Kernel's own Triton RMSNorm tuned against Liger's heuristic, and the production call's host cost
# beside a plain kernel[grid](...) call, @triton.autotune's cached call and ktune's call through the JIT (goals:
# <= autotune's, <= plain + 5 µs). Each step has a time limit (seconds, after its name); what a stopped
# step wrote stays in $OUT.
# Usage: OUT=DIR bash benchmarks/h200_triton.sh   (the wheels in .whl/, liger-kernel's among them)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
unset TRITON_INTERPRET
step tests_triton 90 python3 -m pytest -p no:cacheprovider -q -rs tests/contract/test_triton_contract.py \
    tests/unit/test_triton.py tests/unit/test_triton_direct.py tests/plugin/test_triton.py
step gate_triton 60 python3 benchmarks/gate_cost.py cost --backend triton -k triton_ --runs 2 --label triton \
    --out "$OUT/gate_triton.json"
step tune_triton_rmsnorm 40 python3 -m pytest_ktune.cli tune example_project triton_rmsnorm --backend triton \
    --key T=1024 --key dtype=float16 --trials 24 --no-write
step liger 90 python3 benchmarks/triton_liger.py --trials 8 --out "$OUT/triton_liger.json"
step call_cost 45 python3 benchmarks/triton_call.py --calls 2000 --repeats 5 --out "$OUT/triton_call.json"
