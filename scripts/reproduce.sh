#!/usr/bin/env bash
# The main job: generate the synthetic model for this machine and run the seed's experiment on
# it. Usage: scripts/reproduce.sh [BUILD_DIR]   (make reproduce builds first, then calls this)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin="$build/betelgeuse"
[ -x "$bin" ] || { echo "reproduce: $bin not found; run 'make reproduce'" >&2; exit 1; }

# A GPU build on a machine with a GPU runs the device scale; otherwise the ci scale on the CPU.
scale=ci
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ "${BG_FORCE_CI:-0}" != 1 ]; then
  scale=device
fi
mkdir -p models results/"$scale"
model="models/$scale.gguf"
if [ ! -f "$model" ]; then
  "$bin" make-model --scale "scenarios/models/$scale.json" --out "$model" --seed 1
fi
"$bin" info "$model" --no-tensors

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="results/$scale/run-$stamp.json"
echo "reproduce: 64-token prompt, cold then warm pass, 16 decode tokens ($scale scale)"
"$bin" run --model "$model" --prompt-tokens 64 --prompt-seed 1 --passes 2 --gen 16 \
  --prefill layer-major --ubatch 16 --metrics-json "$out"
echo "reproduce: metrics in $out"
