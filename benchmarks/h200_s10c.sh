#!/usr/bin/env bash
# The third device call of session 10: issue 26's steps 1-2 (benchmarks/h200_kq26.sh's steps but its conv2d
# gate: the richer RMSNorm's correctness on CUDA, its tune, bench_kernels with Liger-Kernel's columns and the
# launch floor, conv2d's baselines and tune) and issue 32's production call benchmark after the host-work
# cuts. Outputs: the params file the tunes wrote, kq26.tar.gz (bench JSON and Markdown, tune reports) and
# all.tgz (the step logs, the production call's tables). Each step has a time limit (seconds).
# Usage: OUT=DIR bash benchmarks/h200_s10c.sh   (the wheels in .whl/, liger-kernel's among them)
set -uo pipefail
# shellcheck disable=SC2034  # read by benchmarks/_device.sh's step
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
more=/tmp/kq26-more && rm -rf "$more" && mkdir -p "$more"
ek=/tmp/kq26-ek && rm -rf "$ek" && cp -r example_project "$ek" && rm -rf "$ek/.ktune"
keep() { cp "$ek/ktune-params.json" "$OUT/ktune-params-h200-kq26.json"; }
step rmsnorm_correct 75 bash -c "python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda $ek \
    -k 'rmsnorm and correct and not fused and not triton' -q -rs && python3 -m pytest -p no:cacheprovider -q -rs \
    tests/unit/test_example_rmsnorm.py -k cuda"
step rmsnorm_tune 140 python3 -m pytest_ktune.cli tune rmsnorm --root "$ek" --backend cuda --trials 40 \
    --timeout 8 --seed 1 --write file
keep
step bench_kernels 100 python3 benchmarks/bench_kernels.py --backend cuda --params "$ek/ktune-params.json" \
    --targets rmsnorm,fused_add_rmsnorm,silu_and_mul,gelu_tanh_and_mul --budget-s 85 --compile-budget-s 40 \
    --out "$more/bench_kernels-cuda.json"
step conv2d 70 bash -c "python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda $ek -k conv2d \
    --ktune-update-baseline -q && python3 -m pytest_ktune.cli tune conv2d --root $ek --backend cuda \
    --trials 30 --timeout 5 --seed 1 --write file"
keep
cp -r "$ek/.ktune/reports" "$more/reports" 2>/dev/null
tar -czf "$OUT/kq26.tar.gz" -C "$more" .
step production_call 150 python3 benchmarks/production_call.py --calls 1000 --repeats 3 --out "$OUT"
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz --exclude=kq26.tar.gz --exclude=ktune-params-h200-kq26.json -- * \
    && find . -type f ! -name all.tgz ! -name kq26.tar.gz ! -name ktune-params-h200-kq26.json -delete)
