#!/usr/bin/env bash
# Session 17's device calls (issue 26: the suite's table brought up to date, fp8/int8 quantisation at small T).
# Phase a (per_token_group_quant gained FAST, each value times the group's reciprocal, and IDX64):
#   quant_tune   the small-T keys (T=1, 4, 8, 16, 256) tuned on the new template (40 trials or 20 s a key);
#   quant_gate   the example's per_token_group_quant items on CUDA (correctness and the gate) on those records;
#   bench        bench_kernels.py for per_token_group_quant, rotary_neox and moe_topk_softmax.
# Phase b (the rest of the suite's rows, last benched before the floor and Liger columns existed, and the call):
#   bench        bench_kernels.py for merge_attn_states, reshape_and_cache_flash and conv2d (cuDNN's conv2d the
#                torch column);
#   call         benchmarks/production_call.py, every column on one host (15 rounds).
# Phase c (what the suite's table leaves behind among the norms and the GLUs):
#   tune         fused add + RMSNorm's large keys (T=4096, 16384; session 12 gave them 8 s a key) and SiLU-and-mul
#                at T=256, 40 trials or 40 s a key;
#   bench        bench_kernels.py for fused_add_rmsnorm and silu_and_mul.
# Phase d: quantisation's large keys tuned with FAST (30 trials or 25 s a key), their bench and conv2d's (cuDNN
# timed in float32, not TF32), then the README's main command, `pytest --ktune example_project`, on the records.
# Phase e: the landscapes (every feasible configuration timed, `ktune record`) of the cases the table still has
# behind: SiLU-and-mul T=256 fp32 and fp16, T=16 fp32, GELU(tanh)-and-mul T=32 fp32, fused add + RMSNorm T=1 bf16 and
# T=64 fp16: whether the templates' optima reach the best alternative, or the search missed them.
# Phase f: e found fused add + RMSNorm's T=1 bf16 and T=64 fp16 optima 7-11 % below the records: those keys tuned
# over every feasible configuration (--sampler grid), then fused add + RMSNorm's bench.
# Each step has a time limit (seconds, after its name). $OUT gets at most 8 files: gpu.txt, the step logs, the
# params file and one tarball of the rest.
# Usage: OUT=DIR bash benchmarks/h200_s17.sh a|b|c|d   (the wheels in .whl/, Liger-Kernel's among them)
set -uo pipefail
phase=${1:-}
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
session s17 "$phase" a b c d e f  # $more, $ek (/tmp/s17-*); keep writes $OUT/ktune-params-h200-s17$phase.json
if [ "$phase" = a ]; then
    step quant_tune 230 bash -c "for t in 4 1 16 8 256; do python3 -m pytest_ktune.cli tune per_token_group_quant \
        --root $ek --backend cuda --key T=\$t --trials 40 --tune-timeout 20 --seed 6 --write file; done"
    keep
    cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
    step quant_gate 70 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda "$ek" -rs -q \
        -k "per_token_group_quant"
    step bench 270 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets per_token_group_quant,rotary_neox,moe_topk_softmax --budget-s 220 --compile-budget-s 110 \
        --out "$more/bench_kernels-cuda.json"
elif [ "$phase" = b ]; then
    step bench 300 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets merge_attn_states,reshape_and_cache_flash,conv2d --budget-s 250 --compile-budget-s 120 \
        --out "$more/bench_kernels-cuda.json"
    step call 240 python3 benchmarks/production_call.py --calls 1000 --repeats 15 --out "$more"
elif [ "$phase" = c ]; then
    step tune 330 bash -c "for k in 'fused_add_rmsnorm T=4096' 'fused_add_rmsnorm T=16384' 'silu_and_mul T=256'; do \
        set -- \$k; python3 -m pytest_ktune.cli tune \$1 --root $ek --backend cuda --key \$2 --trials 40 \
        --tune-timeout 40 --seed 7 --write file; done"
    keep
    cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
    step bench 230 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets fused_add_rmsnorm,silu_and_mul --budget-s 180 --compile-budget-s 90 \
        --out "$more/bench_kernels-cuda.json"
elif [ "$phase" = d ]; then
    step quant_tune 250 bash -c "for t in 4096 16384; do python3 -m pytest_ktune.cli tune per_token_group_quant \
        --root $ek --backend cuda --key T=\$t --trials 30 --tune-timeout 25 --seed 6 --write file; done"
    keep
    step bench 150 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets per_token_group_quant,conv2d --budget-s 110 \
        --compile-budget-s 60 --out "$more/bench_kernels-cuda.json"
    step example 180 python3 -m pytest -p no:cacheprovider --ktune "$ek" -q -rs
elif [ "$phase" = e ]; then
    for key in "silu_and_mul T=256 I=14336 dtype=float32" "silu_and_mul T=256 I=14336 dtype=float16" \
               "silu_and_mul T=16 I=14336 dtype=float32" "gelu_tanh_and_mul T=32 I=8192 dtype=float32" \
               "fused_add_rmsnorm T=1 H=4096 dtype=bfloat16" "fused_add_rmsnorm T=64 H=2048 dtype=float16"; do
        landscape 130 $key
    done
elif [ "$phase" = f ]; then
    step tune 170 bash -c "python3 -m pytest_ktune.cli tune fused_add_rmsnorm --root $ek --backend cuda --key T=1 \
        --key dtype=bfloat16 --sampler grid --trials 120 --tune-timeout 40 --write file; \
        python3 -m pytest_ktune.cli tune fused_add_rmsnorm --root $ek --backend cuda --key T=64 --key dtype=float16 \
        --sampler grid --trials 450 --tune-timeout 100 --write file"
    keep
    step bench 90 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
        --targets fused_add_rmsnorm --budget-s 60 --compile-budget-s 40 --out "$more/bench_kernels-cuda.json"
fi
tar -czf "$OUT/s17$phase.tar.gz" -C "$more" .
ls "$OUT"
