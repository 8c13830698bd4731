#!/usr/bin/env bash
# The reproduction on a GPU machine through the device tool, in parts that each fit one call
# (10 minutes). Binaries are built here and staged; the model is generated there on first use.
#   here:   bash scripts/device-reproduce.sh --stage [BUILD]      # scripts/device-stage.sh: -> .device-bin/ (carried)
#   there:  bash scripts/device-reproduce.sh --run PART...        # carry [".device-bin"]
#   there:  bash scripts/device-reproduce.sh --background PART... # then, next call: --wait SECONDS
# Parts:
#   device-model  make-model for the device scale (models/device.gguf; about 40 s)
#   check      machine description, GPU tests (with the device-scale agreement test where
#              models/device.gguf exists: run device-model first), raw probes
#   4a4b       harness: scenarios/device/seed-4a-4b
#   decode     harness: scenarios/device/decode
#   decode-preloaded  harness: scenarios/device/decode-preloaded and -gpu (exact routing, every expert in host slots,
#              preloaded; issue 24's 35.5 tok/s target, llama.cpp --cpu-moe's decode on this model)
#   decode-preloaded-timeline  CUPTI trace of 32 device-scale decode tokens with decode-preloaded's flags, hybrid and gpu
#              -> measurements/device/decode-timeline/
#   fidelity   engine: pinned-top1 and resident-only against exact (64 and 500 tokens) -> measurements/
#   probes     engine: pinned-copy probes from one device-scale expert to 256 MiB -> measurements/
#   bench      bench_gpu: kernel micro-benchmarks with same-run probes -> measurements/device/bench/;
#              all of them ran past 7 minutes on the H200 (2026-12-01, cut short), so pick with
#              BG_BENCH_FILTER: 'D2D|ExpertFused|ExpertMxfp4' (experts), 'D2D|Dense' (dense weights)
#              and give it arguments with BG_BENCH_ARGS (e.g. '--sm-limit 24': every benchmark on 24 SMs)
#   cpu-kernels  the CPU integer kernels' tests (test_int8_matmul, test_kquants) on the GPU machine's host -> measurements/device/cpu-kernels/
#   cpu-bench  bench_cpu: the CPU expert kernels (portable, AVX2 and AVX-512 row kernels, M = 1, 4, 16) against
#              the host-memory read probe of the same run, and each row kernel alone on one thread with its
#              weights cached and from memory (BM_CpuRowsInt8) -> measurements/device/bench-cpu/
#   kernel-profile  Nsight Compute (ncu) on the fused MXFP4 expert at 1, 8 and 64 tokens -> measurements/device/kernel-profile/
#   kernel-sass  ncu instruction statistics of the fused MXFP4 expert at 1 token, and its SASS -> measurements/device/kernel-profile/
#   drop-models  removes models/*.gguf (the 64 GiB disk holds the device scale or the slice, not both)
#   ablation   harness: scenarios/device/ablation (the longest part: about 9 minutes on an H200)
#   500        harness: scenarios/device/seed-500-baseline and seed-500-optimized
#   500opt     harness: scenarios/device/seed-500-optimized alone (its baseline runs beside it)
# The slice profile (full width, 5 layers, 39.9 GB; models/slice.gguf is generated there on first
# use, outside every carried folder, by the harness from scenarios/models/slice.json):
#   slice-model     make-model for the slice alone (about a minute on 16 cores)
#   slice-4a4b      harness: scenarios/slice/seed-4a-4b
#   slice-3060      harness: scenarios/slice/rtx3060-proxy (seed-4a-4b on 28 SMs, --sm-limit: 24 on
#                   an H200) and its projection for the RTX 3060
#   slice-decode    harness: scenarios/slice/decode (--decode-experts hybrid), decode-gpu and decode-cpu
#   slice-decode-hybrid  harness: scenarios/slice/decode alone (a call short of device time)
#   slice-engram-read-ahead  harness: scenarios/slice/decode-engram-read-ahead between two runs of
#                   decode-no-engram-read-ahead (Engram read-ahead on between two runs with it off, one machine;
#                   the runs of 2026-12-03 12:44-12:57 ran decode, on by default then, around the scenario with it off)
#   slice-decode-repeat  harness: scenarios/slice/decode and decode-preloaded three times each, one machine (hybrid
#                   decode's CPU experts took 0.27-0.42 ms in some runs of 2026-12-03 and 2.3-4.2 ms in others)
#   slice-decode-hot-pool  harness: scenarios/slice/decode-hot-pool (decode with hot-pool routing, ours:
#                   an interpretation of the seed's sentence; compare with slice-decode)
#   slice-decode-threads  engine: decode with --decode-experts gpu | cpu | hybrid and the CPU's threads -> measurements/slice/decode-threads/
#   slice-decode-preloaded  harness: scenarios/slice/decode-preloaded, -gpu and -500 (exact routing, --slots max: every expert in
#                   host slots, preloaded at start-up, 40 GiB host budget; issue 24's target beside llama.cpp --cpu-moe)
#   slice-500       harness: scenarios/slice/seed-500-baseline and seed-500-optimized (one repetition each)
#   slice-500-baseline  harness: scenarios/slice/seed-500-baseline alone (about 5 minutes on an H200)
#   slice-ablation  harness: scenarios/slice/ablation (nine configurations, one repetition)
#   slice-warm      engine: seed-500-optimized's configuration alone, cold then warm pass -> measurements/slice/warm-pass/
#   slice-kernels   Nsight Systems per-kernel GPU time of the slice-warm run -> measurements/slice/kernel-summary/
#   slice-timeline  Nsight Systems GPU trace of the 64-token cold+warm run: gaps, launches, streams -> measurements/slice/timeline/ (BG_TIMELINE_UBATCH: units other than 16)
#   slice-decode-timeline  CUPTI trace of 32 decode tokens (all resident experts in VRAM; --decode-experts gpu) -> measurements/slice/decode-timeline/
#   slice-ubatch    engine: the warm pass with launches of 16, 32 and 64 tokens (--launch-tokens; dense weights read once a launch) -> measurements/slice/ubatch/, on all SMs and on 28 (--sm-limit)
#   slice-short-prompts  engine: the warm prefill of 2-12-token prompts with --host-expert-positions 1 and 16, alternated
#                   (issue 24's small prefill units on the decode split) -> measurements/slice/short-prompts/
#   slice-decode-ab  engine: two builds alternated on one machine (BG_STAGE_BASE=path at staging puts the other as
#                   betelgeuse.base), slice decode hybrid and all-in-VRAM -> measurements/slice/decode-ab/
#   slice-fidelity  engine: resident-only and pinned-top1 against exact, 64 and 500 tokens -> measurements/slice/
# The slice as llama-quantize's Q2_K preset makes it (scenarios/models/slice-q2_k.json, about 26 GB;
# drop-models first where the MXFP4 slice is there: both do not fit the 64 GiB disk with room):
#   slice-q2_k-model   make-model --quant Q2_K for it, and plan: bytes per expert, experts the budgets hold
#   slice-q2_k-4a4b    harness: scenarios/slice-q2_k/seed-4a-4b (S 20, H 5 as MXFP4) and seed-4a-4b-s28-h17
#   slice-q2_k-decode  harness: scenarios/slice-q2_k/decode and decode-s28-h17
#   slice-q4_k_m-model, slice-q4_k_m-4a4b, slice-q4_k_m-decode: the same for Q4_K_M (about 42.7 GB; S 20, H 5 only:
#                      the published PC's budgets do not hold more with it). make-model takes about 7 minutes for
#                      either on 16 cores (K-quant rounding searches; MXFP4's slice about one)
# Suggested calls (estimates from the 4-layer measurement of issue 13, not timed): --run slice-model
# slice-4a4b slice-decode slice-500 (the 500-token baseline reads about 160 GB on demand), then
# --run slice-ablation slice-fidelity; a call cut at its limit still brings back every part that
# finished, and a fresh machine regenerates the model first (about a minute).
# Harness results land in results/<profile>/, engine measurements in measurements/<profile>/;
# each profile comes back as one archive under $OUT
# (the device tool returns at most 8 files, two folders deep).
set -uo pipefail
cd "$(dirname "$0")/.."
# BG_STAGE: where the binaries are, for a background part (below); else the carried folder.
stage=${BG_STAGE:-.device-bin}
if [ "${1:-}" != "--stage" ]; then . scripts/device-unpack.sh; fi
stage=$(cd "$stage" 2>/dev/null && pwd || echo "$stage")

if [ "${1:-}" = "--stage" ]; then exec bash scripts/device-stage.sh "${2:-build}"; fi
# Parts longer than one call (the slice ablation: two token-major configurations read about 160 GB
# each on the 500-token prompt, about 13 minutes in all) run in a process session of their own,
# which outlives the call while the machine stays warm; the next call, made within the machine's
# idle time, waits for it with --wait and brings back what it wrote.
bg=/tmp/betelgeuse-background
if [ "${1:-}" = "--background" ]; then
  shift
  rm -rf "$bg" && mkdir -p "$bg/out"
  # The binaries too run from outside the tree: the next call's copy of the tree removed the
  # unpacked .device-bin under a running background part once (2026-12-03: the harness was gone
  # when the part after make-model started).
  cp -r "$stage" "$bg/bin"
  setsid bash -c 'OUT="$1/out" BG_RESULTS_ROOT="$1/tree" BG_STAGE="$1/bin" bash scripts/device-reproduce.sh --run "${@:2}" > "$1/log" 2>&1; echo $? > "$1/rc"' \
    _ "$bg" "$@" < /dev/null > /dev/null 2>&1 &
  echo "background: parts $* started (pid $!); collect with --wait SECONDS"
  exit 0
fi
if [ "${1:-}" = "--wait" ]; then
  deadline=$(( $(date +%s) + ${2:-540} ))
  [ -d "$bg" ] || { echo "--wait: nothing runs in the background here (a fresh machine?)" >&2; exit 2; }
  while [ ! -f "$bg/rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  out=${OUT:-device-out}; mkdir -p "$out"
  cp "$bg"/out/* "$out/" 2>/dev/null
  grep -E "^== |^\| |Same-run|^fidelity" "$bg/log" | tail -n 60
  if [ -f "$bg/rc" ]; then echo "background finished, rc $(cat "$bg/rc")"; exit "$(cat "$bg/rc")"; fi
  echo "background still running; call --wait again within the machine's idle time"; exit 3
fi
[ "${1:-}" = "--run" ] || { echo "usage: $0 --stage [BUILD] | --run PART..." >&2; exit 2; }
shift
out=${OUT:-device-out}
# Where results/ and measurements/ are written: the working tree, or (--background) a folder
# outside it, since the device tool re-copies the tree at the start of every call and removes
# files it does not have (a background part's output written there was lost once).
root=${BG_RESULTS_ROOT:-.}
mkdir -p "$out" "$root/results/device" "$root/results/slice"
export LD_LIBRARY_PATH="$stage${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$stage/betelgeuse
harness=$stage/betelgeuse-harness
status=0
log=$out/device-reproduce.log
note() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$log"; }
# A CUDA tool (ncu, nsys, cuobjdump) on PATH or where the toolkit and Nsight install it; empty if none.
cuda_tool() {
  command -v "$1" || ls /usr/local/cuda*/bin/"$1" /opt/nvidia/nsight-compute/*/"$1" /opt/nvidia/nsight-systems/*/bin/"$1" \
    /usr/local/cuda*/nsight-systems*/bin/"$1" 2>/dev/null | head -n 1
}

# The host's CPU time stolen by the hypervisor (jiffies, all vCPUs; /proc/stat's eighth field)
# and the dirty page cache waiting for writeback (kB), for "steal and writeback" lines: the CPU's
# decode experts ran 3-8x slower on some machines and not others (REPRODUCING.md, 2026-12-03/04),
# and these are two causes the logs could not rule out. A third, transparent huge pages (the
# CPU's expert reads go through 4 KiB pages where there are none), is logged once a call below.
host_counters() { awk '/^cpu /{s=$9} END{printf "%s", s}' /proc/stat; printf " "; awk '/^Dirty:/{printf "%s", $2}' /proc/meminfo; }
# The line for what ran since host_counters gave $1 at $2 (seconds since the epoch).
host_delta() {
  local now; now=$(host_counters)
  echo "steal and writeback: +$(( ${now%% *} - ${1%% *} )) jiffies of steal over $(( $(date +%s) - $2 )) s on $(nproc) vCPUs; dirty pages ${1##* } kB before, ${now##* } kB after"
}
note "host: THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null); $(grep -E '^AnonHugePages' /proc/meminfo)"
harness_run() {  # run|ablate scenario [profile]
  local profile=${3:-device}
  note "harness $1 $profile/$2"
  local before t0
  before=$(host_counters); t0=$(date +%s)
  "$harness" "$1" "scenarios/$profile/$2.json" --out "$root/results" --quiet 2>&1 | tail -n 25 | tee -a "$log" || status=1
  host_delta "$before" "$t0" | tee -a "$log"
  local md
  md=$(ls -1 "$root/results/$profile/$2"/*.md 2>/dev/null | sort | tail -1)
  [ -n "$md" ] && cat "$md" | tee -a "$log" >/dev/null && grep -E "^\| |Hardware use|  - |Same-run|Decode|Partition" "$md"
}

slice_model() {  # [SCALE] (default slice): the harness would generate it too; done first so its time is logged on its own
  local scale=${1:-slice}
  [ -f "models/$scale.gguf" ] && return 0
  note "make-model $scale"
  mkdir -p models
  df -h . | tail -1 | tee -a "$log"
  local quant; quant=$(sed -n 's/.*"quant": *"\([^"]*\)".*/\1/p' "scenarios/models/$scale.json")
  "$bin" make-model --scale "scenarios/models/$scale.json" ${quant:+--quant "$quant"} --out "models/$scale.gguf" --seed 1 2>&1 \
    | tail -n 1 | tee -a "$log" || status=1
  ls -la "models/$scale.gguf" | tee -a "$log"
}

# A traced decode run's summary (the decode timeline parts): the decode ends the trace, so its
# window is the decode's wall time, from "decode: N tokens, X tok/s" in DIR/run-CFG.log (on the line
# of the generated text, which has no newline of its own); the trace is compressed and read by
# scripts/gpu-timeline.py over that window into DIR/summary-CFG.txt (and, for hybrid and cpu, by
# scripts/decode-chain.py into DIR/chain-CFG.txt).
decode_trace_summary() {  # part dir cfg
  local part=$1 dir=$2 cfg=$3 dec dec_ms
  dec=$(grep -oE "decode: [0-9]+ tokens, [0-9.]+ tok/s" "$dir/run-$cfg.log" | tail -n 1)
  echo "$dec" | tee -a "$log"
  [ -f "$dir/trace-$cfg.csv" ] || { note "$part: the tracer wrote no trace for $cfg"; status=1; return; }
  xz -9 -f "$dir/trace-$cfg.csv"
  dec_ms=$(echo "$dec" | awk '{printf "%.3f", $2 / $4 * 1000}')
  python3 scripts/gpu-timeline.py "$dir/trace-$cfg.csv.xz" --window-ms "$dec_ms" 2>&1 | tee "$dir/summary-$cfg.txt" | head -n 40 | tee -a "$log" || status=1
  # Hybrid and cpu runs: the per-layer and per-token chain (scripts/decode-chain.py).
  case $cfg in hybrid|cpu) python3 scripts/decode-chain.py "$dir/trace-$cfg.csv.xz" 2>&1 | tee "$dir/chain-$cfg.txt" | tee -a "$log" || status=1 ;; esac
}

# What plan says of a K-quant slice: its experts' bytes, and how many experts the slice's budgets
# and the published PC's 12 GiB budgets (the full model in the same preset) hold.
kquant_plan() {  # SCALE
  local dir="$root/measurements/$1/plan"
  mkdir -p "$dir"
  local quant; quant=$(sed -n 's/.*"quant": *"\([^"]*\)".*/\1/p' "scenarios/models/$1.json")
  "$bin" plan --model "models/$1.gguf" --backend cuda -f scenarios/prompts/64-tokens.txt --routing resident-only \
    --transient-slots 12 --vram-budget 3068 --host-budget 2875 --cgroup-memory 2875 > "$dir/slice-budgets.txt" 2>&1
  "$bin" plan --scale scenarios/models/full.json --quant "$quant" -f scenarios/prompts/64-tokens.txt --routing resident-only \
    --transient-slots 12 --cgroup-memory 12288 > "$dir/full-rtx3060-budgets.txt" 2>&1
  grep -h -E "per expert|budgets hold" "$dir"/*.txt | tee -a "$log"
}

for part in "$@"; do
  case "$part" in
    check)
      note "machine"
      { nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
        nproc; free -g | head -2; df -h . | tail -1; uname -r; } 2>&1 | tee "$out/machine.txt"
      export BG_SOURCE_DIR=$PWD BG_TEST_MODELS_DIR=/tmp/bg-test-models
      mkdir -p "$BG_TEST_MODELS_DIR"
      # The device-scale routing agreement test runs where the device-scale model exists (4a4b,
      # 500 or fidelity write it); it skips, visibly, elsewhere.
      if [ -f models/device.gguf ]; then export BG_DEVICE_MODEL=$PWD/models/device.gguf; fi
      note "GPU tests"
      # The logs also go into the archive (the device tool returns at most 8 files).
      mkdir -p "$root/measurements/device/gpu-tests"
      cp "$out/machine.txt" "$root/measurements/device/gpu-tests/"
      # BG_GPU_TESTS: a space-separated subset (e.g. "test_gpu_e2e test_gpu_backend"); all by default.
      for t in "$stage"/test_gpu_*; do
        if [ -n "${BG_GPU_TESTS:-}" ] && [[ " $BG_GPU_TESTS " != *" $(basename "$t") "* ]]; then continue; fi
        timeout 300 "$t" > "$out/$(basename "$t").log" 2>&1 || status=1
        tail -n 3 "$out/$(basename "$t").log" | tee -a "$log"
        cp "$out/$(basename "$t").log" "$root/measurements/device/gpu-tests/"
      done
      ;;
    device-model) note "make-model device"; mkdir -p models; [ -f models/device.gguf ] || "$bin" make-model --scale scenarios/models/device.json --out models/device.gguf --seed 1 2>&1 | tail -n 3 | tee -a "$log" ;;
    4a4b) harness_run run seed-4a-4b ;;
    decode) harness_run run decode ;;
    decode-preloaded) slice_model device; harness_run run decode-preloaded; harness_run run decode-preloaded-gpu ;;
    500) harness_run run seed-500-baseline; harness_run run seed-500-optimized ;;
    500opt) harness_run run seed-500-optimized ;;
    ablation) harness_run ablate ablation ;;
    slice-model) slice_model ;;
    slice-4a4b) slice_model; harness_run run seed-4a-4b slice ;;
    slice-3060) slice_model; harness_run run rtx3060-proxy slice ;;
    slice-decode) slice_model; harness_run run decode slice; harness_run run decode-gpu slice; harness_run run decode-cpu slice ;;
    slice-decode-hybrid) slice_model; harness_run run decode slice ;;
    slice-engram-read-ahead) slice_model; harness_run run decode-no-engram-read-ahead slice
      harness_run run decode-engram-read-ahead slice; harness_run run decode-no-engram-read-ahead slice ;;
    slice-decode-hot-pool) slice_model; harness_run run decode-hot-pool slice ;;
    slice-decode-repeat) slice_model; for rep in 1 2 3; do harness_run run decode slice; harness_run run decode-preloaded slice; done ;;
    slice-decode-preloaded) slice_model; harness_run run decode-preloaded slice; harness_run run decode-preloaded-gpu slice; harness_run run decode-preloaded-500 slice ;;
    slice-500) slice_model; harness_run run seed-500-baseline slice; harness_run run seed-500-optimized slice ;;
    slice-500-baseline) slice_model; harness_run run seed-500-baseline slice ;;
    slice-q2_k-model) slice_model slice-q2_k; kquant_plan slice-q2_k ;;
    slice-q2_k-4a4b) slice_model slice-q2_k; harness_run run seed-4a-4b slice-q2_k; harness_run run seed-4a-4b-s28-h17 slice-q2_k ;;
    slice-q2_k-decode) slice_model slice-q2_k; harness_run run decode slice-q2_k; harness_run run decode-s28-h17 slice-q2_k ;;
    slice-q4_k_m-model) slice_model slice-q4_k_m; kquant_plan slice-q4_k_m ;;
    slice-q4_k_m-4a4b) slice_model slice-q4_k_m; harness_run run seed-4a-4b slice-q4_k_m ;;
    slice-q4_k_m-decode) slice_model slice-q4_k_m; harness_run run decode slice-q4_k_m ;;
    slice-ablation) slice_model; harness_run ablate ablation slice ;;
    slice-warm)
      # The warm pass of issue 14's target, alone (no same-run baseline, which takes minutes):
      # the engine with seed-500-optimized's configuration, a cold then a warm pass, metrics
      # (GPU busy, PCIe bytes, Engram disk time) as JSON. Outside a cgroup: an engine
      # measurement, not a harness result.
      slice_model
      mkdir -p "$root/measurements/slice/warm-pass"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$root/measurements/slice/warm-pass/machine.txt"
      note "slice warm pass (500 tokens, resident-only, layer-major, promotion)"
      "$bin" run --backend cuda --model models/slice.gguf --file scenarios/prompts/500-tokens.txt --passes 2 --gen 16 --ignore-eos \
        --routing resident-only --prefill layer-major --ubatch 16 --promote --slots 20 --hot 5 --transient-slots 12 \
        --lru-slots 0 --io uring --queue-depth 64 --read-size 1048576 --host-budget 2875 --vram-budget 3068 \
        --engram-buffer 2048 --threads 0 --metrics-json "$root/measurements/slice/warm-pass/metrics.json" \
        > "$root/measurements/slice/warm-pass/run.log" 2>&1 || status=1
      grep -E "^pass|^decode|error" "$root/measurements/slice/warm-pass/run.log" | tee -a "$log"
      ;;
    slice-kernels)
      # Where the GPU time of a real forward goes: Nsight Systems' per-kernel summary of the
      # slice warm-pass run (cold pass, warm pass and 16 decode tokens together), or, without
      # nsys, Nsight Compute's duration of every kernel of a 64-token run.
      slice_model
      dir="$root/measurements/slice/kernel-summary"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      nsys_bin=$(cuda_tool nsys)
      run_args=(run --backend cuda --model models/slice.gguf --ignore-eos --routing resident-only --prefill layer-major --ubatch 16
        --promote --slots 20 --hot 5 --transient-slots 12 --lru-slots 0 --host-budget 2875 --vram-budget 3068 --threads 0)
      if [ -n "$nsys_bin" ]; then
        note "nsys: slice, 500 tokens, 2 passes, 16 decode tokens"
        "$nsys_bin" profile -o /tmp/bg-slice --force-overwrite true --trace cuda --sample none --cpuctxsw none \
          "$bin" "${run_args[@]}" --file scenarios/prompts/500-tokens.txt --passes 2 --gen 16 > "$dir/run.log" 2>&1 || status=1
        "$nsys_bin" stats --report cuda_gpu_kern_sum --format csv --output "$dir/kern" /tmp/bg-slice.nsys-rep > /dev/null 2>&1 || status=1
        "$nsys_bin" stats --report cuda_gpu_kern_sum /tmp/bg-slice.nsys-rep 2>/dev/null | head -n 40 | tee -a "$log"
      else
        ncu_bin=$(cuda_tool ncu)
        note "no nsys; ncu durations: slice, 64 tokens, 2 passes, 4 decode tokens"
        "$ncu_bin" --metrics gpu__time_duration.sum --csv --page raw "$bin" "${run_args[@]}" --prompt-tokens 64 \
          --passes 2 --gen 4 > "$dir/ncu-durations.csv" 2> "$dir/run.log" || status=1
        xz -9 -f "$dir/ncu-durations.csv"
        python3 scripts/ncu-kernel-summary.py "$dir/ncu-durations.csv.xz" > "$dir/kernel-summary.txt" || status=1
        head -n 25 "$dir/kernel-summary.txt" | tee -a "$log"
      fi
      ;;
    slice-timeline)
      # Where the warm pass's GPU time goes beyond the kernels themselves (issue 22: the part no SM
      # count changes): Nsight Systems' full GPU trace (every kernel and copy with its stream,
      # start and end) and the CUDA API summary (launch counts) of seed-4a-4b's 64-token
      # configuration, cold then warm pass, no decode; scripts/gpu-timeline.py reads the trace.
      slice_model
      dir="$root/measurements/slice/timeline"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      nsys_bin=$(cuda_tool nsys)
      run_args=(run --backend cuda --model models/slice.gguf --file scenarios/prompts/64-tokens.txt --passes 2 --gen 0
        --routing resident-only --prefill layer-major --ubatch ${BG_TIMELINE_UBATCH:-16} --promote --slots 20 --hot 5 --transient-slots 12
        --host-budget 2875 --vram-budget 3068 --threads 0 ${BG_TIMELINE_ARGS:-})
      if [ -n "$nsys_bin" ]; then
        note "nsys timeline: slice, 64 tokens, cold + warm pass"
        "$nsys_bin" profile -o /tmp/bg-timeline --force-overwrite true --trace cuda --sample none --cpuctxsw none \
          "$bin" "${run_args[@]}" > "$dir/run.log" 2>&1 || status=1
        "$nsys_bin" stats --report cuda_gpu_trace --format csv --output "$dir/trace" /tmp/bg-timeline.nsys-rep > /dev/null 2>&1 || status=1
        "$nsys_bin" stats --report cuda_api_sum --format csv --output "$dir/api" /tmp/bg-timeline.nsys-rep > /dev/null 2>&1 || status=1
      else
        # No Nsight Systems: the CUPTI tracer (bench/cupti_trace.cpp), loaded by the driver.
        note "CUPTI timeline: slice, 64 tokens, cold + warm pass"
        CUDA_INJECTION64_PATH=$stage/libbg_cupti_trace.so LD_LIBRARY_PATH=$stage:${LD_LIBRARY_PATH:-} \
          BG_CUPTI_TRACE_OUT="$dir/trace.csv" "$bin" "${run_args[@]}" > "$dir/run.log" 2>&1 || status=1
      fi
      if [ -n "$(ls "$dir"/trace*.csv 2>/dev/null)" ]; then
        xz -9 -f "$dir"/trace*.csv
        grep -E "^pass" "$dir/run.log" | tee -a "$log"
        # The warm pass ends the trace (no decode): read the last pass's wall time off the run log.
        warm_ms=$(grep -E "^pass" "$dir/run.log" | tail -n 1 | sed -E 's/.* tokens in ([0-9.]+) ms.*/\1/')
        { python3 scripts/gpu-timeline.py "$dir"/trace*.csv.xz --window-ms "$warm_ms"; echo; echo "== whole trace"; \
          python3 scripts/gpu-timeline.py "$dir"/trace*.csv.xz; } 2>&1 | tee "$dir/summary.txt" | head -n 40 | tee -a "$log" || status=1
      else
        note "slice-timeline: no trace (neither nsys nor $stage/libbg_cupti_trace.so gave one)"; status=1
      fi
      ;;
    slice-decode-timeline)
      # Where a decode token's GPU time goes (issue 24: the GPU's per-token work, launch gaps): the
      # CUPTI trace of 32 decoded tokens after a warm 64-token pass, (a) every resident expert in
      # VRAM (--hot 20: no copies, the GPU's own chain) and (b) the decode scenario's budgets with
      # --decode-experts gpu; each read by scripts/gpu-timeline.py over the decode's window.
      slice_model
      dir="$root/measurements/slice/decode-timeline"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      if [ ! -f "$stage/libbg_cupti_trace.so" ]; then
        # device-stage.sh copies the tracer only where the build found CUPTI (2026-12-04: a fresh
        # development machine without it staged none, and this part ran untraced without a word).
        note "slice-decode-timeline: no libbg_cupti_trace.so in $stage (build it where CUPTI exists, or scripts/device-build.sh there)"
        status=1; continue
      fi
      # BG_TIMELINE_CFGS: vram, gpu and hybrid (the decode scenario's budgets, --decode-experts hybrid).
      # BG_TIMELINE_API=1: the host's CUDA runtime calls too (trace-CFG.csv.api.csv.xz; each call
      # about a microsecond longer, so the decode rate is not this part's figure then).
      for cfg in ${BG_TIMELINE_CFGS:-vram gpu}; do
        where=gpu; [ $cfg = hybrid ] && where=hybrid
        if [ $cfg = vram ]; then budget=(--slots 20 --hot 20 --vram-budget 8000 --host-budget 2875)
        else budget=(--slots 20 --hot 5 --transient-slots 12 --lru-slots 0 --host-budget 2875 --vram-budget 3068); fi
        note "CUPTI timeline: slice decode, $cfg"
        CUDA_INJECTION64_PATH=$stage/libbg_cupti_trace.so LD_LIBRARY_PATH=$stage:${LD_LIBRARY_PATH:-} \
          BG_CUPTI_TRACE_OUT="$dir/trace-$cfg.csv" BG_CUPTI_API=${BG_TIMELINE_API:-0} "$bin" run --backend cuda --model models/slice.gguf \
          --file scenarios/prompts/64-tokens.txt --passes 2 --gen 32 --ignore-eos --routing resident-only \
          --prefill layer-major --ubatch 16 --promote "${budget[@]}" --threads 0 --decode-experts $where ${BG_TIMELINE_ARGS:-} \
          --metrics-json "$dir/metrics-$cfg.json" > "$dir/run-$cfg.log" 2>&1 || status=1
        grep -E "^pass" "$dir/run-$cfg.log" | tee -a "$log"
        decode_trace_summary slice-decode-timeline "$dir" "$cfg"
        if [ -f "$dir/trace-$cfg.csv.api.csv" ]; then xz -9 -f "$dir/trace-$cfg.csv.api.csv"; fi
      done
      ;;
    decode-preloaded-timeline)
      # Where a device-scale decode token's time goes with every expert in host slots (issue 24's
      # 35.5 tok/s target): the CUPTI trace of 32 decoded tokens with decode-preloaded.json's
      # budgets and flags (--decode-experts hybrid, then gpu), read by scripts/gpu-timeline.py
      # over the decode's window. The CPU's experts show as GPU gaps.
      slice_model device
      dir="$root/measurements/device/decode-timeline"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      if [ ! -f "$stage/libbg_cupti_trace.so" ]; then
        note "decode-preloaded-timeline: no libbg_cupti_trace.so in $stage"; status=1; continue
      fi
      for cfg in hybrid gpu; do
        note "CUPTI timeline: device-scale preloaded decode, $cfg"
        CUDA_INJECTION64_PATH=$stage/libbg_cupti_trace.so LD_LIBRARY_PATH=$stage:${LD_LIBRARY_PATH:-} \
          BG_CUPTI_TRACE_OUT="$dir/trace-$cfg.csv" "$bin" run --backend cuda --model models/device.gguf \
          --file scenarios/prompts/64-tokens.txt --passes 1 --gen 32 --ignore-eos --routing exact \
          --prefill layer-major --promote --slots max --hot 5 --preload --vram-budget 2048 --host-budget 20480 \
          --threads 0 --decode-experts $cfg ${BG_TIMELINE_ARGS:-} \
          --metrics-json "$dir/metrics-$cfg.json" > "$dir/run-$cfg.log" 2>&1 || status=1
        decode_trace_summary decode-preloaded-timeline "$dir" "$cfg"
      done
      ;;
    slice-ubatch)
      # Issue 22: whether more tokens per launch pays for the dense weights a layer re-reads for
      # every unit of a pass. The warm pass of seed-4a-4b's configuration (units of 16) with
      # launches of 16, 32 and 64 tokens (--launch-tokens; before it existed, 2026-12-04 19:18,
      # this part varied --ubatch, one unit a launch: measurements/slice/ubatch/engine-999aae1);
      # the metrics' GPU busy time and wall.
      slice_model
      dir="$root/measurements/slice/ubatch"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      # On all SMs and on the RTX 3060's 28 (--sm-limit: 24 on an H200), where re-read weights
      # cost the most.
      for sm in 0 28; do
        for ub in 16 32 64; do
          tag=launch-$ub; [ $sm = 0 ] || tag=$tag-sm$sm
          note "slice warm pass, launches of $ub tokens, --sm-limit $sm"
          "$bin" run --backend cuda --model models/slice.gguf --file scenarios/prompts/64-tokens.txt --passes 3 --gen 0 \
            --routing resident-only --prefill layer-major --ubatch 16 --launch-tokens $ub --promote --slots 20 --hot 5 --transient-slots 12 \
            --host-budget 2875 --vram-budget 3068 --threads 0 --sm-limit $sm --metrics-json "$dir/$tag.json" > "$dir/$tag.log" 2>&1 || status=1
          grep -E "^pass" "$dir/$tag.log" | tee -a "$log"
          python3 -c "import json,sys; m=json.load(open(sys.argv[1])); p=m['passes'][-1]; print(sys.argv[2], 'last pass:', {k: round(v, 2) for k, v in p.items() if isinstance(v, (int, float)) and k.endswith('_ms')})" "$dir/$tag.json" $tag 2>&1 | tee -a "$log"
        done
      done
      ;;
    slice-decode-threads)
      # Issue 24: the CPU half of --decode-experts against the threads it gets (the store's
      # streamer and the compute thread share the cores), and each path alone, on decode.json's
      # configuration: resident-only, S 20 / H 5, the slice's budgets, one warm pass, 32 tokens.
      slice_model
      dir="$root/measurements/slice/decode-threads"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      nproc > "$dir/cores.txt"
      # BG_THREAD_CFGS: other mode:threads pairs (e.g. "hybrid:0 hybrid:13 hybrid:14 cpu:0 cpu:14").
      # Modes hybrid-split, hybrid-splitwhole and hybrid-nosplit are hybrid with --split-experts on (down's
      # columns copied, --split-copy columns: the default), on (all of down copied) and off.
      for cfg in ${BG_THREAD_CFGS:-gpu:0 cpu:0 hybrid:0 hybrid:16 hybrid:15 hybrid:8}; do  # 0: the default (13 of 16 cores on a GPU since 2026-12-06; 12 before)
        where=${cfg%%:*}; th=${cfg##*:}
        split=()  # plain modes pass nothing: engines from before --split-experts run them too
        case $where in
          hybrid-nosplit) split=(--split-experts off) ;;
          hybrid-split) split=(--split-experts on --split-copy columns) ;;
          hybrid-splitwhole) split=(--split-experts on --split-copy whole-down) ;;
        esac
        # A pair named again (rounds) gets -2, -3, ... rather than the earlier run's files.
        name="$where-$th"; i=2; while [ -e "$dir/$name.json" ]; do name="$where-$th-$i"; i=$((i + 1)); done
        note "slice decode, --decode-experts $where --threads $th ($name)"
        "$bin" run --backend cuda --model models/slice.gguf --file scenarios/prompts/64-tokens.txt --passes 2 --gen 32 --ignore-eos \
          --routing resident-only --prefill layer-major --ubatch 16 --promote --slots 20 --hot 5 --transient-slots 12 \
          --host-budget 2875 --vram-budget 3068 --threads $th --decode-experts ${where%%-*} ${split[@]+"${split[@]}"} \
          --metrics-json "$dir/$name.json" > "$dir/$name.log" 2>&1 || status=1
        grep -E "^decode" "$dir/$name.log" | tee -a "$log"
        python3 -c "import json,sys; m=json.load(open(sys.argv[1])); d=m['decode']; h=d['host_experts']; print(sys.argv[2], 'threads', m['engine']['threads'], 'decode %.1f tok/s' % d['decode_tok_s'], 'gpu_busy_ms', round(d['gpu_busy_ms'] or -1, 1), {k: (round(v, 3) if isinstance(v, float) else v) for k, v in h.items() if not k.startswith('rates')}, 'L0 start', h['rates_by_layer'][:1], 'L0 end', h['rates_by_layer_at_end'][:1])" "$dir/$name.json" "$cfg" 2>&1 | tee -a "$log"
      done
      ;;
    slice-short-prompts)
      # Issue 24's "small prefill units may use the same split": the warm prefill of short random
      # prompts (BG_SHORT_TOKENS, below the 14 tokens where resident-only speculation copies a
      # layer's host experts before its routing) with --host-expert-positions 1 (prefill copies
      # every host-resident expert) and 16 (a call of up to 16 positions splits them as decode
      # does), alternated BG_SHORT_REPS rounds; decode.json's configuration otherwise (hybrid).
      slice_model
      dir="$root/measurements/slice/short-prompts"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      for rep in $(seq 1 "${BG_SHORT_REPS:-2}"); do
        for n in ${BG_SHORT_TOKENS:-2 4 8 12}; do
          for p in 1 16; do
            name="n$n-p$p-r$rep"
            "$bin" run --backend cuda --model models/slice.gguf --prompt-tokens "$n" --prompt-seed 1 --passes 2 --gen 1 \
              --ignore-eos --routing resident-only --prefill layer-major --ubatch 16 --promote --slots 20 --hot 5 \
              --transient-slots 12 --host-budget 2900 --vram-budget 3068 --decode-experts hybrid \
              --host-expert-positions "$p" --metrics-json "$dir/$name.json" > "$dir/$name.log" 2>&1 || status=1
            python3 -c "import json,sys; m=json.load(open(sys.argv[1])); w=m['passes'][1]; x=w['experts']; print(sys.argv[2], 'warm prefill %.2f ms, %.1f tok/s' % (w['prefill_ms'], w['prefill_tok_s']), 'cpu_experts', x['cpu_experts'], 'copied', x['copied_experts'], 'split', x['split_experts'], 'gpu_busy_ms %.2f' % (w['gpu_busy_ms'] or -1), 'generated', m['generated'])" "$dir/$name.json" "$name" 2>&1 | tee -a "$log"
          done
        done
      done
      ;;
    slice-decode-ab)
      # Two engines on one machine, alternated: $stage/betelgeuse.base (staged beside the new one,
      # scripts/device-stage-base.sh) and $stage/betelgeuse, slice decode as slice-decode-threads
      # runs it (resident-only, S 20 / H 5, one warm pass, 32 tokens) in hybrid and, every
      # resident expert in VRAM, the GPU's own chain on all SMs and on 28, gpu (hybrid's budgets,
      # every host-resident expert copied) and cpu (every one on the CPU) (BG_AB_CFGS); BG_AB_REPS
      # rounds (2). BG_AB_BASE_ARGS: the base is this build run with these arguments added instead
      # (e.g. "--chained-launches off": one change alone, no second build), its folder named
      # <commit>-<arguments>-vs-<commit>.
      slice_model
      new_id=$("$bin" version 2>/dev/null | awk '/commit/ {print $2; exit}')
      base_args=(${BG_AB_BASE_ARGS:-})
      if [ ${#base_args[@]} -gt 0 ]; then
        base_bin=$bin
        base_id="${new_id:-new}$(printf -- '-%s' "${base_args[@]}" | tr -c 'A-Za-z0-9_.\n-' '_' | sed 's/--*/-/g')"
      else
        base_bin=$stage/betelgeuse.base
        [ -x "$base_bin" ] || { note "slice-decode-ab: no $base_bin"; status=1; continue; }
        base_id=$("$base_bin" version 2>/dev/null | awk '/commit/ {print $2; exit}')
      fi
      # A folder a call (its UTC start, HHMM) under the pair's: a later call on the same machine
      # starts from a fresh copy of the tree, so its rounds would take the earlier call's names
      # (2026-12-06 07:21 and 07:24: the second call's rounds 1-3 beside the first's 1-2).
      dir="$root/measurements/slice/decode-ab/${base_id:-base}-vs-${new_id:-new}/$(date -u +%H%M)"; mkdir -p "$dir"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$dir/machine.txt"
      for rep in $(seq 1 "${BG_AB_REPS:-2}"); do
        for which in base new; do
          b=$bin; extra=(); [ $which = base ] && { b=$base_bin; extra=("${base_args[@]}"); }
          for cfg in ${BG_AB_CFGS:-hybrid vram vram-sm28}; do  # vram-sm28: the RTX 3060's 28 SMs (--sm-limit)
            case $cfg in
              vram) budget=(--slots 20 --hot 20 --vram-budget 8000 --host-budget 2875 --decode-experts gpu) ;;
              vram-sm28) budget=(--slots 20 --hot 20 --vram-budget 8000 --host-budget 2875 --decode-experts gpu --sm-limit 28) ;;
              # gpu: hybrid's budgets with every host-resident expert copied (the copy path alone)
              gpu) budget=(--slots 20 --hot 5 --transient-slots 12 --host-budget 2875 --vram-budget 3068 --decode-experts gpu) ;;
              # cpu: hybrid's budgets with every host-resident expert on the CPU (its path alone)
              cpu) budget=(--slots 20 --hot 5 --transient-slots 12 --host-budget 2875 --vram-budget 3068 --decode-experts cpu) ;;
              *) budget=(--slots 20 --hot 5 --transient-slots 12 --host-budget 2875 --vram-budget 3068 --decode-experts hybrid) ;;
            esac
            note "slice decode A/B: $which $cfg round $rep"
            "$b" run --backend cuda --model models/slice.gguf --file scenarios/prompts/64-tokens.txt --passes 2 --gen 32 \
              --ignore-eos --routing resident-only --prefill layer-major --ubatch 16 --promote "${budget[@]}" "${extra[@]}" --threads 0 \
              --metrics-json "$dir/$which-$cfg-$rep.json" > "$dir/$which-$cfg-$rep.log" 2>&1 || status=1
            grep -E "^decode" "$dir/$which-$cfg-$rep.log" | sed "s/^/$which $cfg $rep: /" | tee -a "$log"
          done
        done
      done
      ;;
    slice-fidelity)
      # Fidelity is a property of the model and the rule, not of the tiers: no scenario, the engine
      # alone, with the slice scenarios' budgets.
      slice_model
      mkdir -p "$root/measurements/slice/fidelity"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$root/measurements/slice/fidelity/machine.txt"
      for n in 64 500; do
        for pol in resident-only pinned-top1; do
          note "slice fidelity $pol $n tokens"
          "$bin" run --backend cuda --model models/slice.gguf --prompt-tokens $n --prompt-seed 1 \
            --vram-budget 3068 --host-budget 2875 --slots 20 --hot 5 --transient-slots 12 --lru-slots 0 \
            --routing $pol --prefill layer-major --ubatch 16 --promote \
            --passes 1 --gen 1 --fidelity --metrics-json "$root/measurements/slice/fidelity/$pol-$n.json" 2>&1 \
            | grep -E "^fidelity|^pass|error" | tee -a "$log" || status=1
        done
      done
      ;;
    fidelity)
      mkdir -p models; [ -f models/device.gguf ] || "$bin" make-model --scale scenarios/models/device.json --out models/device.gguf --seed 1 2>&1 | tail -n 1
      mkdir -p "$root/measurements/device/fidelity"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$root/measurements/device/fidelity/machine.txt"
      for n in 64 500; do
        for pol in pinned-top1 resident-only; do
          note "fidelity $pol $n tokens"
          "$bin" run --backend cuda --model models/device.gguf --prompt-tokens $n --prompt-seed 1 \
            --vram-budget 2048 --host-budget 2048 --routing $pol --prefill layer-major --ubatch 16 --promote \
            --passes 1 --gen 1 --fidelity --metrics-json "$root/measurements/device/fidelity/$pol-$n.json" 2>&1 \
            | grep -E "^fidelity|^pass|error" | tee -a "$log" || status=1
        done
      done
      ;;
    bench)
      # Micro-benchmarks of the GPU kernels, with the device-memory and pinned-copy probes of the
      # same run, as Google Benchmark's JSON beside the console table.
      mkdir -p "$root/measurements/device/bench"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$root/measurements/device/bench/machine.txt"
      note "bench_gpu"
      "$stage/bench_gpu" ${BG_BENCH_ARGS:-} --benchmark_filter="${BG_BENCH_FILTER:-.}" --benchmark_min_time=0.2 --benchmark_out="$root/measurements/device/bench/bench_gpu.json" --benchmark_out_format=json 2>&1 \
        | tee "$root/measurements/device/bench/bench_gpu.txt" | tail -n 60 || status=1
      ;;
    cpu-kernels)
      # The CPU integer kernels' tests on this host, whose instruction sets (AVX-512, VNNI) the
      # build machine may lack: there they skip, visibly; here they run.
      mkdir -p "$root/measurements/device/cpu-kernels"
      { lscpu | grep -E "Model name|^CPU\(s\)"; echo "SIMD: $(grep -o -w -E 'avx2|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"; } \
        > "$root/measurements/device/cpu-kernels/machine.txt" 2>&1
      for t in "$stage"/test_int8_matmul "$stage"/test_kquants; do
        [ -x "$t" ] || continue
        note "$(basename "$t")"
        timeout 300 "$t" > "$root/measurements/device/cpu-kernels/$(basename "$t").log" 2>&1 || status=1
        grep -E "SKIPPED|FAILED|PASSED|Failure" "$root/measurements/device/cpu-kernels/$(basename "$t").log" | head -n 20 | tee -a "$log"
      done
      ;;
    cpu-bench)
      # The host-resident expert's CPU path (issue 24): one full-width expert a call, every type
      # the kernels read, with the host read probe of the same run in the JSON's context.
      mkdir -p "$root/measurements/device/bench-cpu"
      { lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|NUMA node\(s\)|MHz";
        echo "SIMD: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')";
        free -g | head -2; } > "$root/measurements/device/bench-cpu/machine.txt" 2>&1
      note "bench_cpu"
      before=$(host_counters); t0=$(date +%s)
      "$stage/bench_cpu" --benchmark_filter="${BG_CPU_BENCH_FILTER:-.}" --benchmark_min_time=0.3 \
        --benchmark_out="$root/measurements/device/bench-cpu/bench_cpu.json" --benchmark_out_format=json 2>&1 \
        | tee "$root/measurements/device/bench-cpu/bench_cpu.txt" | tail -n 40 || status=1
      host_delta "$before" "$t0" | tee -a "$root/measurements/device/bench-cpu/machine.txt" | tee -a "$log"
      ;;
    kernel-profile)
      # Where the fused expert's fixed ~30 us at one token goes (bench/KERNELS.md): Nsight Compute
      # on the full-width MXFP4 expert at 1 and 64 tokens, one sample each, a summary per kernel.
      mkdir -p "$root/measurements/device/kernel-profile"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$root/measurements/device/kernel-profile/machine.txt"
      ncu_bin=$(cuda_tool ncu)
      if [ -z "$ncu_bin" ]; then
        note "kernel-profile: no ncu on this machine"; status=1
      else
        for m in 1 8 64; do
          note "ncu: expert MXFP4, $m tokens"
          "$ncu_bin" --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
            --section SchedulerStats --section MemoryWorkloadAnalysis --launch-skip 200 --launch-count 10 --csv --page details \
            "$stage/bench_gpu" --benchmark_filter="BM_ExpertFused/type:39/n_embd:5120/n_ff:2304/M:$m/graph:0/lut:0/single:0" \
            > "$root/measurements/device/kernel-profile/expert-mxfp4-m$m.csv" 2>&1 || status=1
          tail -n 3 "$root/measurements/device/kernel-profile/expert-mxfp4-m$m.csv" | tee -a "$log"
        done
      fi
      ;;
    kernel-sass)
      # The instruction mix of the fused MXFP4 expert at one token (why its time hardly depends on
      # the bytes): Nsight Compute's instruction and source sections, and the kernels' SASS.
      dir="$root/measurements/device/kernel-profile"; mkdir -p "$dir"
      ncu_bin=$(cuda_tool ncu)
      cuobjdump_bin=$(cuda_tool cuobjdump)
      note "ncu instruction statistics: expert MXFP4, 1 token"
      "$ncu_bin" --section InstructionStats --section WarpStateStats --section SourceCounters --launch-skip 200 \
        --launch-count 3 --csv --page details "$stage/bench_gpu" \
        --benchmark_filter="BM_ExpertFused/type:39/n_embd:5120/n_ff:2304/M:1/graph:0/lut:0/single:0/tiles:0" \
        > "$dir/expert-mxfp4-m1-instructions.csv" 2>&1 || status=1
      [ -n "$cuobjdump_bin" ] && "$cuobjdump_bin" -sass -arch sm_90 "$stage/bench_gpu" 2>/dev/null \
        | awk '/Function : .*qmm_kernelILi39ELi4ELi1ELi1ELi8ELi3E/ {p=1} p && /Function : / && !/qmm_kernelILi39ELi4ELi1ELi1ELi8ELi3E/ {p=0} p' \
        | xz -9 > "$dir/qmm-mxfp4-gemv-sm90.sass.xz"
      ls -la "$dir" | tee -a "$log"
      ;;
    drop-models) note "removing generated models (the disk holds the device scale or the slice, not both)"; rm -f models/*.gguf ;;
    probes)
      mkdir -p "$root/measurements/device/probes"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$root/measurements/device/probes/machine.txt"
      for b in 1314816 4194304 16777216 268435456; do  # one device-scale expert .. 256 MiB
        "$bin" probe-pcie --bytes $b --reps 20 --json | tee "$root/measurements/device/probes/pcie-$b.json" || status=1
      done
      ;;
    *) echo "unknown part $part" >&2; status=2 ;;
  esac
  # After every part, so a call cut at its time limit still brings back what finished.
  case "$part" in
    slice-q2_k-* | slice-q4_k_m-*)
      p=${part%-*}; p=${p%-model}
      tar czf "$out/results-$p.tgz" -C "$root" "results/$p" $(cd "$root" && ls -d "measurements/$p" 2>/dev/null) 2>/dev/null ;;
    slice-*) tar czf "$out/results-slice.tgz" -C "$root" results/slice $(cd "$root" && ls -d measurements/slice 2>/dev/null) 2>/dev/null ;;
    *) tar czf "$out/results-device.tgz" -C "$root" results/device $(cd "$root" && ls -d measurements/device 2>/dev/null) 2>/dev/null ;;
  esac
done
ls -la "$out"
exit $status
