#!/usr/bin/env bash
# One short device call (session 9): synccheck's controls on this GPU (issue 31), the production call's
# benchmark with the dispatch cache and prepared launches (issue 32), then the gpu tests but the sanitizer
# ones. Each step has a time limit (seconds, after its name); what a stopped step wrote stays in $OUT.
# Usage: OUT=DIR bash benchmarks/h200_s9.sh   (the wheels in .whl/)
set -uo pipefail
TAIL=4
# shellcheck source=benchmarks/_device.sh
source benchmarks/_device.sh
step synccheck 60 python3 benchmarks/synccheck_controls.py --out "$OUT/synccheck.json"
step production_call 110 python3 benchmarks/production_call.py --calls 1000 --repeats 3 --out "$OUT"
step tests_gpu 170 python3 -m pytest -p no:cacheprovider tests -m gpu -q -rs \
    --ignore=tests/agent/test_sanitizer_gpu.py
