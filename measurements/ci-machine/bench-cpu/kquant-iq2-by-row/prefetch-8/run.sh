#!/bin/bash
# Prefetch distance 4 blocks (ae1ca86) against 8 (657e9e7): one thread, alternated, two runs each.
# Usage: run.sh BENCH_CPU_OF_AE1CA86 BENCH_CPU_OF_657E9E7
set -euo pipefail
base=$1 new=$2
cd "$(dirname "$0")"
for rep in 1 2; do
  for v in base new; do
    b=$base; [ $v = new ] && b=$new
    "$b" --threads 1 --benchmark_min_time=0.3 \
      --benchmark_filter='BM_CpuRowsInt8/type:(10|11|12|13|14|16)/isa:2/cached:0|BM_CpuExpertInt8/type:(10|11|12|13|14|16)/E:5120/F:2304/M:1/isa:2/' \
      > prefetch_threads1_${v}_run$rep.txt 2>&1
  done
done
