#!/usr/bin/env bash
# One short device call (session 10, issue 32): the gpu tests of the production call on CuPy arrays and torch
# tensors first (the launch straight to CuPy's function, tensors as CuPy's CIntptr on torch's raw stream, CUDA
# graph capture and torch.compile), then where one call goes on the GPU (profile_call) and the host cost side
# by side (production_call: ktune on CuPy arrays, on torch tensors and through the eager op, the raw CuPy
# launch, torch eager, Liger, and the compiled two-op module in the default mode and reduce-overhead, dynamo
# reset per row). Each step has a time limit (seconds, after its name); what a stopped step wrote stays in $OUT.
# Usage: OUT=DIR bash benchmarks/h200_s10_call.sh   (the wheels in .whl/)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
step tests_call_gpu 150 python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/contract/test_cuda_torch.py \
    tests/contract/test_cuda_contract.py tests/contract/test_cuda_fixture.py
step profile_call 40 python3 benchmarks/profile_call.py --calls 2000 --out "$OUT"
step production_call 150 python3 benchmarks/production_call.py --calls 1000 --repeats 3 --out "$OUT"
