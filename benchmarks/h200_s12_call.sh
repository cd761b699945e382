#!/usr/bin/env bash
# One device call (session 12, issues 32 and 25): the gpu tests of the production call (CuPy arrays, torch
# tensors, CUDA graphs, torch.compile) and of Triton's direct launches first, then where one CUDA call goes
# (profile_call), the host cost side by side (production_call: ktune on CuPy arrays, torch tensors and through
# the eager op, the raw CuPy launch, torch eager, Liger, the compiled two-op module), and a Triton target's call
# against a plain kernel[grid](...) and @triton.autotune's cached call (triton_call). Each step has a time
# limit (seconds, after its name; 400 in all); what a stopped step wrote stays in $OUT.
# Usage: OUT=DIR bash benchmarks/h200_s12_call.sh   (the wheels in .whl/, Liger-Kernel's among them)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
unset TRITON_INTERPRET
step tests_call_gpu 160 python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/contract/test_cuda_torch.py \
    tests/contract/test_cuda_contract.py tests/contract/test_cuda_fixture.py tests/unit/test_triton_direct.py \
    tests/contract/test_triton_contract.py
step profile_call 40 python3 benchmarks/profile_call.py --calls 2000 --out "$OUT"
step production_call 150 python3 benchmarks/production_call.py --calls 1000 --repeats 3 --out "$OUT"
step triton_call 50 python3 benchmarks/triton_call.py --calls 2000 --repeats 5 --out "$OUT/triton_call.json"
ls "$OUT"
