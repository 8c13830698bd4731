// Everything `betelgeuse run` was asked to do, printed at the start of every run and embedded in
// every metrics file so each number says how it was made. Options that name a choice are parsed
// once, at the CLI edge (util/named_enum.h), and held here as enums.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "backend/matmul_plan.h"
#include "backend/types.h"
#include "io/reader.h"
#include "runtime/decode_split.h"
#include "runtime/runner.h"
#include "runtime/sampler.h"
#include "util/named_enum.h"

namespace bg {

// --backend: auto picks cuda when the build has it and a GPU is visible (cli/device_pick.cpp,
// which leaves the choice it made here).
enum class BackendChoice { kAuto, kCpu, kCuda };
template <>
struct EnumNames<BackendChoice> {
    static constexpr NamedValue<BackendChoice> kNames[] = {
        {BackendChoice::kAuto, "auto"}, {BackendChoice::kCpu, "cpu"}, {BackendChoice::kCuda, "cuda"}};
    static constexpr const char* kWhat = "--backend";
};

struct RunConfig {
    // --slots and --hot left at this value follow the model: see resolve_residency_defaults.
    static constexpr int64_t kFromModel = -1;
    // --slots max / --hot max: the most the budgets hold (runtime/memory_plan.h,
    // resolve_most_that_fit), for machines whose memory holds more than the seed's 20 and 5.
    static constexpr int64_t kMostThatFit = -2;
    // The seed's S = 20 and H = 5 as a model's counts allow.
    static int64_t default_slots(int64_t n_expert, int64_t n_expert_used);
    static int64_t default_hot(int64_t slots);

    std::string model_path;
    // The prompt: text (needs the model's tokenizer), a file of token ids, or random ids.
    std::string prompt_text;          // -p
    std::string prompt_text_file;     // -f: a file of text
    std::string prompt_ids_file;      // a file of whitespace-separated token ids
    int64_t prompt_tokens = 64;       // random ids when none of the above is set
    uint64_t prompt_seed = 1;
    bool chat = false;                // wrap the text in the model's chat format
    std::string system;               // the chat's system message
    bool show_ids = false;            // also print the generated token ids
    SamplingConfig sampling;          // temp 0 (greedy) by default
    int64_t gen = 16;                 // tokens to decode after the prompt, at most
    // false: decoding stops at the model's end-of-generation tokens (tok::end_of_generation);
    // true: they are never chosen and exactly `gen` tokens are decoded (benchmarks).
    bool ignore_eos = false;
    PrefillOrder prefill = PrefillOrder::kLayerMajor;  // layer-major overlaps reads and copies with compute
    int64_t ubatch = 16;
    // Layer-major prefill: consecutive units share a layer's dense launches up to this many tokens
    // (whole units), so the dense weights are read once per launch, not once per unit. The
    // integer kernels take 64 tokens a pass (issue 22's measurement: measurements/slice/ubatch/).
    int64_t launch_tokens = 64;
    int64_t passes = 1;               // prefill passes over the same prompt: 1 cold, then warm
    int threads = 0;                  // 0: all cores (on a GPU a quarter fewer, at most three: Session says why)
    BackendChoice backend = BackendChoice::kAuto;
    int64_t sm_limit = 0;             // CUDA: run on this many SMs (rounded down to what the GPU allows); 0: all
    bool chained_launches = true;     // CUDA: kernels start as the one before ends (sm_90+; cuda/launch.cuh)
    SwigluClamp swiglu_clamp = SwigluClamp::kDeepSeek;
    // fast: int8 activations and exact integer block sums for quantized weights (llama.cpp's
    // default); precise: the float path the float64 reference checks use.
    MatmulMode matmul = MatmulMode::kFast;
    int64_t n_ctx = 0;                // 0: prompt + gen
    // Tiered store
    RoutingPolicy routing = RoutingPolicy::kExact;  // hot-pool: an interpretation
    // Where a decode step's host-resident experts are computed (runtime/decode_split.h); the
    // session resolves auto (hybrid on a GPU, gpu on the CPU backend) and keeps what it chose.
    DecodeExperts decode_experts = DecodeExperts::kAuto;
    // --host-expert-positions: MoE calls of at most this many positions (a decode step has one; a
    // short prompt's prefill, a few) compute their host-resident experts as --decode-experts says;
    // larger calls copy them all to the GPU (runtime/decode_split.h). 12: the slice's warm prefill
    // of 2-12-token prompts took 1.44-1.76x less time with the split than with every host expert
    // copied (H100 machine, 2026-12-07, measurements/slice/short-prompts/), and from 14 tokens
    // resident-only prefill copies a layer's host experts before its routing anyway (S = 20).
    int64_t host_expert_positions = 12;
    std::string residency;            // plan file from `betelgeuse profile`; "" = highest bias
    int64_t slots = kFromModel;       // S resident experts per layer
    int64_t hot = kFromModel;         // H of them in VRAM
    std::string residency_defaults;   // how S and H followed the model, when they did
    bool promote = false;             // end-of-pass promotion of the H most-used into VRAM
    bool preload = false;             // fill every resident slot from the file before the first pass
    int64_t transient_slots = 32;
    // Layer-major, resident-only: copy a layer's host-resident experts while its attention half
    // computes, before routing names the used ones (ExpertProvider::prepare_layer).
    bool speculative_copies = true;
    // --split-experts: hybrid decode may split one expert a layer between the CPU and a copy
    // (runtime/decode_split.h). On by default, down's columns copied (--split-copy columns): on the
    // H100 machines of 2026-12-06, alternated rounds of one binary, +2.5 to +4 % (10:31) and a
    // median +4.4 % (10:53) against whole experts; with all of down copied -1.5 % (10:40) and
    // +1.5 % (10:53) (measurements/slice/decode-threads, REPRODUCING.md).
    bool split_experts = true;
    SplitCopy split_copy = SplitCopy::kColumns;  // --split-copy: how a split expert's copied part travels
    int64_t lru_slots = 0;            // host LRU cache for non-resident experts
    io::IoEngine io = io::IoEngine::kUring;
    uint32_t queue_depth = 64;
    uint32_t read_size = 1u << 20;
    uint64_t host_budget_mib = 12288;
    uint64_t vram_budget_mib = 12288;
    // Of the VRAM budget, set aside at start-up for what the CUDA runtime holds beside the
    // engine's own allocations (cuBLAS handle, streams, events, and the kernels it loads on
    // their first launch); the run refuses to start when what it holds at start-up exceeds it.
    // Not used on the CPU backend.
    uint64_t vram_reserve_mib = 160;
    uint64_t engram_buffer_kib = 2048;
    // Host ring the Engram rows of the positions a pass will run are read into ahead of their
    // layer (0: each layer's rows are read when it asks), and the Engram reads in flight at most.
    // 16 KiB holds one decoded token's rows of both Engram layers at full width (2 x 24 rows of
    // 272 bytes). The forward offers one Engram layer's rows at a time, the next layer's once the
    // last fetch of this one is done, so in decode the second layer's reads run while the layers
    // before it compute (on the slice each Engram layer's fetch waited 0.43-0.46 ms a token, H200
    // 2026-12-05; both layers' reads at once made the first fetch wait 0.94 ms). A ring that small
    // also bounds what a prefill submits at once: a 2 MiB ring submitted a 64-token pass's 3,072
    // reads up front and held up the thread that issues GPU work for 29 ms (REPRODUCING.md §3).
    uint64_t engram_read_ahead_kib = 16;
    uint32_t engram_queue_depth = 512;
    bool fidelity = false;            // also measure the policy's distance from exact routing
    bool verify_slots = false;        // after each pass, compare every loaded slot with the file
    std::string metrics_json;         // where to write the metrics ("" = none)
    io::FaultPlan faults;             // injected disk faults (tests and fault drills)

    // Replaces S and H left at kFromModel by defaults that fit any model, with n_expert experts
    // per layer of which n_expert_used are routed per token. The seed's S = 20, H = 5 were made
    // for 384 experts; a model with fewer keeps all of them resident and H in the same ratio:
    //   S = min(20, n_expert), but at least n_expert_used (a token's experts must fit)
    //   H = round(S * 5 / 20), at least 1 (one VRAM slot per layer keeps the device tier in use)
    // and says so in residency_defaults. Values given on the command line are kept.
    void resolve_residency_defaults(int64_t n_expert, int64_t n_expert_used);

    // Most tokens one launch of the forward holds: launch_tokens in layer-major prefill, else one
    // unit (token-major passes one unit at a time through every layer).
    int64_t max_launch() const { return prefill == PrefillOrder::kLayerMajor ? launch_tokens : ubatch; }
    nlohmann::json to_json() const;
    std::string describe() const;     // the start-up table (the build's commit first)
};

}  // namespace bg
