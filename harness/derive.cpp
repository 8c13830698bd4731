#include "derive.h"

#include <nlohmann/json.hpp>

#include "results.h"

namespace bgh {

using nlohmann::json;

std::optional<LayerFigures> derive_layers(double tokens, double ms, double disk_bytes, double pcie_bytes,
                                          double disk_wait_ms, int64_t layers_run, int64_t layers_derived) {
    if (!(tokens > 0) || !(ms > 0) || layers_run <= 0 || layers_derived <= 0) return std::nullopt;
    LayerFigures f;
    f.layers_run = layers_run;
    f.layers_derived = layers_derived;
    f.tokens = tokens;
    const double n = double(layers_run), m = double(layers_derived);
    f.ms_per_layer = ms / n;
    f.disk_bytes_per_layer = disk_bytes / n;
    f.pcie_bytes_per_layer = pcie_bytes / n;
    f.disk_wait_ms_per_layer = disk_wait_ms / n;
    f.derived_ms = f.ms_per_layer * m;
    f.derived_tok_s = 1000.0 * tokens / f.derived_ms;
    f.derived_disk_wait_ms = f.disk_wait_ms_per_layer * m;
    return f;
}

std::optional<int64_t> layers_run(const json& result) {
    for (const auto& c : result.value("configurations", json::array()))
        for (const auto& run : c.value("runs", json::array()))
            if (run.contains("metrics") && run["metrics"].is_object() && run["metrics"].contains("model") &&
                run["metrics"]["model"].contains("n_layer") && run["metrics"]["model"]["n_layer"].is_number_integer())
                return run["metrics"]["model"]["n_layer"].get<int64_t>();
    return std::nullopt;
}

namespace {

std::optional<int64_t> layers_wanted(const json& result) {
    const json& sc = result.value("scenario", json::object());
    if (sc.contains("derive_layers") && sc["derive_layers"].is_number_integer()) return sc["derive_layers"].get<int64_t>();
    return std::nullopt;
}

std::string mb(double bytes) { return fmt_num(bytes / 1e6, 1) + " MB"; }

std::string figure_text(const json& f, int decimals, const char* unit) {
    if (f.is_array()) return fmt_num(f[0].get<double>(), decimals) + "-" + fmt_num(f[1].get<double>(), decimals) + unit;
    return fmt_num(f.get<double>(), decimals) + unit;
}

std::string label_of(const json& r, int64_t p) {
    const json labels = r["scenario"].value("pass_labels", json::array());
    return p >= 1 && p <= int64_t(labels.size()) ? labels[p - 1].get<std::string>() : std::to_string(p);
}

std::string heading(int64_t run, int64_t derived) {
    return "Per layer (measured on this " + std::to_string(run) + "-layer model, pass totals / " + std::to_string(run) +
           ") and **derived for " + std::to_string(derived) +
           " layers (DERIVED, not measured**: per-layer time × " + std::to_string(derived) +
           "; the whole pass counts as layer time, so the embedding, output head and Engram reads are multiplied "
           "too and a derived speed is a lower bound):\n\n";
}

}  // namespace

std::optional<LayerFigures> derived_figures(const json& result, const json& config, int64_t pass) {
    const auto want = layers_wanted(result);
    const auto have = layers_run(result);
    if (!want || !have) return std::nullopt;
    const auto get = [&](const char* k) { return median_of(config, pass, k); };
    if (pass == 0) {
        const auto steps = get("steps"), ms = get("decode_ms");
        if (!steps || !ms) return std::nullopt;
        return derive_layers(*steps, *ms, get("experts.disk_bytes").value_or(0), get("pcie_bytes").value_or(0),
                             get("disk_wait_ms").value_or(0), *have, *want);
    }
    const auto tokens = get("prompt_tokens"), ms = get("prefill_ms");
    if (!tokens || !ms) return std::nullopt;
    return derive_layers(*tokens, *ms, get("experts.disk_bytes").value_or(0), get("pcie_bytes").value_or(0),
                         get("disk_wait_ms").value_or(0), *have, *want);
}

std::string derived_markdown(const json& r, const json& cfg) {
    const auto want = layers_wanted(r);
    if (!want) return "";
    const auto have = layers_run(r);
    if (!have) return "\nDerived " + std::to_string(*want) + "-layer figures: none (no run reported the model's layer count).\n";
    const json& sc = r["scenario"];
    const json pub = sc.contains("published") && sc["published"].is_object() ? sc["published"] : json::object();
    const std::string n = std::to_string(*want);
    std::string md = "\n" + heading(*have, *want);
    md += "| pass | state | prefill ms per layer | disk bytes per layer | PCIe bytes per layer | disk wait per layer | "
          "**derived " + n + "-layer prefill** | **derived " + n + "-layer disk wait** | seed (published, " + n +
          " layers) |\n|---|---|--:|--:|--:|--:|--:|--:|--|\n";
    const json& passes = cfg.value("summary", json::object()).value("passes", json::array());
    for (int64_t p = 1; p <= int64_t(passes.size()); ++p) {
        const auto f = derived_figures(r, cfg, p);
        if (!f) continue;
        std::string seed = "–";
        if (pub.contains("passes") && p <= int64_t(pub["passes"].size())) {
            const json& sp = pub["passes"][p - 1];
            std::string parts;
            if (sp.contains("prefill_tok_s")) parts += figure_text(sp["prefill_tok_s"], 2, " tok/s");
            if (sp.contains("disk_read_pct")) parts += (parts.empty() ? "" : ", ") + figure_text(sp["disk_read_pct"], 2, " % disk");
            if (sp.contains("disk_wait_ms")) parts += (parts.empty() ? "" : ", ") + figure_text(sp["disk_wait_ms"], 0, " ms wait");
            if (!parts.empty()) seed = parts;
        }
        md += "| " + label_of(r, p) + " | " + passes[p - 1].value("state", "?") + " | " + fmt_num(f->ms_per_layer, 1) +
              " ms | " + mb(f->disk_bytes_per_layer) + " | " + mb(f->pcie_bytes_per_layer) + " | " +
              fmt_num(f->disk_wait_ms_per_layer, 1) + " ms | **" + fmt_num(f->derived_tok_s, 2) + " tok/s** (derived) | **" +
              fmt_num(f->derived_disk_wait_ms, 0) + " ms** (derived) | " + seed + " |\n";
    }
    if (sc.value("decode_tokens", int64_t(0)) > 1)
        if (const auto d = derived_figures(r, cfg, 0)) {
            md += "\n- Decode per layer: " + fmt_num(d->ms_per_layer / d->tokens, 2) + " ms per token per layer; **derived " + n +
                  "-layer decode " + fmt_num(d->derived_tok_s, 2) + " tok/s (DERIVED)**";
            if (pub.contains("decode_tok_s")) md += " — seed " + figure_text(pub["decode_tok_s"], 2, " tok/s");
            md += "\n";
        }
    md += "- Disk read % is a ratio of bytes and needs no derivation: the table above gives it per pass.\n";
    return md;
}

std::string derived_ablation_markdown(const json& r) {
    const auto want = layers_wanted(r);
    if (!want) return "";
    const auto have = layers_run(r);
    if (!have) return "Derived " + std::to_string(*want) + "-layer figures: none (no run reported the model's layer count).\n\n";
    const int64_t passes = r["scenario"].value("passes", int64_t(1));
    const std::string n = std::to_string(*want);
    std::string md = heading(*have, *want);
    md += "| configuration | prefill ms per layer, cold | prefill ms per layer, warm | **derived " + n +
          "-layer prefill, cold** | **derived " + n + "-layer prefill, warm** |\n|---|--:|--:|--:|--:|\n";
    for (const auto& c : r.value("configurations", json::array())) {
        const auto cold = derived_figures(r, c, 1);
        const auto warm = passes >= 2 ? derived_figures(r, c, passes) : std::nullopt;
        auto cell = [](const std::optional<LayerFigures>& f, bool derived) {
            if (!f) return std::string("–");
            return derived ? "**" + fmt_num(f->derived_tok_s, 2) + " tok/s** (derived)" : fmt_num(f->ms_per_layer, 1) + " ms";
        };
        md += "| " + c.value("name", std::string("?")) + " | " + cell(cold, false) + " | " + cell(warm, false) + " | " +
              cell(cold, true) + " | " + cell(warm, true) + " |\n";
    }
    return md + "\n";
}

}  // namespace bgh
