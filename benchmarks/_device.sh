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
