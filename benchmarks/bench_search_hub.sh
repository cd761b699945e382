#!/usr/bin/env bash
# ktune bench-search on each of the FAIR Benchmark Hub's Kernel Tuner cache files committed under
# benchmarks/results/kernel-tuner-hub/ (issue 20's goal: the default against Optuna's samplers and Kernel
# Tuner's strategies, 11 seeds, budget 100), one file at a time so that each finished file's tables are
# kept: benchmarks/results/bench-search-hub/<kernel>-<GPU>/bench-search.{md,json,svg}.
# Usage: bash benchmarks/bench_search_hub.sh [SEEDS] [FILES...]   (default: 11 seeds, every file,
# dedispersion first: its spaces replay faster)
set -uo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-11}
shift || true
hub=benchmarks/results/kernel-tuner-hub
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$hub"/dedispersion_milo/*.json.gz "$hub"/convolution_milo/*.json.gz)
for f in "${files[@]}"; do
    kernel=$(basename "$(dirname "$f")" _milo)
    gpu=$(basename "$f" .json.gz)
    out=benchmarks/results/bench-search-hub/$kernel-$gpu
    mkdir -p "$out"
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) python3 -m pytest_ktune.cli bench-search $f --seeds $seeds --out $out"
    python3 -m pytest_ktune.cli bench-search "$f" --seeds "$seeds" --out "$out" > "$out/log.txt" 2>&1
    echo "# exit status $? ($out)"
    grep -E "^- |^Fewer" "$out/log.txt"
done
