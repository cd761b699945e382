#!/usr/bin/env bash
# The first device call of session 10 (issue 24's last step): the example's CUDA baselines re-recorded
# from the committed tree (so each records this commit, whose modules are HEAD's), the gpu tests on the
# tree of the last merges (device pinning, the whole-target A/B), and the cost of a pull request that
# changes one target against an unchanged warm gate. Everything ends in $OUT/all.tgz (the device returns
# at most 8 files). Each step has a time limit (seconds, after its name).
# Usage: OUT=DIR bash benchmarks/h200_s10.sh   (the wheels in .whl/)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
{ git rev-parse HEAD && git status --short --untracked-files=no; } > "$OUT/tree.txt" 2>&1
if git rev-parse --verify -q HEAD >/dev/null && [ -z "$(git status --porcelain --untracked-files=no)" ]; then
    step record 170 python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda example_project -q \
        --ktune-update-baseline
    cp example_project/ktune-params.json "$OUT/ktune-params.json"
    git checkout -q -- example_project/ktune-params.json
else
    echo "no clean git tree here: baselines not recorded" | tee "$OUT/record.txt"
fi
step tests_gpu 190 python3 -m pytest -p no:cacheprovider tests -m gpu -q -rs \
    --ignore=tests/agent/test_sanitizer_gpu.py
L=benchmarks/results/landscapes
step cost 170 python3 benchmarks/gate_trust.py cost --backend cuda \
    --landscape $L/fused_add_rmsnorm-T16384-H4096-float16-NVIDIA_H200.json.gz --out "$OUT/cost.json"
(cd "$OUT" && tar czf all.tgz --exclude=all.tgz -- * && find . -type f ! -name all.tgz -delete)
