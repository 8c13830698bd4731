#!/bin/bash
# IQ2_XXS's CPU row kernel: base b5ed9f0 (BM_CpuRowsInt8 with IQ2_XXS) against bff7c9d, one thread, alternated.
cd /tmp/ab3
BASE=bench_cpu of b5ed9f0 (a worktree build)
NEW=build-dev/bench/bench_cpu (engine bff7c9d)
for rep in 1 2; do
  for v in base new; do
    b=$BASE; [ $v = new ] && b=$NEW
    $b --threads 1 --benchmark_filter='BM_CpuRowsInt8/type:16/' > rows_iq2_xxs_threads1_${v}_run$rep.txt 2>&1
  done
done
echo finished
