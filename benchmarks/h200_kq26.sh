#!/usr/bin/env bash
# One device call for issue 26, steps 1 and 2: RMSNorm's richer template (ROWS, CACHE, REDUCE) checked on
# CUDA, tuned on this GPU, and timed against torch eager, torch.compile and Liger-Kernel with the launch
# floor; then conv2d's baselines recorded again and conv2d tuned. Each step has a time limit (seconds,
# after its name; 385 in all); what a stopped step wrote stays. A tune writes each key as soon as it is
# tuned, so a cut tune keeps the keys it finished.
# $OUT gets at most 8 files: gpu.txt, one log per step, ktune-params-h200-kq26.json (the committed file
# with the new rmsnorm and conv2d records: commit it as example_project/ktune-params.json) and
# kq26.tar.gz (the bench's JSON and markdown, conv2d's JUnit and benchmark JSON, the tunes' reports).
# Usage: OUT=DIR bash benchmarks/h200_kq26.sh   (the wheels in .whl/, Liger-Kernel's among them)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
scratch kq26  # $more, $ek (/tmp/kq26-*); keep writes $OUT/ktune-params-h200-kq26.json

# RMSNorm on CUDA: the target's correctness items; every class of configuration against the reference
# and the recorded configurations bit for bit against the kernel before ROWS, CACHE and REDUCE.
step rmsnorm_correct 75 bash -c "python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda $ek \
    -k 'rmsnorm and correct and not fused and not triton' -q -rs && python3 -m pytest -p no:cacheprovider -q -rs \
    tests/unit/test_example_rmsnorm.py -k cuda"
# RMSNorm tuned on its 11 CUDA keys: at most 8 s of search a key, then its A/B against the record.
step rmsnorm_tune 145 python3 -m pytest_ktune.cli tune rmsnorm --root "$ek" --backend cuda --trials 40 \
    --timeout 8 --seed 1 --write file
keep
# The table: tuned (the new records) against the default, torch eager, torch.compile and Liger, and the
# floor on the small cases; fused add + RMSNorm and the two GLUs for their Liger columns.
step bench_kernels 100 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
    --targets rmsnorm,fused_add_rmsnorm,silu_and_mul,gelu_tanh_and_mul --budget-s 85 --compile-budget-s 40 \
    --out "$more/bench_kernels-cuda.json"
# conv2d: baselines of what is recorded, on this machine's identity; a tune of its six keys; the gate on it.
step conv2d 70 bash -c "python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda $ek -k conv2d \
    --ktune-update-baseline -q && python3 -m pytest_ktune.cli tune conv2d --root $ek --backend cuda \
    --trials 30 --timeout 5 --seed 1 --write file"
keep
step conv2d_gate 25 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda "$ek" -k conv2d -q \
    --ktune-junit "$more/conv2d_junit.xml" --ktune-benchmark-json "$more/conv2d_bench.json"
cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
tar -czf "$OUT/kq26.tar.gz" -C "$more" .
ls "$OUT"
