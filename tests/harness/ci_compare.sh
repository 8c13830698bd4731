#!/usr/bin/env bash
# CI gate (registered with CTest from harness/CMakeLists.txt): run the ci-scale seed-4a-4b
# scenario through the harness in a memory cgroup and compare it with the committed baseline.
# Where this machine cannot create cgroups the run uses --no-cgroup and says so (the result
# records it too). The planted-regression check lives in tests/test_harness_compare.cpp.
# Usage: ci_compare.sh BUILD_DIR SOURCE_DIR [speeds|counters-only]
#   counters-only: for sanitizer and debug builds, whose timings say nothing about the engine
set -euo pipefail
build=$1
src=$2
mode=${3:-speeds}
harness="$build/betelgeuse-harness"
out=$(mktemp -d "${TMPDIR:-/tmp}/bg-harness-ci.XXXXXX")
trap 'rm -rf "$out"' EXIT

set +e
"$harness" run "$src/scenarios/ci/seed-4a-4b.json" --out "$out" --quiet
rc=$?
set -e
if [ "$rc" -eq 4 ]; then
  echo "ci_compare: NOTE: memory cgroups cannot be created on this machine; running with --no-cgroup"
  "$harness" run "$src/scenarios/ci/seed-4a-4b.json" --out "$out" --quiet --no-cgroup
elif [ "$rc" -ne 0 ]; then
  echo "ci_compare: the harness run failed (exit $rc)" >&2
  exit "$rc"
fi
new=$(ls "$out"/ci/seed-4a-4b/*.json)
if [ "$mode" = counters-only ]; then
  echo "ci_compare: NOTE: a sanitizer or debug build: counters are compared, speeds shown but not judged"
  "$harness" compare "$src/results/ci/baseline.json" "$new" --counters-only
else
  "$harness" compare "$src/results/ci/baseline.json" "$new"
fi
