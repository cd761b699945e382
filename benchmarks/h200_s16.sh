#!/usr/bin/env bash
# Session 16's device calls. Phase a (issue 32: where a compiled module's time goes around the ktune ops;
# issue 26: the small-T GLU keys, whose last tunes spent their 10 s on compiles):
#   probe     benchmarks/call_breakdown.py --compiled-only: the two-op module eager and compiled, beside the
#             torch-ops module, stub custom ops (the same schemas, implementations that only allocate), the ktune
#             ops with the time inside the production calls measured, and what a compiled forward calls that an
#             eager one does not;
#   call      benchmarks/production_call.py (without the compiled module) and call_breakdown.py, after the
#             dispatch's last-signature compare and the torch views read from the signature;
#   glu_tune  SiLU-and-mul at T=16 and GELU(tanh)-and-mul at T=4 fp32, tuned again with 40 s of search a key.
# Phase b (a's probe put the ktune calls at the same time inside a compiled forward as in an eager one, and the
# rest of a compiled forward ~25 µs above the stub ops'):
#   probe     call_breakdown.py --compiled-only again, with each op's entry and return marked (before the first
#             op, each op, between them, after), the device guard alone, each target alone;
#   call      production_call.py (15 rounds: the last host's rounds spread by +-2 µs) and the call layer's gpu tests;
#   bench     bench_kernels.py for SiLU- and GELU-and-mul with a's small-T records merged.
# Phase c (issue 26: the GLU templates' shared indexing, glu.cuh, with the row's width a compile-time constant and
# 32-bit indices where they fit):
#   glu_correct  the GLU unit tests on CUDA (every class of configuration against the reference; the recorded
#                configurations bit for bit against the kernels of tests/data/glu_v1);
#   glu_tune     SiLU-and-mul at T=16, 256 and GELU(tanh)-and-mul at T=4, 32 tuned on the new templates (40
#                trials or 15 s a key);
#   bench        bench_kernels.py for both.
# Phase d (the final tree):
#   tests   the call layer's gpu tests, the RMSNorm and GLU unit tests on CUDA, the fake-CuPy call tests;
#   gate    the example's GLU items on CUDA (correctness and the perf gate) on the merged records;
#   call    production_call.py (15 rounds, without the compiled module);
#   ncu     Nsight Compute of SiLU-and-mul T=256 x I=14336 fp16: ours, Liger-Kernel's and torch.compile's
#           (benchmarks/ncu_cases.py, the sections of h200_s14_ncu.sh).
# Phase e (what d's profile left open, and a search miss of session 15):
#   inductor   whether Inductor's kernels of SiLU-and-mul (T=256) launch with programmatic dependent launch,
#              which would let back-to-back replays overlap (the bench's graph) where one profiled launch cannot:
#              its config and the generated code's launch;
#   rms_tune   RMSNorm at T=1024 x H=4096 fp32 tuned again (60 trials or 40 s), whose landscape's optimum
#              (10.01 µs) sat at Liger's 9.80 where the record trailed at 0.89x;
#   bench      bench_kernels.py for rmsnorm;
#   tests      the gpu tests of d again, on the final tree (the dispatch's compare of the whole signature).
# Phase f: the README's main command on the final tree, `pytest --ktune example_project` (every target, CUDA
# and Triton, correctness and the perf gate on the merged records).
# Each step has a time limit (seconds, after its name). $OUT gets at most 8 files: gpu.txt, the step logs, the
# params file and one tarball of the rest.
# Usage: OUT=DIR bash benchmarks/h200_s16.sh a|b|c|d|e|f   (the wheels in .whl/, Liger-Kernel's among them)
set -uo pipefail
phase=${1:-}
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
session s16 "$phase" a b c d e f  # $more, $ek (/tmp/s16-*); keep writes $OUT/ktune-params-h200-s16$phase.json
if [ "$phase" = a ]; then
    step probe 200 python3 benchmarks/call_breakdown.py --calls 2000 --repeats 5 --compiled-only --out "$more"
    step call 150 bash -c "python3 benchmarks/production_call.py --calls 1000 --repeats 3 --no-compile --out $more; \
        python3 benchmarks/call_breakdown.py --calls 2000 --repeats 5 --out $more/parts"
    step glu_tune 230 bash -c "python3 -m pytest_ktune.cli tune silu_and_mul --root $ek --backend cuda --key T=16 \
        --trials 40 --tune-timeout 40 --seed 3 --write file; python3 -m pytest_ktune.cli tune gelu_tanh_and_mul \
        --root $ek --backend cuda --key T=4 --key dtype=float32 --trials 40 --tune-timeout 40 --seed 3 --write file"
    keep
    cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
elif [ "$phase" = d ]; then
    step tests 200 bash -c "python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/contract/test_cuda_torch.py \
        tests/contract/test_cuda_contract.py tests/unit/test_production_call.py tests/unit/test_fastpath.py; \
        python3 -m pytest -p no:cacheprovider -q -rs tests/unit/test_example_rmsnorm.py \
        tests/unit/test_example_silu_gelu.py tests/unit/test_call_fake_cuda.py -k 'cuda'"
    step gate 100 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda "$ek" -rs -q \
        -k "(silu or gelu) and not triton"
    step call 120 python3 benchmarks/production_call.py --calls 1000 --repeats 15 --no-compile --out "$more"
    mkdir -p "$more/ncu"
    case=silu_and_mul-T256-I14336-float16
    for impl in ours liger compile; do
        ncu_case "$case" "$impl" "$more/ncu"
        echo "$case $impl: exit $?"
    done
    python3 benchmarks/ncu_cases.py table "$more"/ncu/*.csv --out "$more/ncu.md"
elif [ "$phase" = f ]; then
    step example 170 python3 -m pytest -p no:cacheprovider --ktune "$ek" -q -rs
elif [ "$phase" = e ]; then
    step inductor 90 python3 benchmarks/inductor_pdl.py
    step rms_tune 90 python3 -m pytest_ktune.cli tune rmsnorm --root "$ek" --backend cuda --key T=1024 \
        --key dtype=float32 --trials 60 --tune-timeout 40 --seed 5 --write file
    keep
    step bench 170 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets rmsnorm --budget-s 120 --compile-budget-s 45 --out "$more/bench_kernels-cuda.json"
    step tests 150 bash -c "python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/contract/test_cuda_torch.py \
        tests/contract/test_cuda_contract.py tests/unit/test_production_call.py tests/unit/test_fastpath.py; \
        python3 -m pytest -p no:cacheprovider -q -rs tests/unit/test_call_fake_cuda.py -k 'cuda'"
elif [ "$phase" = c ]; then
    step glu_correct 90 python3 -m pytest -p no:cacheprovider -q -rs tests/unit/test_example_silu_gelu.py -k cuda
    step glu_tune 250 bash -c "for k in 'silu_and_mul T=16' 'silu_and_mul T=256' 'gelu_tanh_and_mul T=4' \
        'gelu_tanh_and_mul T=32'; do set -- \$k; python3 -m pytest_ktune.cli tune \$1 --root $ek --backend cuda \
        --key \$2 --trials 40 --tune-timeout 15 --seed 4 --write file; done"
    keep
    cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
    step bench 170 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets silu_and_mul,gelu_tanh_and_mul --budget-s 130 --compile-budget-s 60 \
        --out "$more/bench_kernels-cuda.json"
else
    step probe 200 python3 benchmarks/call_breakdown.py --calls 2000 --repeats 5 --compiled-only --out "$more"
    step call 200 bash -c "python3 benchmarks/production_call.py --calls 1000 --repeats 15 --no-compile --out $more; \
        python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/contract/test_cuda_torch.py \
        tests/contract/test_cuda_contract.py tests/unit/test_production_call.py tests/unit/test_fastpath.py \
        tests/unit/test_call_fake_cuda.py"
    step bench 170 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets silu_and_mul,gelu_tanh_and_mul --budget-s 130 --compile-budget-s 60 \
        --out "$more/bench_kernels-cuda.json"
fi
tar -czf "$OUT/s16$phase.tar.gz" -C "$more" .
ls "$OUT"
