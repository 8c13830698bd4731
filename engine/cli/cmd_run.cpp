#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/device_pick.h"
#include "cli/enum_option.h"
#include "runtime/session.h"
#include "tokenizer/stream_decoder.h"
#include "util/check.h"
#include "util/file_io.h"

namespace bg::cli {

namespace {

std::string id_line(const std::vector<int32_t>& ids) {
    std::string line;
    for (int32_t t : ids) line += strf("%s%d", line.empty() ? "" : " ", t);
    return line;
}

void run(RunConfig cfg) {
    DeviceFactory* device = pick_device(cfg);
    // The start-up table shows S and H as the run uses them: the session resolves the defaults
    // that follow the model and --slots/--hot max (which need the prompt's length), so it is
    // printed once the session is built, before any pass.
    Session s(cfg, device);
    std::fputs(s.config().describe().c_str(), stderr);
    std::fprintf(stderr, "prompt: %zu tokens\n", s.prompt().size());
    const tok::EndOfGeneration& eog = s.end_of_generation();
    if (eog.empty()) {
        std::fprintf(stderr, "end of generation: the model names no end-of-generation tokens: %lld tokens are decoded\n",
                     (long long)cfg.gen);
    } else {
        std::string list;
        for (int32_t id : eog.ids) list += strf("%s%d", list.empty() ? "" : " ", id);
        std::fprintf(stderr, "end of generation: tokens %s%s\n", list.c_str(),
                     cfg.ignore_eos ? " (never chosen: --ignore-eos)" : "");
    }
    // With a tokenizer the answer streams to stdout as text while it is generated (--show-ids
    // adds the ids after it); without one, the ids are the output.
    const tok::Tokenizer* tokenizer = s.tokenizer();
    if (!tokenizer) std::fprintf(stderr, "the model carries no tokenizer: the output is token ids\n");
    std::unique_ptr<tok::StreamDecoder> text;
    if (tokenizer) text = std::make_unique<tok::StreamDecoder>(*tokenizer);
    auto on_token = [&](int32_t id) {
        // The end-of-generation token ends the answer; it is not part of its text (its id is
        // still in --show-ids and the metrics).
        if (!text || (!cfg.ignore_eos && eog.contains(id))) return;
        const std::string part = text->push(id);
        std::fwrite(part.data(), 1, part.size(), stdout);
        std::fflush(stdout);
    };
    const nlohmann::json metrics = s.run(true, on_token);
    if (text) {
        const std::string rest = text->finish();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
        std::printf("\n");
        if (cfg.show_ids) std::printf("%s\n", id_line(s.generated()).c_str());
    } else {
        std::printf("%s\n", id_line(s.generated()).c_str());
    }
    std::fflush(stdout);
    if (!cfg.metrics_json.empty()) {
        write_file_atomic(cfg.metrics_json, metrics.dump(2) + "\n");
        std::fprintf(stderr, "metrics written to %s\n", cfg.metrics_json.c_str());
    }
}

}  // namespace

// Flags shared by run, profile and plan (plan takes --scale in place of --model).
void add_model_prompt_flags(CLI::App* cmd, RunConfig& cfg, bool model_required) {
    auto* model = cmd->add_option("-m,--model", cfg.model_path, "GGUF model file (the first shard of a split model)");
    if (model_required) model->required();
    auto* text = cmd->add_option("-p,--prompt", cfg.prompt_text, "Prompt text (through the model's tokenizer)");
    auto* file = cmd->add_option("-f,--file", cfg.prompt_text_file, "File of prompt text")->excludes(text);
    auto* ids = cmd->add_option("--prompt-ids", cfg.prompt_ids_file, "File of whitespace-separated token ids")
                    ->excludes(text)->excludes(file);
    cmd->add_option("--prompt-tokens", cfg.prompt_tokens, "Random prompt of this many token ids (when no prompt is given)")
        ->capture_default_str()->excludes(text)->excludes(file)->excludes(ids);
    cmd->add_option("--prompt-seed", cfg.prompt_seed, "Random prompt seed")->capture_default_str();
    cmd->add_flag("--chat", cfg.chat, "Wrap the text prompt in the model's chat format (tokenizer.chat_template)");
    cmd->add_option("--system", cfg.system, "System message of the chat (with --chat)");
    cmd->add_option("--threads", cfg.threads, "CPU threads (0: all cores; with a GPU a quarter fewer, at most three fewer)")
        ->capture_default_str();
    cmd->add_option("--ubatch", cfg.ubatch, "Tokens per unit of work")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--launch-tokens", cfg.launch_tokens,
                    "Layer-major prefill: consecutive units go through a layer's dense work together, up to this "
                    "many tokens per launch (whole units; --ubatch or less: one unit a launch). The same tokens; each "
                    "dense matrix is read once per launch instead of once per unit")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    // "max": the most the budgets hold (RunConfig::kMostThatFit), for machines with memory to spare.
    const CLI::Transformer most_that_fit(std::map<std::string, std::string>{{"max", std::to_string(RunConfig::kMostThatFit)}});
    cmd->add_option("--slots", cfg.slots,
                    "Resident experts per layer (S; default min(20, experts per layer), at least the experts per "
                    "token; max: the most the host budget holds with the --hot given)")
        ->transform(most_that_fit);
    cmd->add_option("--hot", cfg.hot,
                    "Resident experts per layer kept in VRAM (H; default round(S x 5/20), at least 1; max: the most "
                    "the VRAM budget holds, at most S)")
        ->transform(most_that_fit);
}

// The flags of run beyond the model and prompt (shared with plan, which sizes the same run).
void add_run_flags(CLI::App* cmd, RunConfig& cfg) {
    cmd->add_option("-n,--gen", cfg.gen,
                    "Tokens to generate at most: generation stops earlier at the model's end-of-generation tokens "
                    "(tokenizer.ggml.eos/eot/eom_token_id and the texts llama.cpp recognises)")
        ->capture_default_str();
    cmd->add_flag("--ignore-eos", cfg.ignore_eos,
                  "Never choose an end-of-generation token (as llama.cpp's --ignore-eos): exactly --gen tokens are "
                  "generated (the harness passes it, so decode figures compare)");
    cmd->add_flag("--show-ids", cfg.show_ids, "Also print the generated token ids");
    cmd->add_option("--temp", cfg.sampling.temp, "Sampling temperature (0: greedy)")->capture_default_str();
    cmd->add_option("--top-k", cfg.sampling.top_k, "Keep the k most likely tokens (0: all; with --temp > 0)")->capture_default_str();
    cmd->add_option("--top-p", cfg.sampling.top_p, "Keep the most likely tokens up to this probability mass (1: all)")->capture_default_str();
    cmd->add_option("--min-p", cfg.sampling.min_p, "Keep tokens at least this fraction as likely as the best (0: all)")->capture_default_str();
    cmd->add_option("--seed", cfg.sampling.seed, "Sampling seed")->capture_default_str();
    add_enum_option(cmd, cfg.prefill, "token-major (synchronous loads) | layer-major (overlapped)");
    cmd->add_option("--passes", cfg.passes, "Prefill passes over the prompt (1 cold, then warm)")->capture_default_str();
    add_enum_option(cmd, cfg.backend, "auto (cuda when built with it and a GPU is visible) | cpu | cuda");
    cmd->add_option("--sm-limit", cfg.sm_limit,
                    "CUDA: run the work on this many SMs only (a green context; rounded down to what the GPU can "
                    "partition, e.g. steps of 8 on sm_90; the count used is printed and recorded); 0: all SMs")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--chained-launches", cfg.chained_launches,
                    "CUDA: let each kernel's blocks be placed while the kernel before it runs, so it starts the moment "
                    "that one ends (programmatic dependent launch; sm_90 and later, elsewhere always off; whether it "
                    "was used is recorded) (on | off)")
        ->capture_default_str();
    add_enum_option(cmd, cfg.swiglu_clamp, "Form of the SwiGLU clamp (backend/types.h says both)");
    add_enum_option(cmd, cfg.matmul,
                    "fast (int8 activations, integer tensor cores) | precise (float path, for reference checks)");
    cmd->add_option("--n-ctx", cfg.n_ctx, "Context length (0: prompt + gen)")->capture_default_str();
    add_enum_option(cmd, cfg.routing,
                    "exact | pinned-top1 (ours) | resident-only (the seed's) | hot-pool (ours, an INTERPRETATION of the "
                    "seed, not its rule: rank 1 among the S resident experts, ranks 2..k among the H in VRAM, topped "
                    "up from the resident ones when fewer than k-1 hot remain; depends on the tier)");
    add_enum_option(cmd, cfg.decode_experts,
                    "Where a decode step's host-resident experts are computed: gpu (copied over PCIe) | cpu (by the "
                    "CPU where they lie, no copy) | hybrid (split between the two by rates measured at start-up, so "
                    "both finish together) | auto (hybrid on a GPU, gpu on the CPU backend)");
    cmd->add_option("--host-expert-positions", cfg.host_expert_positions,
                    "MoE calls of at most this many positions (a decode step: 1; a short prompt's prefill: its tokens) "
                    "compute their host-resident experts as --decode-experts says; larger ones copy them all to the "
                    "GPU (1: decode steps alone)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, bg::kMaxHostExpertPositions));
    cmd->add_option("--split-experts", cfg.split_experts,
                    "With --decode-experts hybrid, split one expert a layer between the CPU (its first hidden rows) "
                    "and a copy (the rest) where the measured rates say that ends both paths sooner than whole experts "
                    "do (on | off)")
        ->capture_default_str();
    add_enum_option(cmd, cfg.split_copy,
                    "How a split expert's copied part travels: columns (its rows of gate and up, its columns of down "
                    "as a 2D copy) | whole-down (its rows of gate and up, all of down: contiguous, more bytes)");
    cmd->add_option("--residency", cfg.residency, "Residency plan from 'betelgeuse profile' (default: highest router bias)");
    cmd->add_flag("--promote", cfg.promote, "Move the H most-used resident experts into VRAM at the end of each pass");
    cmd->add_flag("--preload", cfg.preload,
                  "Before the first pass, read every resident expert (the --slots of each layer) from the file into "
                  "its slot at full disk speed (progress shown, time reported); the first pass then reads only "
                  "non-resident experts from disk and is reported as 'preloaded', not 'cold'");
    cmd->add_option("--transient-slots", cfg.transient_slots, "Device transient slots for non-hot experts")->capture_default_str();
    cmd->add_option("--speculative-copies", cfg.speculative_copies,
                    "Layer-major, resident-only: copy host-resident experts during the attention half, before routing (on | off)")
        ->capture_default_str();
    cmd->add_option("--lru-slots", cfg.lru_slots, "Host slots keeping non-resident experts, least recently used out (0: none)")->capture_default_str();
    add_enum_option(cmd, cfg.io, "uring (O_DIRECT) | pread");
    cmd->add_option("--queue-depth", cfg.queue_depth, "Disk reads in flight at most")->capture_default_str();
    cmd->add_option("--read-size", cfg.read_size, "Largest single disk read, bytes")->capture_default_str();
    cmd->add_option("--host-budget", cfg.host_budget_mib, "Host memory budget, MiB")->capture_default_str();
    cmd->add_option("--vram-budget", cfg.vram_budget_mib, "Device memory budget, MiB")->capture_default_str();
    cmd->add_option("--vram-reserve", cfg.vram_reserve_mib,
                    "Of the VRAM budget, MiB set aside for the CUDA runtime (cuBLAS, streams); CUDA backend only")
        ->capture_default_str();
    cmd->add_option("--engram-buffer", cfg.engram_buffer_kib, "Engram row buffer in device memory, KiB")->capture_default_str();
    cmd->add_option("--engram-read-ahead", cfg.engram_read_ahead_kib,
                    "Host ring the Engram rows of a pass's positions are read into ahead of their layer, KiB (0: off; "
                    "16 holds a decoded token's rows of both Engram layers at full width; a larger ring submits more "
                    "reads at once)")
        ->capture_default_str();
    cmd->add_option("--engram-queue-depth", cfg.engram_queue_depth, "Engram reads in flight at most")
        ->check(CLI::Range(1u, 32768u))
        ->capture_default_str();
    cmd->add_flag("--fidelity", cfg.fidelity, "Also report top-1 agreement and mean KL of the routing policy against exact");
    cmd->add_flag("--verify-slots", cfg.verify_slots, "After each pass compare every loaded slot with the file");
    cmd->add_option("--metrics-json", cfg.metrics_json, "Write metrics JSON here");
}

void register_run(CLI::App& app) {
    auto* cmd = app.add_subcommand("run", "Prefill a prompt (one or more passes), then generate; print the text (or token ids) and metrics");
    static RunConfig cfg;
    add_model_prompt_flags(cmd, cfg, true);
    add_run_flags(cmd, cfg);
    cmd->callback([] { run(cfg); });
}

}  // namespace bg::cli
