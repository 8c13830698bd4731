#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cpu/thread_pool.h"
#include "model/dsv41_forward.h"
#include "runtime/providers.h"
#include "runtime/run_config.h"
#include "runtime/runner.h"
#include "util/check.h"
#include "util/file_io.h"

namespace bg::cli {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void run(const RunConfig& cfg) {
    std::fputs(cfg.describe().c_str(), stderr);
    const PrefillOrder order = parse_prefill_order(cfg.prefill);
    cpu::SwigluClamp clamp;
    if (cfg.swiglu_clamp == "deepseek") clamp = cpu::SwigluClamp::kDeepSeek;
    else if (cfg.swiglu_clamp == "llamacpp") clamp = cpu::SwigluClamp::kLlamaCpp;
    else fail("--swiglu-clamp must be 'deepseek' or 'llamacpp', got '%s'", cfg.swiglu_clamp.c_str());
    if (cfg.passes < 1) fail("--passes must be >= 1");
    if (cfg.gen < 0) fail("--gen must be >= 0");

    const auto t_load = std::chrono::steady_clock::now();
    auto model = dsv41::Model::open(cfg.model_path);
    const dsv41::HParams& hp = model->hp();
    const std::vector<int32_t> prompt = cfg.prompt_file.empty()
        ? random_prompt(cfg.prompt_tokens, cfg.prompt_seed, hp.n_vocab, static_cast<int32_t>(hp.bos_id))
        : read_prompt_file(cfg.prompt_file, hp.n_vocab);
    const int64_t n_prompt = static_cast<int64_t>(prompt.size());

    cpu::ThreadPool pool(cfg.threads);
    PreadExpertProvider experts(*model);
    PreadEngramProvider engram(*model);
    dsv41::ForwardConfig fc;
    fc.n_ctx = cfg.n_ctx > 0 ? cfg.n_ctx : n_prompt + std::max<int64_t>(cfg.gen, 1);
    fc.max_ubatch = cfg.ubatch;
    fc.swiglu_form = clamp;
    dsv41::Forward fwd(*model, pool, experts, engram, fc);
    Runner runner(*model, fwd);
    const double load_ms = ms_since(t_load);
    std::fprintf(stderr, "loaded %s in %.0f ms: dense %.1f MB resident, %d threads\n", cfg.model_path.c_str(), load_ms,
                 model->dense_bytes() / 1e6, pool.size());

    nlohmann::json metrics;
    metrics["config"] = cfg.to_json();
    metrics["model"] = {{"path", cfg.model_path},        {"file_bytes", model->gguf().file_size()},
                        {"dense_bytes", model->dense_bytes()}, {"expert_bytes", model->expert_bytes()},
                        {"engram_bytes", model->engram_bytes()}, {"n_layer", hp.n_layer},
                        {"n_expert", hp.n_expert},        {"n_expert_used", hp.n_expert_used}};
    metrics["load_ms"] = load_ms;
    metrics["passes"] = nlohmann::json::array();

    std::vector<float> logits;
    for (int64_t pass = 1; pass <= cfg.passes; ++pass) {
        const uint64_t eb0 = experts.bytes_read(), ef0 = experts.fetches(), gb0 = engram.bytes_read();
        const auto t0 = std::chrono::steady_clock::now();
        runner.prefill(prompt, order, cfg.ubatch, &logits);
        const double ms = ms_since(t0);
        const double tps = n_prompt / (ms / 1e3);
        std::fprintf(stderr, "pass %lld: prefill %lld tokens in %.1f ms (%.2f tok/s)\n", (long long)pass,
                     (long long)n_prompt, ms, tps);
        metrics["passes"].push_back({{"pass", pass},
                                     {"state", pass == 1 ? "cold" : "warm"},
                                     {"prompt_tokens", n_prompt},
                                     {"prefill_ms", ms},
                                     {"prefill_tok_s", tps},
                                     {"expert_disk_bytes", experts.bytes_read() - eb0},
                                     {"expert_disk_fetches", experts.fetches() - ef0},
                                     {"engram_disk_bytes", engram.bytes_read() - gb0}});
    }

    const auto t_dec = std::chrono::steady_clock::now();
    const uint64_t eb0 = experts.bytes_read(), ef0 = experts.fetches();
    const std::vector<int32_t> out = runner.decode(logits, cfg.gen);
    const double dec_ms = ms_since(t_dec);
    // The first generated token comes from the prefill's logits: decode speed counts the
    // one-token steps that followed it.
    const int64_t steps = std::max<int64_t>(0, cfg.gen - 1);
    const double dec_tps = steps > 0 ? steps / (dec_ms / 1e3) : 0.0;
    metrics["decode"] = {{"tokens", cfg.gen},
                         {"steps", steps},
                         {"decode_ms", dec_ms},
                         {"decode_tok_s", dec_tps},
                         {"expert_disk_bytes", experts.bytes_read() - eb0},
                         {"expert_disk_fetches", experts.fetches() - ef0}};
    metrics["generated"] = out;
    metrics["prompt_first_tokens"] = std::vector<int32_t>(prompt.begin(), prompt.begin() + std::min<int64_t>(n_prompt, 16));

    std::string line;
    for (int32_t t : out) line += strf("%s%d", line.empty() ? "" : " ", t);
    std::printf("%s\n", line.c_str());
    std::fprintf(stderr, "decode: %lld tokens, %.2f tok/s\n", (long long)cfg.gen, dec_tps);
    if (!cfg.metrics_json.empty()) {
        write_file_atomic(cfg.metrics_json, metrics.dump(2) + "\n");
        std::fprintf(stderr, "metrics written to %s\n", cfg.metrics_json.c_str());
    }
}

}  // namespace

void register_run(CLI::App& app) {
    auto* cmd = app.add_subcommand("run", "Prefill a prompt, then decode greedily; print token ids and metrics");
    static RunConfig cfg;
    cmd->add_option("--model", cfg.model_path, "GGUF model file")->required();
    auto* pt = cmd->add_option("--prompt-tokens", cfg.prompt_tokens, "Random prompt length")->capture_default_str();
    cmd->add_option("--prompt-seed", cfg.prompt_seed, "Random prompt seed")->capture_default_str();
    cmd->add_option("--prompt-file", cfg.prompt_file, "File of whitespace-separated token ids")->excludes(pt);
    cmd->add_option("--gen", cfg.gen, "Tokens to generate")->capture_default_str();
    cmd->add_option("--prefill", cfg.prefill, "token-major | layer-major")->capture_default_str();
    cmd->add_option("--ubatch", cfg.ubatch, "Tokens per unit of work")->capture_default_str();
    cmd->add_option("--passes", cfg.passes, "Prefill passes over the prompt (1 cold, then warm)")->capture_default_str();
    cmd->add_option("--threads", cfg.threads, "CPU threads (0: all cores)")->capture_default_str();
    cmd->add_option("--swiglu-clamp", cfg.swiglu_clamp, "deepseek | llamacpp")->capture_default_str();
    cmd->add_option("--n-ctx", cfg.n_ctx, "Context length (0: prompt + gen)")->capture_default_str();
    cmd->add_option("--metrics-json", cfg.metrics_json, "Write metrics JSON here");
    cmd->callback([] { run(cfg); });
}

}  // namespace bg::cli
