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

Rtx3060Projection project_rtx3060(double tokens, double gpu_ms, double expert_bytes, double dense_bytes, double pcie_bytes) {
    Rtx3060Projection p;
    p.tokens = tokens;
    p.gpu_ms = gpu_ms;
    p.vram_bytes = expert_bytes + dense_bytes;
    p.pcie_bytes = pcie_bytes;
    p.vram_floor_ms = p.vram_bytes / (kRtx3060VramGBs * 1e6);
    p.pcie_floor_ms = p.pcie_bytes / (kRtx3060PcieGBs * 1e6);
    const double gpu_side = std::max(p.gpu_ms, p.vram_floor_ms);
    p.low_ms = std::max(gpu_side, p.pcie_floor_ms);
    p.high_ms = gpu_side + p.pcie_floor_ms;
    return p;
}

namespace {

// The engine's record of the SM limit and the dense bytes on the device, from the first run of
// the configuration that has metrics.
const json* first_engine(const json& cfg) {
    if (!cfg.contains("runs") || !cfg["runs"].is_array()) return nullptr;
    for (const auto& run : cfg["runs"])
        if (run.contains("metrics") && run["metrics"].is_object() && run["metrics"].contains("engine") &&
            run["metrics"]["engine"].is_object())
            return &run["metrics"]["engine"];
    return nullptr;
}

std::string ms_text(double ms) { return fmt_num(ms, ms < 10 ? 2 : ms < 100 ? 1 : 0) + " ms"; }

std::string range_text(double tokens, double low_ms, double high_ms) {
    const auto tok_s = [&](double ms) { return fmt_num(ms > 0 ? 1000.0 * tokens / ms : 0.0, 2); };
    return tok_s(high_ms) + "-" + tok_s(low_ms) + " tok/s (" + ms_text(low_ms) + " to " + ms_text(high_ms) + ")";
}

}  // namespace

std::string rtx3060_projection_markdown(const json& r, const json& cfg) {
    const json* e = first_engine(cfg);
    if (!e || !e->contains("sm_limit") || !(*e)["sm_limit"].is_object()) return "";
    const json& sl = (*e)["sm_limit"];
    if (sl.value("requested", 0) <= 0) return "";
    const int used = sl.value("used", 0), total = sl.value("total", 0);
    const double dense = e->value("device_image_bytes", 0.0);
    const auto want = layers_wanted(r);
    const auto have = layers_run(r);
    const bool derive = want && have && *have > 0;
    std::string md = "\n### Projection for the RTX 3060 (not a measurement of one)\n\n";
    md += "This run's GPU work ran on **" + std::to_string(used) + " SMs** of the GPU's " + std::to_string(total) +
          " (`--sm-limit " + std::to_string(sl.value("requested", 0)) + "`";
    if (sl.contains("note") && sl["note"].is_string()) md += ": " + sl["note"].get<std::string>();
    md += "); an RTX 3060 has 28. Its GPU kernel time is a lower bound for the 3060's issue-bound work (this GPU's "
          "memory stays faster), so the 3060's floors for the same bytes stand beside it: VRAM reads at " +
          fmt_num(kRtx3060VramGBs, 0) + " GB/s and PCIe copies at " + fmt_num(kRtx3060PcieGBs, 0) +
          " GB/s. VRAM bytes = expert bytes consumed by compute (`experts.consumed_bytes`: each expert once per layer "
          "per unit of work) + the dense weights the GPU holds (`engine.device_image_bytes`, " +
          fmt_num(dense / 1e6, 1) +
          " MB) counted once per pass: a floor, since every unit of work re-reads them. The projected range runs from "
          "max(GPU kernel time, VRAM floor, PCIe floor) (copies hidden under compute) to max(GPU kernel time, VRAM "
          "floor) + PCIe floor (nothing overlapped). A cold pass's disk reads are not projected (this disk is not the "
          "3060 PC's).\n\n";
    const std::string n = derive ? std::to_string(*want) : "";
    md += "| pass | state | GPU kernel time (measured, " + std::to_string(used) +
          " SMs) | VRAM bytes | 3060 VRAM floor | PCIe bytes | 3060 PCIe floor | bound on the 3060 | projected prefill, "
          "this " + (have ? std::to_string(*have) + "-layer " : std::string()) + "model |" +
          (derive ? " **projected " + n + "-layer prefill (PROJECTED)** |" : "") + "\n|---|---|--:|--:|--:|--:|--:|--|--:|" +
          (derive ? "--:|" : "") + "\n";
    const json& passes = cfg.value("summary", json::object()).value("passes", json::array());
    bool any = false;
    for (int64_t p = 1; p <= int64_t(passes.size()); ++p) {
        const auto get = [&](const char* k) { return median_of(cfg, p, k); };
        const auto gpu = get("gpu_busy_ms"), tokens = get("prompt_tokens");
        if (!gpu || !tokens) continue;
        const Rtx3060Projection x =
            project_rtx3060(*tokens, *gpu, get("experts.consumed_bytes").value_or(0), dense, get("pcie_bytes").value_or(0));
        md += "| " + label_of(r, p) + " | " + passes[p - 1].value("state", "?") + " | " + ms_text(x.gpu_ms) + " | " +
              mb(x.vram_bytes) + " | " + ms_text(x.vram_floor_ms) + " | " + mb(x.pcie_bytes) + " | " + ms_text(x.pcie_floor_ms) +
              " | " + (x.copy_bound() ? "copy-bound (PCIe floor above the GPU side)" : "GPU-bound (GPU side above the PCIe floor)") +
              " | " + range_text(x.tokens, x.low_ms, x.high_ms) + " |";
        if (derive) {
            const double k = double(*want) / double(*have);
            md += " **" + range_text(x.tokens, x.low_ms * k, x.high_ms * k) + "** |";
        }
        md += "\n";
        any = true;
    }
    if (!any) md += "| – | – | GPU kernel time not measured | – | – | – | – | – | – |" + std::string(derive ? " – |" : "") + "\n";
    if (derive)
        md += "\nThe " + n + "-layer range is the pass's range per layer × " + n +
              " (as the derived figures above: the whole pass counts as layer time).\n";
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
