#!/usr/bin/env bash
# Issue 31's CUDA checks in one device call of at most ~420 s: the example's agent templates under
# compute-sanitizer's memcheck, racecheck, initcheck and synccheck (benchmarks/sanitize_templates.py, as the agent
# checks every proposal: the solved cover, the odd shape and the edge values), the two groups side by side
# (sanitize-a: SiLU-and-mul's rule-based and scripted-agent templates; sanitize-b: GELU-and-mul's and RMSNorm's
# rule-based ones), and beside them tests/agent/test_sanitizer_gpu.py (the tools on a small target and their
# controls). One GPU takes several sanitizer processes at once; each group's four tools run side by side too.
# Writes $OUT/sanitize_{a,b}.txt, $OUT/sanitize_tests.txt and $OUT/sanitize.tgz (each group's sanitize.md,
# sanitize.json, run.txt and the tools' logs).
# Usage: OUT=DIR bash benchmarks/h200_sanitize.sh   (the wheels in .whl/)
set -uo pipefail
TAIL=6
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
work=/tmp/sanitize-out && rm -rf "$work" && mkdir -p "$work"
step sanitize_a 400 python3 benchmarks/sanitize_templates.py --backend cuda --only silu_rules,silu_agent \
    --out "$work/sanitizer-a" &
step sanitize_b 400 python3 benchmarks/sanitize_templates.py --backend cuda --only gelu_rules,rmsnorm_rules \
    --out "$work/sanitizer-b" &
step sanitize_tests 400 python3 -m pytest -p no:cacheprovider tests/agent/test_sanitizer_gpu.py -q -rs &
wait
tar -C "$work" -czf "$OUT/sanitize.tgz" .
