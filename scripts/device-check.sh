#!/usr/bin/env bash
# One call on the GPU machine (the device tool): GPU tests, micro-benchmarks and raw-hardware
# probes, from binaries built here. Usage, here:
#   scripts/device-check.sh --stage          # copy the binaries into .device-bin/ (carried)
# and there (device tool, carry [".device-bin"]):
#   bash scripts/device-check.sh --run       # writes logs and JSON under $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
stage=.device-bin
if [ "${1:-}" != "--stage" ]; then . scripts/device-unpack.sh; fi

if [ "${1:-}" = "--stage" ]; then exec bash scripts/device-stage.sh "${2:-build}"; fi

out=${OUT:-device-out}
mkdir -p "$out"
{
  echo "## machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  nproc; free -g | head -2; df -h . | tail -1; uname -r
} 2>&1 | tee "$out/machine.txt"

status=0
export BG_SOURCE_DIR=$PWD BG_TEST_MODELS_DIR=/tmp/bg-test-models
mkdir -p "$BG_TEST_MODELS_DIR"
# The device-scale routing agreement test (GpuE2E.DeviceScaleSameExpertsAsTheCpuBackend) runs
# where the device-scale model exists (device-reproduce.sh writes it); it skips, visibly, elsewhere.
if [ -f models/device.gguf ]; then export BG_DEVICE_MODEL=$PWD/models/device.gguf; fi
echo "## GPU tests"
for t in "$stage"/test_gpu_*; do
  "$t" --gtest_output="json:$out/$(basename "$t").json" > "$out/$(basename "$t").log" 2>&1 || status=1
  tail -n 4 "$out/$(basename "$t").log"
done

echo "## probes"
"$stage/betelgeuse" probe-pcie --json | tee "$out/probe-pcie.json"
probe_file=/tmp/bg-probe.bin
[ -f "$probe_file" ] || dd if=/dev/urandom of="$probe_file" bs=16M count=256 status=none
"$stage/betelgeuse" probe-disk "$probe_file" --json | tee "$out/probe-disk.json"
"$stage/betelgeuse" probe-disk "$probe_file" --json --queue-depth 1 | tee "$out/probe-disk-qd1.json"

echo "## micro-benchmarks"
for b in bench_gpu bench_io; do
  [ -x "$stage/$b" ] || continue
  LD_LIBRARY_PATH="$stage${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" BG_BENCH_DIR=/tmp "$stage/$b" --benchmark_min_time=0.2 --benchmark_out="$out/$b.json" --benchmark_out_format=json 2>&1 | tail -n 30
done
exit $status
