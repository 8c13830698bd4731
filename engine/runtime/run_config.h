// Everything `betelgeuse run` was asked to do, printed at the start of every run and embedded in
// every metrics file so each number says how it was made.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace bg {

struct RunConfig {
    std::string model_path;
    int64_t prompt_tokens = 64;
    uint64_t prompt_seed = 1;
    std::string prompt_file;          // overrides prompt_tokens/prompt_seed when set
    int64_t gen = 16;                 // tokens to decode after the prompt
    std::string prefill = "layer-major";
    int64_t ubatch = 16;
    int64_t passes = 1;               // prefill passes over the same prompt before decoding
    int threads = 0;                  // 0: all cores
    std::string swiglu_clamp = "deepseek";  // or "llamacpp"
    int64_t n_ctx = 0;                // 0: prompt + gen
    std::string metrics_json;         // where to write the metrics ("" = none)

    nlohmann::json to_json() const;
    std::string describe() const;     // the start-up table
};

}  // namespace bg
