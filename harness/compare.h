// Regression check between two results of the same scenario. Counters that do not depend on the
// machine (bytes read from disk, fetches per tier, tokens) must match exactly; speeds, which do,
// are compared only as ratios to the baseline configuration measured in the same run, within the
// scenario's tolerance, so a slower CI machine is not a regression but a slower engine is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

struct CompareRow {
    std::string configuration, metric, baseline, current, change, verdict;
    bool failed = false;
};

struct CompareOutcome {
    std::vector<CompareRow> rows;
    std::vector<std::string> errors;   // the results cannot be compared at all
    size_t identical_counters = 0;
    int failures() const;
    std::string table() const;         // aligned text, one row per line, then a verdict line
    int exit_code() const { return !errors.empty() ? 2 : failures() ? 1 : 0; }
};

// `tolerance` overrides the speed-ratio tolerance of the new result's scenario. Without
// `judge_speeds` the ratios are shown but never fail: timings of a sanitizer or debug build say
// nothing about the engine's speed, while its counters must still match.
CompareOutcome compare_results(const nlohmann::json& baseline, const nlohmann::json& current,
                               std::optional<double> tolerance = std::nullopt, bool judge_speeds = true);

}  // namespace bgh
