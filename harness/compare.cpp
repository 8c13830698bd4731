#include "compare.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "results.h"

namespace bgh {

using nlohmann::json;

namespace {

// Every counter of a configuration as "pass 2 experts.disk_bytes" -> value.
std::vector<std::pair<std::string, json>> flat_counters(const json& c) {
    std::vector<std::pair<std::string, json>> out;
    if (!c.contains("counters")) return out;
    const json& k = c["counters"];
    for (size_t i = 0; i < k.value("passes", json::array()).size(); ++i)
        for (const auto& [key, v] : numeric_leaves(k["passes"][i], true)) out.push_back({"pass " + std::to_string(i + 1) + " " + key, v});
    if (k.contains("decode"))
        for (const auto& [key, v] : numeric_leaves(k["decode"], true)) out.push_back({"decode " + key, v});
    if (k.contains("generated")) out.push_back({"generated tokens", k["generated"]});
    return out;
}

// The headline counters shown even when equal, so the table says what was checked.
bool headline(const std::string& key) {
    for (const char* h : {"experts.disk_bytes", "experts.disk_fetches", "experts.host_hits", "experts.vram_hits",
                          "prompt_tokens", "decode tokens", "generated tokens"})
        if (key.size() >= std::string(h).size() && key.compare(key.size() - std::string(h).size(), std::string::npos, h) == 0)
            return true;
    return false;
}

std::string text(const json& v) {
    if (v.is_number_integer()) return fmt_num(v.get<double>(), 0);
    if (v.is_array()) return std::to_string(v.size()) + " ids";
    return v.dump();
}

std::string pct_change(double a, double b) {
    if (a == 0) return b == 0 ? "0 %" : "new";
    const double p = 100.0 * (b - a) / a;
    return (p >= 0 ? "+" : "") + fmt_num(p, 1) + " %";
}

// The engine command with the per-machine parts (model and metrics paths) masked, so two runs
// of one scenario on different machines compare equal.
json portable_command(const json& cmd) {
    json out = json::array();
    bool mask = false;
    for (const auto& a : cmd) {
        const std::string s = a.get<std::string>();
        out.push_back(mask ? json("<path>") : a);
        mask = s == "--model" || s == "--metrics-json" || s == "--file" || s == "--prompt-ids" || s == "--residency";
        if (out.size() == 1) out[0] = "<engine>";
    }
    return out;
}

}  // namespace

int CompareOutcome::failures() const {
    return int(std::count_if(rows.begin(), rows.end(), [](const CompareRow& r) { return r.failed; }));
}

std::string CompareOutcome::table() const {
    std::vector<std::array<std::string, 6>> t = {{"configuration", "metric", "baseline", "new", "change", "verdict"}};
    for (const auto& r : rows) t.push_back({r.configuration, r.metric, r.baseline, r.current, r.change, r.verdict});
    std::array<size_t, 6> w{};
    for (const auto& row : t)
        for (size_t i = 0; i < 6; ++i) w[i] = std::max(w[i], row[i].size());
    std::string s;
    for (size_t k = 0; k < t.size(); ++k) {
        for (size_t i = 0; i < 6; ++i) {
            s += t[k][i];
            if (i < 5) s += std::string(w[i] - t[k][i].size() + 2, ' ');
        }
        s += "\n";
        if (k == 0) {
            for (size_t i = 0; i < 6; ++i) s += std::string(w[i], '-') + (i < 5 ? "  " : "");
            s += "\n";
        }
    }
    for (const auto& e : errors) s += "cannot compare: " + e + "\n";
    if (identical_counters) s += std::to_string(identical_counters) + " machine-independent counters identical.\n";
    if (!errors.empty()) s += "RESULT: not comparable\n";
    else if (failures()) s += "RESULT: " + std::to_string(failures()) + " regression(s)\n";
    else s += "RESULT: no regression\n";
    return s;
}

CompareOutcome compare_results(const json& base, const json& cur, std::optional<double> tolerance, bool judge_speeds) {
    CompareOutcome o;
    if (!is_result(base)) o.errors.push_back("the baseline is not a harness result");
    if (!is_result(cur)) o.errors.push_back("the new file is not a harness result");
    if (!o.errors.empty()) return o;
    const json &bs = base["scenario"], &cs = cur["scenario"];
    for (const char* k : {"name", "profile", "mode", "passes", "decode_tokens"})
        if (bs.value(k, json()) != cs.value(k, json()))
            o.errors.push_back(std::string("scenario.") + k + " differs: " + bs.value(k, json()).dump() + " vs " +
                               cs.value(k, json()).dump());
    if (!o.errors.empty()) return o;
    const double tol = tolerance.value_or(cs.value("tolerances", json::object()).value("speed_ratio", 0.25));

    if (cur.value("status", "") != "complete")
        o.rows.push_back({"", "status", base.value("status", "?"), cur.value("status", "?"), "",
                          "FAIL: " + cur.value("status_detail", std::string("run did not complete")), true});

    const json* bb = find_configuration(base, "baseline");
    const json* cb = find_configuration(cur, "baseline");
    const int64_t passes = cs.value("passes", int64_t(1));
    for (const auto& bc : base["configurations"]) {
        const std::string name = bc.value("name", "?");
        const json* cc = find_configuration(cur, name);
        if (!cc) {
            o.rows.push_back({name, "configuration", "measured", "missing", "", "FAIL", true});
            continue;
        }
        if (bc.contains("engine_command") && cc->contains("engine_command") &&
            portable_command(bc["engine_command"]) != portable_command((*cc)["engine_command"])) {
            o.errors.push_back(name + ": the engine ran with different flags: " + portable_command(bc["engine_command"]).dump() +
                               " vs " + portable_command((*cc)["engine_command"]).dump());
            continue;
        }
        // Counters, exactly.
        const auto bcnt = flat_counters(bc), ccnt = flat_counters(*cc);
        std::map<std::string, json> cmap(ccnt.begin(), ccnt.end());
        if (bcnt.empty()) o.rows.push_back({name, "counters", "none recorded", "", "", "skipped", false});
        for (const auto& [key, bv] : bcnt) {
            auto it = cmap.find(key);
            if (it == cmap.end()) {
                o.rows.push_back({name, key, text(bv), "missing", "", "FAIL", true});
                continue;
            }
            const json& cv = it->second;
            if (bv == cv) {
                ++o.identical_counters;
                if (headline(key)) o.rows.push_back({name, key, text(bv), text(cv), "", "same", false});
                continue;
            }
            std::string verdict = "MISMATCH";
            std::string change;
            if (bv.is_number() && cv.is_number()) {
                change = pct_change(bv.get<double>(), cv.get<double>());
                // More bytes or fetches from the slower tier is the regression the CI guards.
                const bool worse_if_more = key.find("disk") != std::string::npos || key.find("pcie") != std::string::npos;
                if (worse_if_more && cv.get<double>() > bv.get<double>()) verdict = "REGRESSION";
            }
            o.rows.push_back({name, key, text(bv), text(cv), change, verdict, true});
        }
        if (cc->contains("counters_stable") && !(*cc)["counters_stable"].get<bool>())
            o.rows.push_back({name, "counters across repetitions", "stable", "vary", "", "FAIL: not deterministic", true});

        // Speeds, as ratios to the same run's baseline.
        if (name == "baseline") {
            for (int64_t p = 1; p <= passes; ++p) {
                const auto a = median_of(bc, p, "prefill_tok_s"), b = median_of(*cc, p, "prefill_tok_s");
                if (a && b)
                    o.rows.push_back({name, "pass " + std::to_string(p) + " prefill tok/s", fmt_num(*a, 2), fmt_num(*b, 2),
                                      pct_change(*a, *b), "reference (machine-dependent)", false});
            }
            continue;
        }
        if (!bb || !cb) {
            o.rows.push_back({name, "speeds", "", "", "", "not compared: no same-run baseline", false});
            continue;
        }
        auto ratio_row = [&](int64_t p, const char* metric, const std::string& label) {
            const auto a = median_of(bc, p, metric), ab = median_of(*bb, p, metric);
            const auto b = median_of(*cc, p, metric), bb2 = median_of(*cb, p, metric);
            if (!a || !ab || !b || !bb2 || *ab <= 0 || *bb2 <= 0) return;
            const double ra = *a / *ab, rb = *b / *bb2;
            const bool slower = rb < ra * (1.0 - tol);
            std::string verdict = slower ? "SLOWER (tolerance " + fmt_num(100 * tol, 0) + " %)" : "ok";
            if (!judge_speeds) verdict = (slower ? "slower, " : "") + std::string("not judged (--counters-only)");
            o.rows.push_back({name, label + " / baseline", fmt_num(ra, 3) + "×", fmt_num(rb, 3) + "×", pct_change(ra, rb),
                              verdict, slower && judge_speeds});
        };
        for (int64_t p = 1; p <= passes; ++p) ratio_row(p, "prefill_tok_s", "pass " + std::to_string(p) + " prefill tok/s");
        if (cs.value("decode_tokens", int64_t(0)) > 1) ratio_row(0, "decode_tok_s", "decode tok/s");
    }
    return o;
}

}  // namespace bgh
