#!/usr/bin/env bash
# The seed's 4a/4b experiment on the GPU machine with the device scale, plus the baseline, with
# the raw probes measured in the same call. Runs there from binaries staged by
# `scripts/device-check.sh --stage` (device tool, carry [".device-bin"]); writes under $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.device-bin/betelgeuse
out=${OUT:-device-out}
model=${BG_DEVICE_MODEL:-/tmp/bg-device.gguf}
mkdir -p "$out"
# Budgets: the device scale keeps the counts (S = 20 resident, H = 5 hot of 384 experts per
# layer), so each tier holds the same fraction of experts as the rtx3060 profile; the byte
# budgets are sized for this scale's pools plus its dense weights and work buffers.
budgets="--vram-budget ${BG_VRAM_MIB:-4096} --host-budget ${BG_HOST_MIB:-8192}"

[ -f "$model" ] || "$bin" make-model --scale scenarios/models/device.json --out "$model" --seed 1 2>&1 | tail -n 1
"$bin" info "$model" --no-tensors | tee "$out/model-info.txt"
"$bin" probe-pcie --json | tee "$out/probe-pcie.json"
"$bin" probe-disk "$model" --json | tee "$out/probe-disk.json"

run() {  # name, flags...
  local name=$1; shift
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  "$bin" run --backend cuda --model "$model" --prompt-tokens 64 --prompt-seed 1 $budgets "$@" \
    --metrics-json "$out/$name.json" 2> "$out/$name.log" > "$out/$name.tokens"
  grep -E "^pass|^decode" "$out/$name.log"
}
echo "== 4a/4b: pinned-top1, layer-major ubatch 16, promotion"
run seed-4a-4b --passes 2 --gen 16 --routing pinned-top1 --prefill layer-major --ubatch 16 --promote
echo "== 4a/4b with a residency plan profiled on another 256-token prompt (seed 2)"
"$bin" profile --model "$model" --prompt-tokens 256 --prompt-seed 2 --out "$out/plan.json" 2>&1 | tail -n 1
run seed-4a-4b-profiled --passes 2 --gen 16 --routing pinned-top1 --prefill layer-major --ubatch 16 --promote --residency "$out/plan.json"
echo "== exact routing with the data-movement changes"
run exact-optimized --passes 2 --gen 16 --routing exact --prefill layer-major --ubatch 16 --promote
echo "== baseline: exact, token-major ubatch 3, no promotion"
run baseline --passes 2 --gen 4 --routing exact --prefill token-major --ubatch 3
