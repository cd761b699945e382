#!/usr/bin/env bash
# The gate's trust on an NVIDIA GPU with no network (issue 24): three records switched to configurations
# their committed landscapes time x1.08-1.10 slower, ten gate runs against the committed baselines (recorded
# on another H200, another day) and ten with --ktune-base HEAD~1; the cost of a pull request that changes
# one target; the gpu tests; and the example's baselines re-recorded with this machine's identity.
# Each step has a time limit (seconds, after its name); what a stopped step wrote stays in $OUT.
# Usage: STEPS="tests baseline" OUT=DIR bash benchmarks/h200_gate_trust.sh   (the wheels in .whl/)
set -uo pipefail
OUT=${OUT:-benchmarks/results/raw}
RUNS=${RUNS:-10}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
header() { echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; echo "# command: $*"; }
step() {  # NAME SECONDS COMMAND...: the command's output to $OUT/NAME.txt, stopped after SECONDS
    local name=$1 limit=$2; shift 2
    { header "$@"; timeout -s INT "$limit" "$@"; echo "# exit status $?"; } > "$OUT/$name.txt" 2>&1
    tail -n 3 "$OUT/$name.txt"
}
L=benchmarks/results/landscapes
LANDS=(--landscape $L/fused_add_rmsnorm-T16384-H4096-float16-NVIDIA_H200.json.gz
       --landscape $L/gelu_tanh_and_mul-T4-I8192-float16-NVIDIA_H200.json.gz
       --landscape $L/silu_and_mul-T256-I14336-float16-H200.json)
for s in ${STEPS:-tests baseline base cost record}; do
    case $s in
        tests) step tests_gpu 150 python3 -m pytest -p no:cacheprovider tests -m gpu -q -rs -x ;;
        baseline) step trust_baseline 280 python3 benchmarks/gate_trust.py slowed --backend cuda --runs "$RUNS" \
                      --against baseline "${LANDS[@]}" --out "$OUT/trust_baseline.json" ;;
        base) step trust_base 280 python3 benchmarks/gate_trust.py slowed --backend cuda --runs "$RUNS" \
                  --against base "${LANDS[@]}" --out "$OUT/trust_base.json" ;;
        cost) step cost 200 python3 benchmarks/gate_trust.py cost --backend cuda "${LANDS[@]}" --out "$OUT/cost.json" ;;
        record) rm -rf /tmp/eg && cp -r example_project /tmp/eg
                step record 150 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda /tmp/eg -q \
                    --ktune-update-baseline
                cp /tmp/eg/ktune-params.json "$OUT/ktune-params.json" ;;
    esac
done
