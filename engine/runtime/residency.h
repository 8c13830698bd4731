// The residency plan: per MoE layer, the S experts that are resident (fixed for a whole run)
// and which H of them start in the VRAM hot zone. Routing policies depend on the resident set
// only, never on the tier an expert currently sits in, so outputs do not depend on cache state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/moe_model.h"

namespace bg {

struct ResidencyPlan {
    int64_t slots = 20;   // S resident experts per layer
    int64_t hot = 5;      // H of them in VRAM
    std::string source;   // "bias" | "profile" | a file path
    std::vector<std::vector<int32_t>> resident;  // [layer][S], most important first
    std::vector<std::vector<int32_t>> hot_ids;   // [layer][H], a subset of resident
    std::vector<std::vector<uint8_t>> mask;      // [layer][n_expert]: 1 when resident

    int64_t n_layer() const { return static_cast<int64_t>(resident.size()); }
    bool is_resident(int64_t layer, int32_t e) const { return mask[layer][e] != 0; }
    // [layer][n_expert]: 1 where the plan puts the expert in VRAM at the start (hot_ids).
    std::vector<std::vector<uint8_t>> hot_masks(int64_t n_expert) const;
    nlohmann::json to_json() const;
};

// Default: per layer the S experts with the highest router bias (ties: lower id), the first H
// hot.
ResidencyPlan plan_from_bias(const MoeModel& m, int64_t slots, int64_t hot);
// From routing counts [layer][expert] (exact routing over a calibration prompt): most used
// first, ties by higher bias then lower id.
ResidencyPlan plan_from_counts(const MoeModel& m, const std::vector<std::vector<uint64_t>>& counts,
                               int64_t slots, int64_t hot);
// Reads a plan file written by `betelgeuse profile`; checks it against the model (layer
// count, ids in range and distinct, hot a subset of resident). Throws bg::Error naming the
// problem.
ResidencyPlan load_plan(const std::string& path, const MoeModel& m);
void save_plan(const ResidencyPlan& p, const std::string& path);

}  // namespace bg
