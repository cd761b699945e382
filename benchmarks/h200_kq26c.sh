#!/usr/bin/env bash
# One device call for issue 26, step 2's second half (fused add + RMSNorm): its richer template (ROWS rows a
# block, a warp or less a row, CACHE the row x + residual in registers, PREFETCH its weights before the
# reduction, REDUCE one-barrier reductions; ROWS=1 CACHE=0 REDUCE=0 PREFETCH=0 is the old kernel) checked on
# CUDA, tuned on this GPU, and timed with RMSNorm against torch eager, torch.compile and Liger-Kernel with the
# launch floor. Each step has a time limit (seconds, after its name; 380 in all); what a stopped step wrote
# stays. A tune writes each key as soon as it is tuned, so a cut tune keeps the keys it finished.
# $OUT gets at most 6 files: gpu.txt, one log per step, ktune-params-h200-kq26c.json (the committed file with
# the new fused_add_rmsnorm records: merge it into example_project/ktune-params.json with
# benchmarks/merge_params.py) and kq26c.tar.gz (the bench's JSON and markdown, the tune's reports).
# Usage: OUT=DIR bash benchmarks/h200_kq26c.sh   (the wheels in .whl/, Liger-Kernel's among them)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
scratch kq26c  # $more, $ek (/tmp/kq26c-*); keep writes $OUT/ktune-params-h200-kq26c.json

# On CUDA: the target's 9 correctness items (the recorded parameters, completed with the old kernel's values
# of ROWS, CACHE, REDUCE and PREFETCH); every class of configuration against the reference at odd and
# declared shapes and in bfloat16, both outputs inside guards; the held row bit for bit against the row read
# back; the recorded configurations bit for bit against the kernel before (tests/data/fused_add_rmsnorm_v1).
step fused_correct 120 bash -c "python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda $ek \
    -k 'fused_add_rmsnorm and correct' -q -rs; python3 -m pytest -p no:cacheprovider -q -rs \
    tests/unit/test_example_fused_add_rmsnorm.py -k cuda"
# Tuned on its 9 CUDA keys: at most 40 trials or 8 s of search a key, then its A/B against the record.
step fused_tune 110 python3 -m pytest_ktune.cli tune fused_add_rmsnorm --root "$ek" --backend cuda --trials 40 \
    --timeout 8 --seed 1 --write file
keep
# The table: tuned (the new fused records, RMSNorm's of session 10) against the default, torch eager,
# torch.compile and Liger, and the floor on the small cases: of both targets' 20 CUDA cases, those begun within
# 125 s (about 7 s a case; the JSON names any left out).
step bench_kernels 150 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
    --targets fused_add_rmsnorm,rmsnorm --budget-s 125 --compile-budget-s 55 \
    --out "$more/bench_kernels-cuda.json"
cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
tar -czf "$OUT/kq26c.tar.gz" -C "$more" .
ls "$OUT"
