// The ablation: the baseline (token-major, ubatch 3, exact routing, no promotion), each of the
// seed's three changes alone, all three, and each left out of all three, measured in one run so
// every speed-up is against a baseline taken on the same machine minutes apart.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "scenario.h"

namespace bgh {

struct AblationRow {
    std::string name;
    Changes changes;
    std::optional<double> cold_tok_s, warm_tok_s;       // medians of the first and last pass
    std::optional<double> cold_disk_pct, warm_disk_pct;
    std::optional<double> cold_speedup, warm_speedup;   // over the baseline row
};

// One row per configuration of a result, in run order; speed-ups need the baseline row.
std::vector<AblationRow> ablation_rows(const nlohmann::json& result);
nlohmann::json ablation_json(const std::vector<AblationRow>& rows);
std::string ablation_markdown(const std::vector<AblationRow>& rows);
// The flag mapping of the three changes, for the documentation under every ablation table.
std::string changes_legend_markdown();

}  // namespace bgh
