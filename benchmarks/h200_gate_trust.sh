#!/usr/bin/env bash
# The gate's trust on an NVIDIA GPU with no network (issue 24): three records switched to configurations
# their committed landscapes time x1.08-1.10 slower, ten gate runs against the committed baselines (recorded
# on another H200, another day) and ten with --ktune-base HEAD~1; the cost of a pull request that changes
# one target; the gpu tests; and the example's baselines re-recorded with this machine's identity.
# Each step has a time limit (seconds, after its name); what a stopped step wrote stays in $OUT.
# Usage: STEPS="tests baseline" OUT=DIR bash benchmarks/h200_gate_trust.sh   (the wheels in .whl/)
set -uo pipefail
RUNS=${RUNS:-10}
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
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
