#!/usr/bin/env bash
# The main job: run the seed's experiment on this machine through the harness: the seed
# scenarios and the ablation of the machine's profile, each in a memory cgroup, then print the
# tables and where they are. The harness generates the profile's model on first use.
# Usage: scripts/reproduce.sh [BUILD_DIR]   (make reproduce builds first, then calls this)
#   BG_FORCE_CI=1  use the ci profile even where a GPU is present
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
harness="$build/betelgeuse-harness"
[ -x "$harness" ] || { echo "reproduce: $harness not found; run 'make reproduce'" >&2; exit 1; }

# A machine with a GPU runs the device profile (device scale, budgets scaled to the published
# PC's tier fractions); otherwise the ci profile on the CPU backend.
profile=ci
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ "${BG_FORCE_CI:-0}" != 1 ]; then
  profile=device
fi
echo "reproduce: profile $profile (scenarios/$profile/)"

# The harness refuses to run without a memory cgroup (exit 4) unless told; here that is told
# loudly, once, and every result records it.
cgroup_flag=()
run_one() {
  local cmd=$1 scenario=$2 rc=0
  "$harness" "$cmd" "scenarios/$profile/$scenario.json" --out results --quiet "${cgroup_flag[@]}" || rc=$?
  if [ "$rc" -eq 4 ] && [ ${#cgroup_flag[@]} -eq 0 ]; then
    echo "reproduce: NOTE: no memory cgroup can be created here (see the reason above); running without one" \
         "(--no-cgroup, recorded in each result)" >&2
    cgroup_flag=(--no-cgroup)
    rc=0
    "$harness" "$cmd" "scenarios/$profile/$scenario.json" --out results --quiet "${cgroup_flag[@]}" || rc=$?
  fi
  return "$rc"
}

for s in seed-4a-4b seed-500-baseline seed-500-optimized decode; do
  run_one run "$s"
done
run_one ablate ablation

echo
echo "================================================================================"
latest=()
for s in seed-4a-4b seed-500-baseline seed-500-optimized decode ablation; do
  md=$(ls -1 "results/$profile/$s"/*.md 2>/dev/null | sort | tail -1)
  [ -n "$md" ] || continue
  latest+=("$md")
  cat "$md"
  echo "--------------------------------------------------------------------------------"
done
echo "reproduce: results (JSON with every metric, Markdown tables, ablation chart):"
for md in "${latest[@]}"; do
  echo "  ${md%.md}.json"
  echo "  $md"
  [ -f "${md%.md}.svg" ] && echo "  ${md%.md}.svg"
done
echo "reproduce: regenerate the Markdown and charts with: $harness report results/$profile"
