// Views regenerated from result JSON files: the Markdown of each, and for an ablation an SVG bar
// chart (prefill tok/s cold and warm per configuration) drawn by hand, so no plotting library is
// needed and any browser shows it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

std::string render_ablation_svg(const nlohmann::json& result);

struct ReportOutcome {
    std::vector<std::string> written;   // files (re)written
    std::vector<std::string> skipped;   // "path: why" for JSON files that are not results
};

// Every result JSON under `dir` (recursively) gets its .md (and .svg) rewritten beside it.
ReportOutcome regenerate_reports(const std::string& dir);

}  // namespace bgh
