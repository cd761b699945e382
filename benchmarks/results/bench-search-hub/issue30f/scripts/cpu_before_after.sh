#!/usr/bin/env bash
# CPU per trial before and after (issue 30, sixth round): issue30d's cpu.py on each file, on the tree BEFORE
# (a copy of main) and then on AFTER (this branch), one after the other, one BLAS thread.
# Usage: bash benchmarks/results/bench-search-hub/issue30f/scripts/cpu_before_after.sh BEFORE AFTER
set -u
before=$1; after=$2
for f in benchmarks/results/kernel-tuner-hub/convolution_milo/{A4000,MI250X,W7800}.json.gz \
         benchmarks/results/kernel-tuner-pypi/convolution/RTX2080Ti.json.gz benchmarks/results/kernel-tuner-hub/dedispersion_milo/A4000.json.gz; do
  for side in before after; do
    if [ $side = before ]; then tree=$before; else tree=$after; fi
    echo "## $f $side (load $(cut -d' ' -f1-3 /proc/loadavg))"
    (cd "$tree" && PYTHONPATH=$tree OMP_NUM_THREADS=1 nice -n 10 python3 \
       benchmarks/results/bench-search-hub/issue30d/scripts/cpu.py "$f" ktune loop genetic_algorithm pso mls)
  done
done
