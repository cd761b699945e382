#!/usr/bin/env bash
# The second device call of session 10: the Triton backend on the GPU (issue 25: its tests, the example's
# Triton cases gated, a tune, Liger-Kernel's RMSNorm tuned against its own heuristic, the call's cost), the
# production call's profile after the host-work cuts (issue 32), and every gpu test but the sanitizer's
# (the launcher A/B test of issue 24 among them). The steps are those of benchmarks/h200_triton.sh and h200_s10_call.sh, in one call; everything
# ends in $OUT/all.tgz (the device returns at most 8 files). Each step has a time limit (seconds).
# Usage: OUT=DIR bash benchmarks/h200_s10b.sh   (the wheels in .whl/, liger-kernel's among them)
set -uo pipefail
# shellcheck disable=SC2034  # read by benchmarks/_device.sh's step
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
unset TRITON_INTERPRET
step tests_triton 75 python3 -m pytest -p no:cacheprovider -q -rs tests/contract/test_triton_contract.py \
    tests/unit/test_triton.py tests/plugin/test_triton.py
step gate_triton 60 python3 benchmarks/gate_cost.py cost --backend triton -k triton_ --runs 2 --label triton \
    --out "$OUT/gate_triton.json"
step tune_triton_rmsnorm 40 python3 -m pytest_ktune.cli tune example_project triton_rmsnorm --backend triton \
    --key T=1024 --key dtype=float16 --trials 24 --no-write
step liger 90 python3 benchmarks/triton_liger.py --trials 8 --out "$OUT/triton_liger.json"
step triton_call 30 python3 benchmarks/triton_call.py --calls 2000 --repeats 5 --out "$OUT/triton_call.json"
step tests_gpu 150 python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests \
    --ignore=tests/agent/test_sanitizer_gpu.py
step profile_call 40 python3 benchmarks/profile_call.py --calls 2000 --out "$OUT"
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz -- * && find . -type f ! -name all.tgz -delete)
