#include "runtime/run_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "util/build_info.h"
#include "util/check.h"

namespace bg {

namespace {
constexpr int64_t kSeedSlots = 20, kSeedHot = 5;
}  // namespace

int64_t RunConfig::default_slots(int64_t n_expert, int64_t n_expert_used) {
    return std::max(n_expert_used, std::min(kSeedSlots, n_expert));
}

int64_t RunConfig::default_hot(int64_t slots) {
    return std::max<int64_t>(1, (slots * kSeedHot + kSeedSlots / 2) / kSeedSlots);
}

void RunConfig::resolve_residency_defaults(int64_t n_expert, int64_t n_expert_used) {
    BG_CHECK(slots != kMostThatFit && hot != kMostThatFit);  // resolve_most_that_fit first
    std::string note;
    if (slots == kFromModel) {
        slots = default_slots(n_expert, n_expert_used);
        note = strf("S = min(%lld, %lld experts per layer) = %lld", (long long)kSeedSlots, (long long)n_expert,
                    (long long)slots);
        if (slots > std::min(kSeedSlots, n_expert)) note += strf(" raised to the %lld experts per token", (long long)slots);
    }
    if (hot == kFromModel) {
        hot = default_hot(slots);
        note += strf("%sH = round(S x %lld/%lld) = %lld", note.empty() ? "" : ", ", (long long)kSeedHot,
                     (long long)kSeedSlots, (long long)hot);
    }
    if (!note.empty())
        residency_defaults += (residency_defaults.empty() ? "" : "; ") + note + " (not given on the command line)";
}

nlohmann::json RunConfig::to_json() const {
    return {
        {"model", model_path},
        {"prompt_text", prompt_text},
        {"prompt_text_file", prompt_text_file},
        {"prompt_ids_file", prompt_ids_file},
        {"prompt_tokens", prompt_tokens},
        {"prompt_seed", prompt_seed},
        {"chat", chat},
        {"system", system},
        {"temp", sampling.temp},
        {"top_k", sampling.top_k},
        {"top_p", sampling.top_p},
        {"min_p", sampling.min_p},
        {"seed", sampling.seed},
        {"gen", gen},
        {"ignore_eos", ignore_eos},
        {"prefill", enum_name(prefill)},
        {"ubatch", ubatch},
        {"launch_tokens", launch_tokens},
        {"passes", passes},
        {"threads", threads},
        {"backend", enum_name(backend)},
        {"sm_limit", sm_limit},
        {"chained_launches", chained_launches},
        {"swiglu_clamp", enum_name(swiglu_clamp)},
        {"matmul", enum_name(matmul)},
        {"n_ctx", n_ctx},
        {"routing", enum_name(routing)},
        {"decode_experts", enum_name(decode_experts)},
        {"host_expert_positions", host_expert_positions},
        {"residency", residency},
        {"slots", slots},
        {"hot", hot},
        {"residency_defaults", residency_defaults},
        {"promote", promote},
        {"preload", preload},
        {"transient_slots", transient_slots},
        {"speculative_copies", speculative_copies},
        {"split_experts", split_experts},
        {"split_copy", enum_name(split_copy)},
        {"lru_slots", lru_slots},
        {"io", enum_name(io)},
        {"queue_depth", queue_depth},
        {"read_size", read_size},
        {"host_budget_mib", host_budget_mib},
        {"vram_budget_mib", vram_budget_mib},
        {"vram_reserve_mib", vram_reserve_mib},
        {"engram_buffer_kib", engram_buffer_kib},
        {"engram_read_ahead_kib", engram_read_ahead_kib},
        {"engram_queue_depth", engram_queue_depth},
        {"fidelity", fidelity},
        {"verify_slots", verify_slots},
        {"metrics_json", metrics_json},
        {"faults", {{"short_read_every", faults.short_read_every}, {"eintr_every", faults.eintr_every},
                    {"eagain_every", faults.eagain_every}, {"eio_at", faults.eio_at}, {"delay_us", faults.delay_us}}},
    };
}

std::string RunConfig::describe() const {
    std::string s = "run config\n";
    // First the binary's own commit (embedded at build time), then every setting.
    s += strf("  %-18s %s\n", "build", build_info().line().c_str());
    const nlohmann::json j = to_json();
    for (const auto& [k, v] : j.items()) s += strf("  %-18s %s\n", k.c_str(), v.dump().c_str());
    return s;
}

}  // namespace bg
