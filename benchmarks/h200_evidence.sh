#!/usr/bin/env bash
# The GPU evidence, in one or more steps, on a machine with an NVIDIA GPU and no network.
# pytest-ktune and the wheels it lacks there travel in .whl/ (bash ../shared/device/wheels.sh,
# then `pip wheel --no-deps -w .whl .`). Each step writes its log to $OUT (default benchmarks/results/raw).
# Usage: bash benchmarks/h200_evidence.sh STEP...   with STEP one of:
#   tests     the CUDA contract suite and the unit tests, on the GPU
#   record    pytest --ktune example_project --ktune-update-baseline (a copy; its params file to $OUT)
#   gate      pytest --ktune example_project against those baselines, or the committed ones
#   timing    benchmarks/check_timing.py
#   regress   benchmarks/gate_demo.py: the gate catching a worse configuration and a slower source
#   tuner     benchmarks/bench_tuner.py: exhaustive optimum, live TPE tune, TPE against random
#   tune      pytest --ktune --ktune-tune on two keys of a copy of example_project, then the gate
#   kernels   benchmarks/bench_kernels.py
set -uo pipefail
OUT=${OUT:-benchmarks/results/raw}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
header() { echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; echo "# command: $*"; }
rc=0
for step in "$@"; do
    case $step in
    tests)
        { header pytest tests/contract tests/unit -rs; python3 -m pytest -p no:cacheprovider tests/contract tests/unit -q -rs; } 2>&1 | tee "$OUT/tests_cuda.txt" || rc=1 ;;
    record)
        rm -rf /tmp/ep && cp -r example_project /tmp/ep
        { header pytest --ktune example_project --ktune-update-baseline; python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda /tmp/ep --ktune-update-baseline -q; } 2>&1 | tee "$OUT/example_record_cuda.txt" || rc=1
        cp /tmp/ep/ktune-params.json "$OUT/ktune-params-h200.json" ;;
    gate)
        [ -d /tmp/ep ] || cp -r example_project /tmp/ep   # no record step: the committed baselines
        { header pytest --ktune example_project; python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda /tmp/ep -q; } 2>&1 | tee "$OUT/example_gate_cuda.txt" || rc=1 ;;
    timing)
        { header python3 benchmarks/check_timing.py; python3 benchmarks/check_timing.py --out "$OUT/check_timing.json"; } 2>&1 | tee "$OUT/check_timing.txt" || rc=1 ;;
    regress)
        { header python3 benchmarks/gate_demo.py --backend cuda; python3 benchmarks/gate_demo.py --backend cuda --workdir /tmp/gd; } 2>&1 | tee "$OUT/gate_demo_cuda.txt" || rc=1 ;;
    tuner)
        { header python3 benchmarks/bench_tuner.py --backend cuda; python3 benchmarks/bench_tuner.py --backend cuda --out "$OUT/bench_tuner-cuda.json"; } 2>&1 | tee "$OUT/bench_tuner.txt" || rc=1 ;;
    tune)
        rm -rf /tmp/et && cp -r example_project /tmp/et
        { header pytest --ktune --ktune-tune --ktune-write=file example_project -k "T64-H4096-float16 or T256-I14336-float16"; python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda --ktune-tune --ktune-write=file --ktune-trials=15 /tmp/et -k "T64-H4096-float16 or T256-I14336-float16" -q; python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=cuda /tmp/et -k "T64-H4096-float16 or T256-I14336-float16" -q; } 2>&1 | tee "$OUT/tune_pytest_cuda.txt" || rc=1
        cp /tmp/et/ktune-params.json "$OUT/ktune-params-tuned-h200.json" ;;
    kernels)
        { header python3 benchmarks/bench_kernels.py --backend cuda; python3 benchmarks/bench_kernels.py --backend cuda --out "$OUT/bench_kernels-cuda.json"; } 2>&1 | tee "$OUT/bench_kernels.txt" || rc=1 ;;
    *) echo "unknown step $step"; rc=2 ;;
    esac
done
exit $rc
