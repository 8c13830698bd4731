#!/bin/bash
# The expert job's guided claims (runs of groups, prefetch kept inside a run) against the engine
# before both (c34636f: one group a claim, the K-quant prefetch going on into the next rows,
# most often another member's): full-width experts at one token on both cores of the development
# machine, the two binaries alternated, two runs each.
# Usage: run.sh BASE_BENCH_CPU NEW_BENCH_CPU
set -euo pipefail
base=$1 new=$2
cd "$(dirname "$0")"
for rep in 1 2; do
  for v in base new; do
    b=$base; [ $v = new ] && b=$new
    "$b" --threads 2 --benchmark_min_time=0.3 \
      --benchmark_filter='BM_CpuExpertInt8/type:(10|11|12|13|14|16|39)/E:5120/F:2304/M:1/isa:2/|BM_CpuExpertJobWithoutRows' \
      > expert_avx512_threads2_${v}_run$rep.txt 2>&1
  done
done
