#!/usr/bin/env bash
# ktune bench-search on each of the FAIR Benchmark Hub's Kernel Tuner cache files committed under
# benchmarks/results/kernel-tuner-hub/ (issue 20's goal: the default against Optuna's samplers and Kernel
# Tuner's strategies, 11 seeds, budget 100), one file at a time so that each finished file's tables are
# kept: benchmarks/results/bench-search-hub/<kernel>-<GPU>/bench-search.{md,json,svg}.
# Usage: bash benchmarks/bench_search_hub.sh [SEEDS] [FILES...]   (default: 11 seeds, every file,
# dedispersion first: its spaces replay faster). The held-out half (issue 30: not looked at while the
# default's search for spaces it knows nothing of was designed) is the A4000, MI250X and W7800 files:
#   bash benchmarks/bench_search_hub.sh 11 benchmarks/results/kernel-tuner-hub/*_milo/{A4000,MI250X,W7800}.json.gz
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# KTUNE_STRATEGIES: a comma-separated subset (default: every strategy); KTUNE_OUT: where the folders go.
seeds=${1:-11}
strategies=${KTUNE_STRATEGIES:+--strategies $KTUNE_STRATEGIES}
results=${KTUNE_OUT:-benchmarks/results/bench-search-hub}
shift || true
hub=benchmarks/results/kernel-tuner-hub
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$hub"/dedispersion_milo/*.json.gz "$hub"/convolution_milo/*.json.gz)
echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(python3 --version)"
for f in "${files[@]}"; do
    kernel=$(basename "$(dirname "$f")" _milo)
    gpu=$(basename "$f" .json.gz)
    out=$results/$kernel-$gpu
    mkdir -p "$out"
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) python3 -m pytest_ktune.cli bench-search $f --seeds $seeds $strategies --out $out"
    # shellcheck disable=SC2086  # $strategies is empty or two words
    python3 -m pytest_ktune.cli bench-search "$f" --seeds "$seeds" $strategies --out "$out" > "$out/log.txt" 2>&1
    echo "# exit status $? ($out)"
    grep -E "^- |^Fewer" "$out/log.txt"
done
# Every strategy ranked over the files run (geometric mean of trials to 3 %, fraction after 10 and 20).
# KTUNE_RIVALS: folders (or bench-search.json files) of earlier runs, space-separated, the first first: the
# strategies this run did not repeat are taken from them, file by file.
rivals=()
for r in ${KTUNE_RIVALS:-}; do rivals+=(--rivals "$r"); done
python3 benchmarks/search_overall.py "$results"/*/bench-search.json "${rivals[@]}" \
    > "$results/overall.md" && cat "$results/overall.md"
