#!/bin/bash
# The AVX-512 one-token kernel's K-quants and IQ2_XXS, codes transposed by row (4e863a6, ae1ca86),
# against the engine before them (7b573e5): one thread, the two binaries alternated, two runs each.
# Usage: run.sh BASE_BENCH_CPU NEW_BENCH_CPU (bench_cpu built from 7b573e5 and from ae1ca86)
set -euo pipefail
base=$1 new=$2
cd "$(dirname "$0")"
for rep in 1 2; do
  for v in base new; do
    b=$base; [ $v = new ] && b=$new
    "$b" --threads 1 --benchmark_filter='BM_CpuRowsInt8/type:(10|11|12|13|14|16)/isa:2/' > rows_avx512_threads1_${v}_run$rep.txt 2>&1
    "$b" --threads 1 --benchmark_filter='BM_CpuExpertInt8/type:(10|11|12|13|14|16)/E:5120/F:2304/M:1/isa:2/' > expert_avx512_threads1_${v}_run$rep.txt 2>&1
  done
done
