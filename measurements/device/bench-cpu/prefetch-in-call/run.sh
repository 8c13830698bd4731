#!/bin/bash
# The AVX-512 K-quant and IQ2_XXS kernels with their prefetch kept inside the call's rows (b5bbb1b)
# and the expert job's guided claims (4de4cd3: runs of groups, one kernel call each)
# against the engine before it (c34636f), on every core, as the expert job runs them: full-width
# experts at one token, the two binaries alternated, two runs each (and MXFP4 and Q8_0, whose
# kernel did not change, as a control).
# Usage: run.sh BASE_BENCH_CPU NEW_BENCH_CPU OUT_DIR
set -euo pipefail
base=$1 new=$2 out=$3
mkdir -p "$out"
for rep in 1 2; do
  for v in base new; do
    b=$base; [ $v = new ] && b=$new
    "$b" --benchmark_min_time=0.3 \
      --benchmark_filter='BM_CpuExpertInt8/type:(8|10|11|12|13|14|16|39)/E:5120/F:2304/M:1/isa:2/|BM_CpuExpertJobWithoutRows' \
      > "$out/expert_avx512_${v}_run$rep.txt" 2>&1
  done
done
