// The result of running a scenario: one JSON document holding every metric of every pass and
// repetition, their medians and spreads, the machine-independent counters compare checks, the
// engine command lines, the machine and the commit; and the Markdown table rendered from that
// JSON alone (so `report` can always regenerate it). Written atomically, after every engine run,
// so an interrupted or OOM-killed run still leaves a complete file with what was measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

constexpr const char* kResultFormat = "betelgeuse-harness-result";
constexpr int kResultFormatVersion = 1;

struct Stats {
    double median = 0, min = 0, max = 0;
    size_t n = 0;
    double spread_pct() const { return median != 0 ? 100.0 * (max - min) / median : 0.0; }
};
Stats stats_of(std::vector<double> values);
nlohmann::json stats_json(const Stats& s);

// Numeric leaves of an object as "a.b.c" -> value; integers only when `integers_only`.
std::vector<std::pair<std::string, nlohmann::json>> numeric_leaves(const nlohmann::json& j, bool integers_only);

// Recomputes a configuration's "summary", "counters" and "counters_stable" from its "runs".
void summarize_configuration(nlohmann::json& config);

// The configuration of a result with this name, or nullptr.
const nlohmann::json* find_configuration(const nlohmann::json& result, const std::string& name);
// Median of a summarised metric: `pass` 1-based, 0 for decode. nullopt when not measured.
std::optional<double> median_of(const nlohmann::json& config, int64_t pass, const std::string& metric);

bool is_result(const nlohmann::json& j);

// results/<profile>/<scenario>/<timestamp>: the stem of the .json, .md and .svg files; a
// suffix keeps two runs started in the same second apart.
std::string result_stem(const std::string& out_dir, const std::string& profile, const std::string& scenario,
                        const std::string& timestamp);
std::string utc_timestamp();          // 20250101T120000Z
std::string utc_iso();                // 2025-01-01T12:00:00Z

// The Markdown for a result (the seed's table, decode, VRAM and host lines, the ablation table);
// `svg_name` is linked when the result is an ablation.
std::string render_markdown(const nlohmann::json& result, const std::string& svg_name);

// Writes <stem>.json, <stem>.md and, for an ablation, <stem>.svg, each atomically.
void write_result_files(const nlohmann::json& result, const std::string& stem);

// Number formatting shared by the tables: 4782 -> "4,782"; fixed decimals with separators.
std::string fmt_num(double v, int decimals);

}  // namespace bgh
