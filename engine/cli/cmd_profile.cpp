#include <cstdio>

#include "cli/commands.h"
#include "cpu/thread_pool.h"
#include "model/dsv41_forward.h"
#include "cpu/cpu_ops.h"
#include "runtime/providers.h"
#include "runtime/memory_plan.h"
#include "runtime/prompt.h"
#include "runtime/residency.h"
#include "runtime/run_config.h"
#include "runtime/runner.h"

namespace bg::cli {

void add_model_prompt_flags(CLI::App* cmd, RunConfig& cfg, bool model_required);

namespace {

// Counts, per layer and expert, the tokens exact routing sends there.
class RouteCounter final : public RoutingObserver {
public:
    explicit RouteCounter(const dsv41::HParams& hp)
        : counts(static_cast<size_t>(hp.n_layer), std::vector<uint64_t>(static_cast<size_t>(hp.n_expert), 0)) {}
    void on_route(int64_t layer, int64_t, const int32_t* ids, const float*, int k) override {
        for (int j = 0; j < k; ++j) ++counts[layer][ids[j]];
    }
    std::vector<std::vector<uint64_t>> counts;
};

void profile(RunConfig cfg, const std::string& out) {
    auto model = dsv41::Model::open(cfg.model_path);
    const auto& hp = model->hp();
    const std::unique_ptr<tok::Tokenizer> tokenizer = load_tokenizer(*model);
    const std::vector<int32_t> prompt = build_prompt(cfg, *model, tokenizer.get());
    // The profile itself runs on the CPU, but its plan is for a later run: --slots/--hot max are
    // sized as plan sizes them, for the GPU unless --backend cpu.
    resolve_most_that_fit(cfg, shape_of(*model), cfg.backend != BackendChoice::kCpu, static_cast<int64_t>(prompt.size()));
    cfg.resolve_residency_defaults(hp.n_expert, hp.n_expert_used);
    if (!cfg.residency_defaults.empty()) std::fprintf(stderr, "profile: %s\n", cfg.residency_defaults.c_str());
    cpu::ThreadPool pool(cfg.threads);
    PreadExpertProvider experts(*model);
    PreadEngramProvider engram(*model);
    dsv41::ForwardConfig fc;
    fc.n_ctx = static_cast<int64_t>(prompt.size());
    fc.max_ubatch = cfg.ubatch;
    fc.max_launch = cfg.launch_tokens;  // layer-major below
    fc.matmul = cfg.matmul;
    dsv41::Forward fwd(*model, cpu::make_cpu_ops(pool), experts, engram, fc);
    RouteCounter counter(hp);
    fwd.set_observer(&counter);
    Runner runner(*model, fwd);
    runner.prefill(prompt, PrefillOrder::kLayerMajor, cfg.ubatch, nullptr);
    ResidencyPlan plan = plan_from_counts(*model, counter.counts, cfg.slots, cfg.hot);
    save_plan(plan, out);
    // How much of the routing the plan covers, as a sanity line.
    uint64_t covered = 0, total = 0;
    for (int64_t l = 0; l < hp.n_layer; ++l)
        for (int64_t e = 0; e < hp.n_expert; ++e) {
            total += counter.counts[l][e];
            if (plan.is_resident(l, static_cast<int32_t>(e))) covered += counter.counts[l][e];
        }
    std::fprintf(stderr, "profile: %zu calibration tokens; the %lld resident experts per layer take %.1f %% of routed tokens; plan written to %s\n",
                 prompt.size(), (long long)cfg.slots, total ? 100.0 * covered / total : 0.0, out.c_str());
}

}  // namespace

void register_profile(CLI::App& app) {
    auto* cmd = app.add_subcommand("profile", "Write a residency plan from exact routing over a calibration prompt");
    static RunConfig cfg;
    static std::string out;
    add_model_prompt_flags(cmd, cfg, true);
    cmd->add_option("--out", out, "Residency plan JSON to write")->required();
    cmd->callback([] { profile(cfg, out); });
}

}  // namespace bg::cli
