#!/usr/bin/env bash
# One device call for issue 26, step 3 (SiLU- and GELU(tanh)-and-mul): their richer templates (ROWS rows a
# block on a 2-D grid, FAST special-function paths, a persistent GRID; ROWS=0 FAST=0 GRID=0 is the old
# kernel) checked on CUDA, tuned on this GPU, and timed against torch eager, torch.compile and Liger-Kernel
# with the launch floor. Each step has a time limit (seconds, after its name; 340 in all); what a stopped
# step wrote stays. A tune writes each key as soon as it is tuned, so a cut tune keeps the keys it finished.
# $OUT gets at most 7 files: gpu.txt, one log per step, ktune-params-h200-kq26d.json (the committed file
# with the new silu_and_mul and gelu_tanh_and_mul records: merge it into example_project/ktune-params.json
# with benchmarks/merge_params.py) and kq26d.tar.gz (the bench's JSON and markdown, the tunes' reports).
# Usage: OUT=DIR bash benchmarks/h200_kq26d.sh   (the wheels in .whl/, Liger-Kernel's among them)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
scratch kq26d  # $more, $ek (/tmp/kq26d-*); keep writes $OUT/ktune-params-h200-kq26d.json

# On CUDA: the two targets' correctness items (the recorded parameters, completed with the old kernel's
# values of ROWS, FAST and GRID); every class of configuration against the reference at odd and declared
# shapes, the fast paths at the edge values, and the recorded configurations bit for bit against the
# kernels before ROWS, FAST and GRID (tests/data/glu_v1).
step glu_correct 80 bash -c "python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda $ek \
    -k '(silu_and_mul or gelu_tanh_and_mul) and correct and not triton' -q -rs; python3 -m pytest \
    -p no:cacheprovider -q -rs tests/unit/test_example_silu_gelu.py -k cuda"
# Tuned on their CUDA keys (8 and 9): at most 3 s (30 trials) of search a key, then its A/B against the record.
step silu_tune 70 python3 -m pytest_ktune.cli tune silu_and_mul --root "$ek" --backend cuda --trials 30 \
    --timeout 3 --seed 1 --write file
keep
step gelu_tune 80 python3 -m pytest_ktune.cli tune gelu_tanh_and_mul --root "$ek" --backend cuda --trials 30 \
    --timeout 3 --seed 1 --write file
keep
# The table: tuned (the new records) against the default, torch eager, torch.compile and Liger (SwiGLU and
# GEGLU as their users call them), and the floor on the small cases.
step bench_kernels 110 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
    --targets silu_and_mul,gelu_tanh_and_mul --budget-s 90 --compile-budget-s 45 \
    --out "$more/bench_kernels-cuda.json"
cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
tar -czf "$OUT/kq26d.tar.gz" -C "$more" .
ls "$OUT"
