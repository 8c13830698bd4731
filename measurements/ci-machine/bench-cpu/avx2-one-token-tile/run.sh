#!/bin/bash
# The AVX2 kernel's one-token tile: 03298cb against its successor, one thread, alternated.
cd "$(dirname "$0")"
BASE=bench_cpu of 03298cb (a worktree build)
NEW=build-dev/bench/bench_cpu (engine 1e12494)
for rep in 1 2; do
  for v in base new; do
    b=$BASE; [ $v = new ] && b=$NEW
    $b --threads 1 --benchmark_filter='BM_CpuRowsInt8/type:(10|11|12|13|14|16)/isa:1/' > rows_avx2_threads1_${v}_run$rep.txt 2>&1
    $b --threads 1 --benchmark_filter='BM_CpuExpertInt8/type:(10|11|12|13|14)/E:5120/F:2304/M:1/isa:1/' > expert_avx2_threads1_${v}_run$rep.txt 2>&1
  done
done
echo finished
