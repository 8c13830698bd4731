#include "ablate.h"

#include <nlohmann/json.hpp>

#include "results.h"

namespace bgh {

using nlohmann::json;

namespace {

std::string cell(const std::optional<double>& v, int decimals, const char* unit) {
    return v ? fmt_num(*v, decimals) + unit : std::string("–");
}

std::optional<double> ratio(const std::optional<double>& a, const std::optional<double>& b) {
    if (!a || !b || *b <= 0) return std::nullopt;
    return *a / *b;
}

}  // namespace

std::vector<AblationRow> ablation_rows(const json& result) {
    std::vector<AblationRow> rows;
    if (!result.contains("configurations")) return rows;
    const int64_t passes = result["scenario"].value("passes", int64_t(1));
    for (const auto& c : result["configurations"]) {
        AblationRow r;
        r.name = c.value("name", "?");
        r.changes = changes_from_json(c.value("changes", json::object()));
        r.cold_tok_s = median_of(c, 1, "prefill_tok_s");
        r.cold_disk_pct = median_of(c, 1, "disk_read_pct");
        if (passes >= 2) {
            r.warm_tok_s = median_of(c, passes, "prefill_tok_s");
            r.warm_disk_pct = median_of(c, passes, "disk_read_pct");
        }
        rows.push_back(r);
    }
    const AblationRow* base = nullptr;
    for (const auto& r : rows)
        if (r.changes.count() == 0) base = &r;
    if (base) {
        const auto bc = base->cold_tok_s, bw = base->warm_tok_s;
        for (auto& r : rows) {
            r.cold_speedup = ratio(r.cold_tok_s, bc);
            r.warm_speedup = ratio(r.warm_tok_s, bw);
        }
    }
    return rows;
}

json ablation_json(const std::vector<AblationRow>& rows) {
    json a = json::array();
    auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    for (const auto& r : rows)
        a.push_back({{"configuration", r.name},
                     {"changes", changes_to_json(r.changes)},
                     {"prefill_tok_s_cold", opt(r.cold_tok_s)},
                     {"prefill_tok_s_warm", opt(r.warm_tok_s)},
                     {"disk_read_pct_cold", opt(r.cold_disk_pct)},
                     {"disk_read_pct_warm", opt(r.warm_disk_pct)},
                     {"speedup_cold", opt(r.cold_speedup)},
                     {"speedup_warm", opt(r.warm_speedup)}});
    return a;
}

std::string ablation_markdown(const std::vector<AblationRow>& rows) {
    std::string md =
        "| configuration | partition | layer-major | promotion | prefill cold | prefill warm | disk read cold | "
        "disk read warm | speed-up cold | speed-up warm |\n"
        "|---|:-:|:-:|:-:|--:|--:|--:|--:|--:|--:|\n";
    for (const auto& r : rows) {
        auto mark = [](bool b) { return b ? "✓" : "·"; };
        // The partition's cell names its rule: the two rules differ in speed and disk traffic.
        const std::string partition = r.changes.partition ? std::string(partition_rule_name(r.changes.rule)) : "·";
        md += "| " + r.name + " | " + partition + " | " + mark(r.changes.layer_major) + " | " +
              mark(r.changes.promotion) + " | " + cell(r.cold_tok_s, 2, " tok/s") + " | " + cell(r.warm_tok_s, 2, " tok/s") +
              " | " + cell(r.cold_disk_pct, 2, " %") + " | " + cell(r.warm_disk_pct, 2, " %") + " | " +
              cell(r.cold_speedup, 2, "×") + " | " + cell(r.warm_speedup, 2, "×") + " |\n";
    }
    return md;
}

std::string changes_legend_markdown() {
    return "Changes as engine flags: partition = `--routing resident-only`, the seed's rule: all k experts chosen among "
           "the layer's S resident experts (off: `--routing exact`); layer-major = "
           "`--prefill layer-major --ubatch 16` (off: `--prefill token-major --ubatch 3`, synchronous loads); "
           "promotion = `--promote` (off: no flag). A row marked pinned-top1 runs `--routing pinned-top1` instead: "
           "rank 1 is the exact argmax over all experts, read from disk when not resident (ours, beyond the seed), "
           "so it measures the price of keeping the exact rank 1.\n";
}

}  // namespace bgh
