# Sourced by the benchmarks/h200_*.sh scripts: the preamble of a device call. Installs the wheels in .whl/
# (pytest-ktune and what the device lacks) into /tmp/site, puts them on PYTHONPATH, writes the GPU's name,
# driver and clocks to $OUT/gpu.txt, and defines `step NAME SECONDS COMMAND...`, which runs the command
# under a time limit with its output (a dated header, the command, its exit status) in $OUT/NAME.txt.
# TAIL: how many lines of each step's log to echo (default 3).
OUT=${OUT:-benchmarks/results/raw}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
header() { echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; echo "# command: $*"; }
step() {  # NAME SECONDS COMMAND...: the command's output to $OUT/NAME.txt, stopped after SECONDS
    local name=$1 limit=$2; shift 2
    { header "$@"; timeout -s INT "$limit" "$@"; echo "# exit status $?"; } > "$OUT/$name.txt" 2>&1
    tail -n "${TAIL:-3}" "$OUT/$name.txt"
}
scratch() {  # TAG: $more (an empty folder) and $ek (a fresh copy of the example) under /tmp/TAG-*, and `keep`,
    # which copies the copy's params file to $OUT/ktune-params-h200-TAG.json
    more=/tmp/$1-more && rm -rf "$more" && mkdir -p "$more"
    ek=/tmp/$1-ek && rm -rf "$ek" && cp -r example_project "$ek" && rm -rf "$ek/.ktune"
    KEEP_AS=$OUT/ktune-params-h200-$1.json
}
keep() { cp "$ek/ktune-params.json" "$KEEP_AS"; }
ncu_case() {  # CASE IMPL DIR: one Nsight Compute profile of benchmarks/ncu_cases.py's CASE and IMPL, its CSV and
    # log in DIR, stopped after 75 s; the sections and stall metrics of issue 26's profiles, clocks left alone
    timeout -s INT 75 ncu --clock-control none --nvtx --nvtx-include "profile/" --csv --page details \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --metrics "$(python3 benchmarks/ncu_cases.py metrics)" python3 benchmarks/ncu_cases.py run "$1" "$2" \
        > "$3/$1--$2.csv" 2> "$3/$1--$2.log"
}
session() {  # TAG PHASE PHASES...: a session script's start: PHASE must be one of PHASES; Triton's interpreter
    # off, four lines of each step's log echoed, and `scratch TAG` with keep writing ktune-params-h200-TAGPHASE.json
    local tag=$1 phase=$2; shift 2
    case " $* " in *" $phase "*) ;; *) echo "usage: h200_$tag.sh $(IFS='|'; echo "$*")"; exit 2 ;; esac
    unset TRITON_INTERPRET
    TAIL=4
    scratch "$tag"
    KEEP_AS=$OUT/ktune-params-h200-$tag$phase.json
}
landscape() {  # SECONDS TARGET NAME=VALUE...: `ktune record` of TARGET's key that the NAME=VALUEs name, every
    # feasible configuration timed, into $more/landscapes/ (silu_and_mul T=256 I=14336 dtype=float32 is written
    # silu_and_mul-T256-I14336-float32.json.gz, its log beside it); the log's last line echoed
    local limit=$1 target=$2 name=$2 kv; shift 2
    local keys=()
    for kv in "$@"; do keys+=(--key "$kv"); name="$name-${kv/=/}"; done
    name=${name/-dtype/-}
    mkdir -p "$more/landscapes"
    timeout -s INT "$limit" python3 -m pytest_ktune.cli record "$target" --root "$ek" --backend cuda "${keys[@]}" \
        --out "$more/landscapes/$name.json.gz" > "$more/landscapes/$name.log" 2>&1
    tail -n 1 "$more/landscapes/$name.log"
}
