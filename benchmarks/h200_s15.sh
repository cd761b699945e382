#!/usr/bin/env bash
# Session 15's device calls. Phase a (issue 26: RMSNorm's CUDA-only PREFETCH, the held vectors' weights loaded
# with the row before the reduction, as fused add + RMSNorm does; issue 32: the call's host time part by part):
#   rms_correct   the target's CUDA correctness items and its unit tests on CUDA (every class of configuration);
#   breakdown     benchmarks/call_breakdown.py;
#   landscapes    every feasible configuration of RMSNorm at T=1, 64 x H=4096 and T=16384 x H=8192 fp16;
#   rms_tune      RMSNorm tuned on its CUDA keys (at most 40 trials or 8 s of search a key), written to the file.
# Phase b (after the tuned records are merged into example_project/ktune-params.json):
#   rms_gate      RMSNorm's CUDA items (correctness and the perf gate) against the baselines the tune recorded;
#   bench         benchmarks/bench_kernels.py for rmsnorm (tuned vs default, torch eager, torch.compile, Liger);
#   call          benchmarks/production_call.py and call_breakdown.py again, and the call layer's gpu tests.
# Phase c (the call's two-dimensional grid on the straight path; where the tuned norms and GLUs still trail):
#   call          benchmarks/production_call.py and call_breakdown.py;
#   landscapes    every feasible configuration at the keys where the last benches left a norm or a GLU behind the
#                 best alternative: RMSNorm T=1024 x H=4096 fp32, fused add + RMSNorm T=4096 x H=8192 bf16 and
#                 T=16384 x H=4096 fp16, SiLU-and-mul T=16 x I=14336 fp16.
# Phase d (the landscapes of phase c put SiLU-and-mul's T=16 optimum at 2.10 µs, below torch.compile's 2.23, where
# the record of a shorter tune is 2.47):
#   glu_tune      SiLU- and GELU(tanh)-and-mul tuned again on their CUDA keys, 60 trials or 10 s a key;
#   bench         benchmarks/bench_kernels.py for both (tuned vs default, torch eager, torch.compile, Liger);
#   call          the call again (Python scalars converted once a value on the straight path, RMSNorm's example
#                 passing them), without the compiled module.
# Phase e: the gpu tests of the call layer and of the two changed templates on the final tree.
# Each step has a time limit (seconds, after its name). $OUT gets at most 8 files: gpu.txt, the step logs, the
# params file and one tarball of the rest.
# Usage: OUT=DIR bash benchmarks/h200_s15.sh a|b|c|d|e   (the wheels in .whl/, Liger-Kernel's among them)
set -uo pipefail
phase=${1:-}
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
session s15 "$phase" a b c d e  # $more, $ek (/tmp/s15-*); keep writes $OUT/ktune-params-h200-s15$phase.json
if [ "$phase" = a ]; then
    step rms_correct 110 bash -c "python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda $ek \
        -k 'rmsnorm and correct and not fused and not triton' -q -rs; python3 -m pytest -p no:cacheprovider -q -rs \
        tests/unit/test_example_rmsnorm.py -k cuda"
    step breakdown 100 env TORCH_LOGS=output_code python3 benchmarks/call_breakdown.py --calls 2000 --repeats 7 \
        --compiled --out "$more"
    for key in "1 4096" "64 4096" "16384 8192"; do
        landscape 70 $key
    done
elif [ "$phase" = e ]; then
    step tests 200 bash -c "python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/contract/test_cuda_torch.py \
        tests/contract/test_cuda_contract.py tests/unit/test_production_call.py tests/unit/test_fastpath.py; \
        python3 -m pytest -p no:cacheprovider -q -rs tests/unit/test_example_rmsnorm.py \
        tests/unit/test_example_silu_gelu.py tests/unit/test_call_fake_cuda.py -k 'cuda'"
elif [ "$phase" = d ]; then
    step glu_tune 200 bash -c "python3 -m pytest_ktune.cli tune silu_and_mul --root $ek --backend cuda --trials 60 \
        --timeout 10 --seed 2 --write file; python3 -m pytest_ktune.cli tune gelu_tanh_and_mul --root $ek \
        --backend cuda --trials 60 --timeout 10 --seed 2 --write file"
    keep
    step bench 160 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets silu_and_mul,gelu_tanh_and_mul --budget-s 130 --compile-budget-s 60 \
        --out "$more/bench_kernels-cuda.json"
    cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
    step call 100 bash -c "python3 benchmarks/production_call.py --calls 1000 --repeats 3 --no-compile --out $more; \
        python3 benchmarks/call_breakdown.py --calls 2000 --repeats 5 --out $more"
else
    step rms_gate 60 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda "$ek" -rs \
        -k "rmsnorm and not fused and not triton" -q
    step bench 130 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets rmsnorm --budget-s 100 --compile-budget-s 45 --out "$more/bench_kernels-cuda.json"
    step call 200 bash -c "python3 benchmarks/production_call.py --calls 1000 --repeats 3 --out $more; \
        python3 benchmarks/call_breakdown.py --calls 2000 --repeats 7 --compiled --out $more/after; \
        python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/contract/test_cuda_torch.py \
        tests/contract/test_cuda_contract.py tests/unit/test_production_call.py tests/unit/test_fastpath.py"
fi
tar -czf "$OUT/s15$phase.tar.gz" -C "$more" .
ls "$OUT"
