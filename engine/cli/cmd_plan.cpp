// betelgeuse plan: every allocation a run with these flags would make, by tier, against the
// budgets and the cgroup limit, from a model file's header or from a scale alone (so the
// published PC's 500 GB profile can be checked without the file). Exits non-zero, naming what
// would fit, when something does not.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/scale.h"
#include "runtime/expert_slots.h"
#include "runtime/memory_plan.h"
#include "runtime/prompt.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"
#include "runtime/run_config.h"
#include "util/check.h"

namespace bg::cli {

void add_model_prompt_flags(CLI::App* cmd, RunConfig& cfg, bool model_required);
void add_run_flags(CLI::App* cmd, RunConfig& cfg);
std::string default_tokenizer_dir();

namespace {

struct PlanArgs {
    RunConfig cfg;
    std::string scale_path;
    std::string quant;  // with --scale: the preset make-model --quant would write
    uint64_t cgroup_mib = 0;
    bool json = false;
};

// The largest --hot (VRAM over) or --slots (host over) that fits, with the rest as given.
std::string what_would_fit(const ModelShape& shape, const RunConfig& cfg, bool cuda, int64_t n_prompt,
                           uint64_t cgroup_bytes) {
    std::string out;
    auto fits = [&](int64_t slots, int64_t hot) {
        return plan_memory(shape, cfg, cuda, n_prompt, slots, hot, cgroup_bytes).problems().empty();
    };
    for (int64_t hot = cfg.hot; hot >= 0; --hot)
        for (int64_t slots = cfg.slots; slots >= std::max<int64_t>(hot, shape.hp.n_expert_used); --slots)
            if (fits(slots, hot)) return strf("it would fit --slots %lld --hot %lld", (long long)slots, (long long)hot);
    return "nothing fits with --hot 0 and the fewest slots routing needs: raise the budgets, or lower --transient-slots, "
           "--n-ctx or --ubatch";
}

void plan(const PlanArgs& a) {
    RunConfig cfg = a.cfg;
    if (a.scale_path.empty() == cfg.model_path.empty()) fail("plan: give --model FILE or --scale FILE (one of them)");
    if (!a.quant.empty() && a.scale_path.empty()) fail("plan: --quant sizes a scale (--scale FILE); a file's types are its own");
    auto scale_shape = [&] {
        ModelScale s = load_scale(a.scale_path);
        if (!a.quant.empty()) s.quant = parse_quant_preset(a.quant);
        return shape_of(s);
    };
    const ModelShape shape = a.scale_path.empty() ? shape_of_file(cfg.model_path) : scale_shape();
    // A plan is for the machine the run is meant for: the GPU unless --backend cpu.
    const bool cuda = cfg.backend != BackendChoice::kCpu;
    // The prompt as the run would build it: a text prompt through the tokenizer the model file
    // carries, or, for a scale, the one make-model would embed in it.
    std::unique_ptr<tok::Tokenizer> tokenizer;
    if (!cfg.prompt_text.empty() || !cfg.prompt_text_file.empty()) {
        std::optional<tok::Vocab> v;
        if (a.scale_path.empty()) v = tok::Vocab::from_gguf(gguf::Reader::open(cfg.model_path));
        else v = tok::import_hf_tokenizer(default_tokenizer_dir(), shape.hp.n_vocab);
        if (v) tokenizer = std::make_unique<tok::Tokenizer>(std::move(*v));
    }
    const int64_t n_prompt = static_cast<int64_t>(build_prompt(cfg, shape.hp.n_vocab, shape.hp.bos_id, tokenizer.get()).size());
    const uint64_t cgroup = a.cgroup_mib << 20;
    // S and H as the run would resolve them: --slots/--hot max (within the cgroup limit too),
    // then the defaults that follow the model.
    resolve_most_that_fit(cfg, shape, cuda, n_prompt, cgroup);
    cfg.resolve_residency_defaults(shape.hp.n_expert, shape.hp.n_expert_used);
    if (!cfg.residency_defaults.empty()) std::fprintf(stderr, "plan: %s\n", cfg.residency_defaults.c_str());
    const MemoryPlan p = plan_memory(shape, cfg, cuda, n_prompt, cfg.slots, cfg.hot, cgroup);
    const std::string problems = p.problems();
    const ExpertCapacity cap = expert_capacity(shape, cfg, cuda, n_prompt, cfg.slots, cfg.hot, cgroup);
    if (a.json) {
        nlohmann::json j = p.to_json();
        j["config"] = cfg.to_json();
        nlohmann::json layers = nlohmann::json::array();
        for (const ModelShape::ExpertLayer& e : shape.expert_layers())
            layers.push_back({{"bytes", e.bytes},
                              {"slot_bytes", ExpertSlots::round_up(e.bytes)},
                              {"types", {type_name(e.gate), type_name(e.up), type_name(e.down)}}});
        j["experts"] = {{"layers", layers}, {"max_hot", cap.max_hot}, {"max_slots", cap.max_slots}, {"with_hot", cap.hot}};
        j["would_fit"] = problems.empty() ? "" : what_would_fit(shape, cfg, cuda, n_prompt, cgroup);
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf("%s%s", p.table().c_str(), expert_summary(shape, cap, shape.hp.n_layer).c_str());
    }
    if (!problems.empty())
        fail("plan: does not fit: %s; %s", problems.substr(0, problems.size() - 1).c_str(),
             what_would_fit(shape, cfg, cuda, n_prompt, cgroup).c_str());
}

}  // namespace

void register_plan(CLI::App& app) {
    auto* cmd = app.add_subcommand("plan",
                                   "Print every allocation a run would make, by tier, against the budgets (from --model "
                                   "or --scale); fail naming what would fit");
    static PlanArgs a;
    add_model_prompt_flags(cmd, a.cfg, false);
    add_run_flags(cmd, a.cfg);
    cmd->add_option("--scale", a.scale_path, "Scale file (scenarios/models/*.json) in place of a model file");
    cmd->add_option("--quant", a.quant,
                    "With --scale: size the model make-model --quant would write (MXFP4_MOE, Q8_0, Q4_K_M, Q2_K, "
                    "IQ2_XXS)");
    cmd->add_option("--cgroup-memory", a.cgroup_mib, "Memory cgroup limit to check the host side against, MiB (0: none)")
        ->capture_default_str();
    cmd->add_flag("--json", a.json, "Print the plan as JSON");
    cmd->callback([] { plan(a); });
}

}  // namespace bg::cli
