#!/usr/bin/env bash
# Fuzzes the targets with libFuzzer (clang with -fsanitize=fuzzer,address,undefined), in
# parallel, at the lowest priority. New inputs and crash artifacts go under the build folder,
# never into the committed corpus; a crash makes this script exit non-zero.
#   bash fuzz/run-fuzzers.sh [SECONDS per target, default 600] [BUILD_DIR, default build-fuzz]
#   TARGETS="scenario" bash fuzz/run-fuzzers.sh 600    only some (default: gguf gguf_split model scenario blocks)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
build=${2:-build-fuzz}
read -r -a targets <<<"${TARGETS:-gguf gguf_split model scenario blocks}"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBG_ENABLE_CUDA=OFF -DBG_BUILD_TESTS=OFF >/dev/null
nice -n 19 cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]/#/fuzz_}"
pids=()
for t in "${targets[@]}"; do
  work="$build/fuzz-work/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  extra=()
  # Scenarios are text: the schema's words help, and a scenario is small (the committed
  # crashers, replayed by CTest, include larger ones; they are not fuzzing seeds).
  [ "$t" = scenario ] && extra=(-dict=fuzz/scenario.dict -max_len=8192)
  echo "fuzz_$t: ${secs}s, log $work/log"
  nice -n 19 "$build/fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${extra[@]}" "$work/corpus" "fuzz/corpus/$t" \
    >"$work/log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
for t in "${targets[@]}"; do
  echo "== fuzz_$t"; grep -E "stat::|Done [0-9]+ runs|ERROR|FUZZ FINDING|SUMMARY" "$build/fuzz-work/$t/log" || true
  ls "$build/fuzz-work/$t/artifacts"
done
exit $rc
