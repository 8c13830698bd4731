#!/usr/bin/env bash
# Stages binaries built here for a GPU machine reached through the device tool: the engine, the
# harness, the GPU tests and the micro-benchmarks, with the shared libraries that machine's image
# lacks (libcgroup, Google Benchmark), into .device-bin/ (ignored by git; name it in `carry`).
# Usage: bash scripts/device-stage.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
stage=.device-bin
rm -rf "$stage" && mkdir -p "$stage"
cp "$build/betelgeuse" "$build/betelgeuse-harness" "$stage/"
for t in "$build"/tests/test_gpu_*; do
  case "$t" in *.cmake) ;; *) cp "$t" "$stage/" ;; esac
done
for b in bench_gpu bench_io; do [ -x "$build/bench/$b" ] && cp "$build/bench/$b" "$stage/"; done
for bin in "$build/betelgeuse-harness" "$build/bench/bench_io"; do
  [ -x "$bin" ] || continue
  ldd "$bin" | awk '/libcgroup|libbenchmark/ {print $3}' | while read -r lib; do cp "$lib" "$stage/"; done
done
grep -qx "/$stage/" .git/info/exclude 2>/dev/null || echo "/$stage/" >> .git/info/exclude
du -sh "$stage"
