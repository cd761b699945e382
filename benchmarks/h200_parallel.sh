#!/usr/bin/env bash
# Two lists of benchmarks/h200_evidence.sh steps at once, one per GPU of a two-GPU machine: each list
# runs in order on its own GPU, so no two timed steps share a device. Give every step a limit
# (STEP:SECONDS) that ends both lists before the call's own limit: what the steps wrote is then packed
# into $OUT/results.tgz beside the two logs.
# Usage: bash benchmarks/h200_parallel.sh "STEP..." "STEP..."     (e.g. "tune-a:300 agent-silu:270")
set -uo pipefail
OUT=${OUT:-benchmarks/results/raw}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
nvidia-smi --query-gpu=index,name,memory.used,utilization.gpu --format=csv | tee "$OUT/gpus.txt"
# shellcheck disable=SC2086  # the step lists split into words on purpose
CUDA_VISIBLE_DEVICES=0 SKIP_INSTALL=1 OUT=$OUT LANDSCAPE_TARGETS=${LANDSCAPE_TARGETS0:-} bash benchmarks/h200_evidence.sh $1 > "$OUT/gpu0.log" 2>&1 &
first=$!
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES=1 SKIP_INSTALL=1 OUT=$OUT LANDSCAPE_TARGETS=${LANDSCAPE_TARGETS1:-} bash benchmarks/h200_evidence.sh $2 > "$OUT/gpu1.log" 2>&1 &
second=$!
rc=0
wait $first || rc=1
wait $second || rc=1
tail -n 5 "$OUT/gpu0.log" "$OUT/gpu1.log"
# Everything else in one archive: the device tool brings back only a few files per call.
( cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name gpus.txt ! -name gpu0.log ! -name gpu1.log ! -name results.tgz \
    -print0 | tar czf results.tgz --null -T - && find . -mindepth 1 -maxdepth 1 ! -name gpus.txt ! -name gpu0.log \
    ! -name gpu1.log ! -name results.tgz -exec rm -rf {} + )
exit $rc
