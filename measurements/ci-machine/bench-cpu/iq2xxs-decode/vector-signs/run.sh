#!/bin/bash
# IQ2_XXS: bff7c9d against its successor, one thread, alternated.
cd vector-signs
BASE=bench_cpu of bff7c9d (a worktree build)
NEW=build-dev/bench/bench_cpu (engine 386df59)
for rep in 1 2; do
  for v in base new; do
    b=$BASE; [ $v = new ] && b=$NEW
    $b --threads 1 --benchmark_filter='BM_CpuRowsInt8/type:16/' > rows_iq2_xxs_threads1_${v}_run$rep.txt 2>&1
  done
done
echo finished
