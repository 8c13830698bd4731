#include "runtime/run_config.h"

#include "util/check.h"

namespace bg {

nlohmann::json RunConfig::to_json() const {
    return {
        {"model", model_path},       {"prompt_tokens", prompt_tokens}, {"prompt_seed", prompt_seed},
        {"prompt_file", prompt_file}, {"gen", gen},                    {"prefill", prefill},
        {"ubatch", ubatch},          {"passes", passes},               {"threads", threads},
        {"swiglu_clamp", swiglu_clamp}, {"n_ctx", n_ctx},              {"metrics_json", metrics_json},
    };
}

std::string RunConfig::describe() const {
    std::string s = "run config\n";
    const nlohmann::json j = to_json();
    for (const auto& [k, v] : j.items()) s += strf("  %-14s %s\n", k.c_str(), v.dump().c_str());
    return s;
}

}  // namespace bg
