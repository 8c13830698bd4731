#!/bin/bash
# A/B of the K-quant CPU kernels: base a9fe3f7 (BM_CpuRowsInt8 added, kernels as f877d39) against 762f928.
cd /tmp/ab2
BASE=bench_cpu of a9fe3f7 (a worktree build)
NEW=build-dev/bench/bench_cpu (engine 762f928)
ROWS='BM_CpuRowsInt8/'
EXP='BM_CpuExpertInt8/type:(8|39|10|11|12|13|14)/E:5120/F:2304/M:1/isa:[12]/'
for rep in 1 2; do
  for v in base new; do
    b=$BASE; [ $v = new ] && b=$NEW
    $b --threads 1 --benchmark_filter="$ROWS" > rows_threads1_${v}_run$rep.txt 2>&1
  done
done
for rep in 1 2; do
  for th in 1 2; do
    for v in base new; do
      b=$BASE; [ $v = new ] && b=$NEW
      $b --threads $th --benchmark_filter="$EXP" > expert_threads${th}_${v}_run$rep.txt 2>&1
    done
  done
done
echo finished
