#!/usr/bin/env bash
# One device call for the evidence of the merged work (issues 14-18) on an NVIDIA GPU with no network:
# the production-call benchmark, every gpu test, the whole example's gate once (conv2d with it), and the
# agent's templates under compute-sanitizer, in that order (most wanted first). Each step has a time limit
# (seconds, after the name) so that the call fits the device's; what a stopped step wrote stays in $OUT.
# Usage: OUT=DIR bash benchmarks/h200_merged.sh   (the wheels in .whl/, as for h200_evidence.sh)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
if [ "${STEPS:-all}" = all ]; then
    step production_call 75 python3 benchmarks/production_call.py --calls 2000 --repeats 5 --out "$OUT"
    step tests_gpu 120 python3 -m pytest -p no:cacheprovider tests -m gpu -q -rs
    rm -rf /tmp/eg && cp -r example_project /tmp/eg
    step example_gate 80 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda /tmp/eg -q -rs \
        --ktune-junit "$OUT/example_junit.xml"
    step sanitize_templates 70 python3 benchmarks/sanitize_templates.py --backend cuda --timeout 30 --out "$OUT/sanitizer"
else  # STEPS=rest: where the production call lost its time, then the gpu tests, the torch ones first
    step profile_call 25 python3 benchmarks/profile_call.py --calls 5000 --out "$OUT/profile_call.md"
    step tests_gpu 95 python3 -m pytest -p no:cacheprovider -m gpu -v -rs tests/contract/test_cuda_torch.py \
        tests/agent/test_sanitizer_gpu.py tests/contract tests/plugin/test_isolation_cuda.py tests
fi
