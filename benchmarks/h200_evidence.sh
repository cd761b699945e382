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
#   kernels   benchmarks/bench_kernels.py (KERNEL_TARGETS: some targets only), tuned = $PARAMS (default: the merged tune-a/tune-b file when this
#             machine made one, else example_project/ktune-params.json)
#   tune-a, tune-b   ktune tune --write file on a copy of example_project, for two halves of its targets
#             (TARGETS_A, TARGETS_B), with TRIALS trials and TUNE_TIMEOUT seconds per key (default 8 and 3)
#             and TUNE_FLAGS (e.g. --autotune: only keys not tuned yet, or tuned on another source)
#   merge     the committed params file with what tune-a and tune-b wrote (here, or into $TUNED_FROM), into
#             $OUT/ktune-params-tuned-h200.json
#   gate-tuned       pytest --ktune on the merged file, on the small and the largest cases
#   landscapes-small, landscapes-large   ktune record: every target's smallest key, and its largest with inputs
#             up to LARGE_MAX_BYTES (default 32M)
#   landscapes-redo  ktune record --redo --stale-only on the committed landscapes (those whose kernel changed)
#   agent-silu, agent-rest   benchmarks/bench_agent.py on the naive kernels
#   gpu-tests every test marked gpu (the CUDA contract suite, device-side inputs and references,
#             the gate's isolation from a kernel that poisons its context)
#   gate-cost        benchmarks/gate_cost.py: the gate's wall time (cold, warm), peak memory and phases:
#             on GATE_SUBSET (default rmsnorm) with the build in .before/ (a wheel and its example_project)
#             and with this one, then the whole example with this one
#   gate-runs        GATE_RUNS (default 10) runs of the whole example against its baselines: 0 failures
#   gate-slowed      a configuration x1.08-1.10 slower from SLOWED_LANDSCAPE, caught in each of 10 runs
#   production       benchmarks/production_call.py (ktune call, raw CuPy launch, torch eager, Liger-Kernel where
#             a wheel of it is in .whl/) and the torch gpu tests (stream, CUDA graph capture, torch.compile)
#   conv2d    the convolution example on a copy: baselines of the default, ktune tune conv2d (CONV_TRIALS trials,
#             default 30, per key) with --write file, the gate on the result with JUnit and benchmark JSON, the
#             landscape of Kernel Tuner's key (4096x4096, 17x17) and of the smallest; the params file to $OUT
#   sanitize-a, sanitize-b, sanitize-c   benchmarks/sanitize_templates.py (compute-sanitizer memcheck, racecheck,
#             initcheck, synccheck on the odd shape and the edge values): the SiLU rules and scripted agent
#             templates; the GELU and RMSNorm rules templates; the three controls. Each writes sanitize.md,
#             sanitize.json, run.txt (date, device, driver, compute-sanitizer's version, command) and the
#             tools' logs to $OUT/sanitizer-{a,b,c}/, and fits in ten minutes
#   sanitize-tests   tests/agent/test_sanitizer_gpu.py (the same tools on a small target, and their controls)
# A step written NAME:SECONDS is stopped after that many seconds (what it wrote so far stays).
# With SKIP_INSTALL=1 the wheels are taken as installed (benchmarks/h200_parallel.sh installs them once).
set -uo pipefail
OUT=${OUT:-benchmarks/results/raw}
mkdir -p "$OUT"
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
BK=${BK:-cuda}  # the backend of the steps from kernels on (opencl: a smoke test of this script on a CPU)
TARGETS_A=${TARGETS_A:-"rmsnorm fused_add_rmsnorm silu_and_mul gelu_tanh_and_mul rotary_neox"}
TARGETS_B=${TARGETS_B:-"per_token_group_quant moe_topk_softmax merge_attn_states reshape_and_cache_flash"}
TRIALS=${TRIALS:-8} TUNE_TIMEOUT=${TUNE_TIMEOUT:-3}  # the tune-a/tune-b budget per key: trials, seconds
TUNE_FLAGS=${TUNE_FLAGS:-}  # more ktune tune options for tune-a/tune-b, e.g. --autotune
tune_half() {  # $1: a or b, $2: targets
    rm -rf "/tmp/et-$1" && cp -r example_project "/tmp/et-$1"
    { header ktune tune --backend $BK --trials $TRIALS --timeout $TUNE_TIMEOUT --write file $TUNE_FLAGS "$2"
      for t in $2; do python3 -m pytest_ktune.cli tune --root "/tmp/et-$1" --backend $BK --trials $TRIALS \
          --timeout $TUNE_TIMEOUT --seed 1 --write file $TUNE_FLAGS "$t"; cp "/tmp/et-$1/ktune-params.json" "$OUT/ktune-params-tuned-$1.json"
      done; } 2>&1 | tee -a "$OUT/tune_$1.txt"
}
header() { echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; echo "# command: $*"; }
rc=0
for spec in "$@"; do
    step=${spec%%:*}
    limit=""; [ "$spec" != "$step" ] && limit="timeout -s INT ${spec#*:}"
    case $step in
    tests)
        { header pytest tests/contract tests/unit -rs; $limit python3 -m pytest -p no:cacheprovider tests/contract tests/unit -q -rs; } 2>&1 | tee "$OUT/tests_cuda.txt" || rc=1 ;;
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
        params=${PARAMS:-}
        [ -z "$params" ] && [ -f /tmp/et-tuned.json ] && params=/tmp/et-tuned.json
        params=${params:-example_project/ktune-params.json}
        { header python3 benchmarks/bench_kernels.py --backend $BK --params "$params" --budget-s 420 --compile-budget-s 200
          $limit python3 benchmarks/bench_kernels.py --backend $BK --params "$params" --budget-s 420 --compile-budget-s 200 \
            ${KERNEL_TARGETS:+--targets "$KERNEL_TARGETS"} --out "$OUT/bench_kernels-cuda.json"; } 2>&1 \
            | tee "$OUT/bench_kernels.txt" || rc=1 ;;
    tune-a|tune-b)  # each key is written as soon as it is tuned: what a cut step tuned is kept
        half=${step#tune-}; targets=$TARGETS_A; [ "$half" = b ] && targets=$TARGETS_B
        export -f header
        $limit bash -c "$(declare -f tune_half); OUT=$OUT BK=$BK TRIALS=$TRIALS TUNE_TIMEOUT=$TUNE_TIMEOUT TUNE_FLAGS=\"$TUNE_FLAGS\"; tune_half $half \"$targets\"" || rc=1
        cp "/tmp/et-$half/ktune-params.json" "$OUT/ktune-params-tuned-$half.json" ;;
    merge)  # the tune-a and tune-b copies when this machine made them, else their files in $TUNED_FROM
        cp example_project/ktune-params.json /tmp/et-tuned.json
        from=(/tmp/et-a/ktune-params.json /tmp/et-b/ktune-params.json)
        [ -f "${from[0]}" ] && [ -f "${from[1]}" ] || from=("${TUNED_FROM:-$OUT}"/ktune-params-tuned-[ab].json)
        python3 benchmarks/merge_params.py /tmp/et-tuned.json "${from[@]}" --keep-commits --changed-only --device "${DEVICE_MATCH:-H200}" \
            && cp /tmp/et-tuned.json "$OUT/ktune-params-tuned-h200.json" || rc=1 ;;
    gate-tuned)
        rm -rf /tmp/eg && cp -r example_project /tmp/eg && cp /tmp/et-tuned.json /tmp/eg/ktune-params.json
        { header pytest --ktune example_project -k "T1- or T16384 or T8192"
          $limit python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=$BK /tmp/eg -k "T1- or T16384 or T8192" -q; } 2>&1 \
            | tee "$OUT/example_gate_tuned_cuda.txt" || rc=1 ;;
    landscapes-small|landscapes-large)
        mkdir -p "$OUT/landscapes"
        which=--smallest-key; extra=(); [ "$step" = landscapes-large ] && { which=--largest-key; extra=(--max-bytes "${LARGE_MAX_BYTES:-32M}"); }
        { header ktune record --backend $BK "$which" "${extra[@]}"
          # shellcheck disable=SC2086  # LANDSCAPE_TARGETS: target names, split on purpose (default: all)
          $limit python3 -m pytest_ktune.cli record --root example_project --backend $BK "$which" "${extra[@]}" \
            --out "$OUT/landscapes/" ${LANDSCAPE_TARGETS:-}; } 2>&1 \
            | tee "$OUT/landscapes/record-${step#landscapes-}${CUDA_VISIBLE_DEVICES:+-gpu$CUDA_VISIBLE_DEVICES}.txt" || rc=1 ;;
    landscapes-redo)  # the committed landscapes whose kernel or space changed since, recorded again
        mkdir -p "$OUT/landscapes"
        { header ktune record --redo benchmarks/results/landscapes/*.json* --stale-only
          $limit python3 -m pytest_ktune.cli record --root example_project --backend $BK --redo \
            benchmarks/results/landscapes/*.json* --stale-only --out "$OUT/landscapes/"; } 2>&1 \
            | tee "$OUT/landscapes/record-redo${CUDA_VISIBLE_DEVICES:+-gpu$CUDA_VISIBLE_DEVICES}.txt" || rc=1 ;;
    agent-silu|agent-rest)
        kernels=silu_and_mul; [ "$step" = agent-rest ] && kernels=gelu_tanh_and_mul,rmsnorm
        { header python3 benchmarks/bench_agent.py --backend $BK --seeds 5 --kernels "$kernels"
          $limit python3 benchmarks/bench_agent.py --backend $BK --seeds 5 --kernels "$kernels" \
            --out "$OUT/bench_agent-cuda-${step#agent-}.json"; } 2>&1 | tee "$OUT/bench_agent-${step#agent-}.txt" || rc=1 ;;
    gpu-tests)
        { header pytest tests -m gpu -rs; $limit python3 -m pytest -p no:cacheprovider tests -m gpu -q -rs; } 2>&1 \
            | tee "$OUT/tests_gpu.txt" || rc=1 ;;
    gate-cost)
        subset=${GATE_SUBSET:-rmsnorm}
        if [ -d .before ]; then
            rm -rf /tmp/site-before && python3 -m pip install -q --no-index --no-deps --target /tmp/site-before .before/*.whl
            $limit python3 benchmarks/gate_cost.py cost --label before --site /tmp/site-before --project .before/example_project \
                -k "$subset" --runs 2 --out "$OUT/gate_cost-before-subset.json" 2>&1 | tee -a "$OUT/gate_cost.txt" || rc=1
        fi
        $limit python3 benchmarks/gate_cost.py cost --label after -k "$subset" --runs 2 \
            --out "$OUT/gate_cost-after-subset.json" 2>&1 | tee -a "$OUT/gate_cost.txt" || rc=1
        $limit python3 benchmarks/gate_cost.py cost --label after-full --runs 2 \
            --out "$OUT/gate_cost-after-full.json" 2>&1 | tee -a "$OUT/gate_cost.txt" || rc=1 ;;
    gate-runs)
        $limit python3 benchmarks/gate_cost.py cost --label runs --runs "${GATE_RUNS:-10}" \
            --out "$OUT/gate_runs.json" 2>&1 | tee "$OUT/gate_runs.txt" || rc=1 ;;
    gate-slowed)
        $limit python3 benchmarks/gate_cost.py slowed --runs "${SLOWED_RUNS:-10}" \
            --landscape "${SLOWED_LANDSCAPE:-benchmarks/results/landscapes/silu_and_mul-T16-I14336-float16-NVIDIA_H200.json.gz}" \
            --out "$OUT/gate_slowed.json" 2>&1 | tee "$OUT/gate_slowed.txt" || rc=1 ;;
    production)
        { header python3 benchmarks/production_call.py --out "$OUT"
          $limit python3 benchmarks/production_call.py --out "$OUT"; } 2>&1 | tee "$OUT/production_call.txt" || rc=1
        { header pytest tests/contract/test_cuda_torch.py -m gpu -v -rs
          $limit python3 -m pytest -p no:cacheprovider tests/contract/test_cuda_torch.py -m gpu -v -rs; } 2>&1 \
            | tee "$OUT/tests_cuda_torch.txt" || rc=1 ;;
    conv2d)
        rm -rf /tmp/ec && cp -r example_project /tmp/ec && mkdir -p "$OUT/landscapes"
        { header pytest --ktune example_project -k conv2d --ktune-update-baseline, ktune tune conv2d, pytest --ktune -k conv2d
          python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=$BK /tmp/ec -k conv2d --ktune-update-baseline -q
          $limit python3 -m pytest_ktune.cli tune conv2d --root /tmp/ec --backend $BK --trials "${CONV_TRIALS:-30}" --seed 1 \
            --write file
          python3 -m pytest -p no:cacheprovider --ktune --ktune-backend=$BK /tmp/ec -k conv2d -q \
            --ktune-junit "$OUT/conv2d_junit.xml" --ktune-benchmark-json "$OUT/conv2d_bench.json"
          $limit python3 -m pytest_ktune.cli record conv2d --root example_project --backend $BK --key H=4096 --key W=4096 \
            --key F=17 --out "$OUT/landscapes/"
          $limit python3 -m pytest_ktune.cli record conv2d --root example_project --backend $BK --smallest-key \
            --out "$OUT/landscapes/"; } 2>&1 | tee "$OUT/conv2d_cuda.txt" || rc=1
        cp /tmp/ec/ktune-params.json "$OUT/ktune-params-conv2d-h200.json" ;;
    sanitize-a|sanitize-b|sanitize-c)
        rows=silu_rules,silu_agent; [ "$step" = sanitize-b ] && rows=gelu_rules,rmsnorm_rules
        [ "$step" = sanitize-c ] && rows=overread,racy,barrier
        { header python3 benchmarks/sanitize_templates.py --backend $BK --only $rows
          $limit python3 benchmarks/sanitize_templates.py --backend $BK --only $rows \
            --out "$OUT/sanitizer-${step#sanitize-}"; } 2>&1 | tee "$OUT/${step/-/_}.txt" || rc=1 ;;
    sanitize-tests)
        { header pytest tests/agent/test_sanitizer_gpu.py -rs
          $limit python3 -m pytest -p no:cacheprovider tests/agent/test_sanitizer_gpu.py -q -rs; } 2>&1 \
            | tee "$OUT/sanitize_tests.txt" || rc=1 ;;
    *) echo "unknown step $step"; rc=2 ;;
    esac
done
exit $rc
