#include "results.h"

#include <sys/stat.h>

#include <map>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ablate.h"
#include "derive.h"
#include "report.h"
#include "scenario.h"
#include "util/file_io.h"

namespace bgh {

namespace fs = std::filesystem;
using nlohmann::json;

Stats stats_of(std::vector<double> v) {
    Stats s;
    s.n = v.size();
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    s.min = v.front();
    s.max = v.back();
    const size_t m = v.size() / 2;
    s.median = v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
    return s;
}

json stats_json(const Stats& s) {
    json j = {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", s.n}};
    if (s.n > 1) j["spread_pct"] = s.spread_pct();
    return j;
}

namespace {

void leaves(const json& j, const std::string& prefix, bool integers_only, std::vector<std::pair<std::string, json>>& out) {
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
        if (it->is_object()) leaves(*it, k, integers_only, out);
        else if (it->is_number_integer() || (!integers_only && it->is_number())) out.push_back({k, *it});
    }
}

// Passes and decode of one run: the engine's metrics file when it wrote one, else what its log
// said before it stopped.
const json* run_passes(const json& run) {
    if (run.contains("metrics") && run["metrics"].is_object()) return &run["metrics"]["passes"];
    if (run.contains("partial") && run["partial"].contains("passes")) return &run["partial"]["passes"];
    return nullptr;
}
const json* run_decode(const json& run) {
    if (run.contains("metrics") && run["metrics"].is_object() && run["metrics"].contains("decode")) return &run["metrics"]["decode"];
    if (run.contains("partial") && run["partial"].contains("decode")) return &run["partial"]["decode"];
    return nullptr;
}

json summarize_objects(const std::vector<const json*>& objs) {
    std::vector<std::string> order;
    std::map<std::string, std::vector<double>> values;
    for (const json* o : objs) {
        std::vector<std::pair<std::string, json>> l;
        leaves(*o, "", false, l);
        for (const auto& [k, v] : l) {
            if (!values.count(k)) order.push_back(k);
            values[k].push_back(v.get<double>());
        }
    }
    json m = json::object();
    for (const auto& k : order) m[k] = stats_json(stats_of(values[k]));
    return m;
}

json counters_of(const json& metrics) {
    json c = {{"passes", json::array()}};
    for (const auto& p : metrics["passes"]) {
        json flat = json::object();
        std::vector<std::pair<std::string, json>> l;
        leaves(p, "", true, l);
        for (const auto& [k, v] : l) flat[k] = v;
        c["passes"].push_back(flat);
    }
    if (metrics.contains("decode")) {
        json flat = json::object();
        std::vector<std::pair<std::string, json>> l;
        leaves(metrics["decode"], "", true, l);
        for (const auto& [k, v] : l) flat[k] = v;
        c["decode"] = flat;
    }
    if (metrics.contains("generated")) c["generated"] = metrics["generated"];
    return c;
}

std::string mib(double v) { return fmt_num(v, v < 100 ? 1 : 0) + " MiB"; }

std::string figure_text(const json& f, int decimals) {
    if (f.is_array()) return fmt_num(f[0].get<double>(), decimals) + "-" + fmt_num(f[1].get<double>(), decimals);
    return fmt_num(f.get<double>(), decimals);
}

std::string short_commit(const json& git) {
    if (!git.contains("commit") || !git["commit"].is_string()) return "unknown";
    std::string s = git["commit"].get<std::string>().substr(0, 10);
    if (git.value("dirty", false)) s += " (with uncommitted changes)";
    return s;
}

std::string join_args(const json& a) {
    std::string s;
    for (const auto& x : a) {
        std::string t = x.get<std::string>();
        if (t.find_first_of(" \t'\"") != std::string::npos) t = "'" + t + "'";
        s += (s.empty() ? "" : " ") + t;
    }
    return s;
}

std::string machine_line(const json& m) {
    std::string s = "Machine: ";
    const json& cpu = m.value("cpu", json::object());
    s += cpu.contains("model") && cpu["model"].is_string() ? cpu["model"].get<std::string>() : std::string("unknown CPU");
    s += ", " + std::to_string(cpu.value("logical_cores", 0)) + " cores";
    s += ", " + fmt_num(m.value("ram_gib", 0.0), 1) + " GiB RAM";
    if (m.contains("gpu") && m["gpu"].is_object())
        s += ", GPU " + m["gpu"].value("name", "?") + " (driver " + m["gpu"].value("driver", "?") + ")";
    else
        s += ", no GPU";
    const json& d = m.value("disk", json::object());
    s += "; model on " + (d.contains("device") && d["device"].is_string() ? d["device"].get<std::string>() : std::string("?"));
    if (d.contains("device_model") && d["device_model"].is_string()) s += " " + d["device_model"].get<std::string>();
    if (d.contains("file_system")) s += " (" + d["file_system"].get<std::string>() + ")";
    s += ", raw read " + (m.contains("raw_disk_gb_s") && m["raw_disk_gb_s"].is_number()
                              ? fmt_num(m["raw_disk_gb_s"].get<double>(), 2) + " GB/s"
                              : std::string("not measured"));
    s += ", pinned PCIe " + (m.contains("pinned_pcie_gb_s") && m["pinned_pcie_gb_s"].is_number()
                                 ? fmt_num(m["pinned_pcie_gb_s"].get<double>(), 2) + " GB/s"
                                 : std::string("n/a (") + m.value("pinned_pcie_note", "not measured") + ")");
    return s + "\n";
}

std::string cgroup_line(const json& result, const json& cfg) {
    const json& cg = result.value("cgroup", json::object());
    if (!cg.value("enabled", false)) return "- Memory cgroup: none (" + cg.value("reason", std::string("?")) + ")\n";
    std::string s = "- Memory cgroup: " + cg.value("layout", std::string("?")) + ", limit " + mib(cg.value("limit_mib", 0.0)) +
                    (cg.value("swap_limited", false) ? ", no swap" : ", " + cg.value("swap_note", std::string("swap not limited")));
    const json& sum = cfg.value("summary", json::object());
    if (sum.contains("cgroup_peak_mib")) s += "; peak " + mib(sum["cgroup_peak_mib"]["max"].get<double>());
    uint64_t kills = 0;
    for (const auto& r : cfg.value("runs", json::array()))
        if (r.contains("cgroup")) kills += r["cgroup"].value("oom_kills", uint64_t(0));
    s += kills ? "; **OOM-killed**" : "; no OOM kill";
    return s + "\n";
}

std::string status_block(const json& r) {
    const std::string st = r.value("status", "?");
    std::string s = "Status: **" + st + "**";
    if (r.contains("started_utc")) s += " · started " + r["started_utc"].get<std::string>();
    s += " · commit " + short_commit(r.value("git", json::object()));
    const int64_t reps = r["scenario"].value("repetitions", int64_t(1));
    s += " · " + std::to_string(reps) + (reps == 1 ? " repetition" : " repetitions; figures are medians, ± the spread (max − min) / median");
    s += "\n";
    if (st != "complete" && r.contains("status_detail")) s += "\n> " + r["status_detail"].get<std::string>() + "\n";
    return s;
}

bool show_published(const json& r) {
    const std::string prof = r["scenario"].value("profile", "");
    return (prof == "rtx3060" || prof == "device") && r["scenario"].contains("published") &&
           r["scenario"]["published"].is_object();
}

std::string seed_table(const json& r, const json& cfg) {
    const json& sc = r["scenario"];
    const bool pub = show_published(r);
    const json published = pub ? sc["published"] : json::object();
    const json& sum = cfg.value("summary", json::object());
    std::string md = "| pass | state | prefill speed | disk read | disk wait |\n|---|---|--:|--:|--:|\n";
    const json labels = sc.value("pass_labels", json::array());
    for (const auto& p : sum.value("passes", json::array())) {
        const int64_t i = p.value("pass", int64_t(0));
        const json& m = p["metrics"];
        const std::string label = i >= 1 && i <= int64_t(labels.size()) ? labels[i - 1].get<std::string>() : std::to_string(i);
        const json seed = pub && published.contains("passes") && i <= int64_t(published["passes"].size())
                              ? published["passes"][i - 1] : json::object();
        auto col = [&](const char* key, int decimals, const char* unit, bool spread) {
            if (!m.contains(key)) return std::string("–");
            std::string c = fmt_num(m[key]["median"].get<double>(), decimals) + unit;
            if (spread && m[key].contains("spread_pct")) c += " ±" + fmt_num(m[key]["spread_pct"].get<double>(), 1) + " %";
            if (seed.contains(key)) c += " (seed " + figure_text(seed[key], decimals) + unit + ")";
            return c;
        };
        md += "| " + label + " | " + p.value("state", "?") + " | " + col("prefill_tok_s", 2, " tok/s", true) + " | " +
              col("disk_read_pct", 2, " %", false) + " | " + col("disk_wait_ms", 0, " ms", false) + " |\n";
    }
    if (sum.value("passes", json::array()).empty()) md += "| – | – | no pass finished | – | – |\n";
    return md;
}

std::string run_lines(const json& r, const json& cfg) {
    const json& sc = r["scenario"];
    const bool pub = show_published(r);
    const json published = pub ? sc["published"] : json::object();
    const json& sum = cfg.value("summary", json::object());
    std::string md;
    const json dec = sum.contains("decode") ? sum["decode"]["metrics"] : json::object();
    md += "- Decode: ";
    if (dec.contains("decode_tok_s") && sc.value("decode_tokens", int64_t(0)) > 1) {
        md += fmt_num(dec["decode_tok_s"]["median"].get<double>(), 2) + " tok/s";
        if (dec["decode_tok_s"].contains("spread_pct")) md += " ±" + fmt_num(dec["decode_tok_s"]["spread_pct"].get<double>(), 1) + " %";
        // The engine's own count (the harness asks for exactly decode_tokens with --ignore-eos).
        const double tokens = dec.contains("tokens") ? dec["tokens"]["median"].get<double>()
                                                     : double(sc.value("decode_tokens", int64_t(0)));
        md += " (" + fmt_num(tokens, 0) + " tokens after the prompt";
        const int64_t stopped = sum["decode"].value("stopped_at_eog_runs", int64_t(0));
        if (stopped > 0) md += "; " + std::to_string(stopped) + " run(s) stopped at an end-of-generation token";
        md += ")";
    } else {
        md += "not measured";
    }
    if (published.contains("decode_tok_s")) md += " — seed " + figure_text(published["decode_tok_s"], 2) + " tok/s";
    md += "\n";
    md += "- VRAM peak: ";
    if (sum.contains("vram_peak_mib")) {
        md += mib(sum["vram_peak_mib"]["max"].get<double>()) + " in the engine's device pools";
        if (sum.contains("vram_device_reported_mib"))
            md += ", device-reported " + mib(sum["vram_device_reported_mib"]["max"].get<double>());
        md += ", budget " + mib(sc["hardware"].value("vram_budget_mib", 0.0));
    } else {
        md += "not measured";
    }
    if (published.contains("vram_peak_mib"))
        md += " — seed " + figure_text(published["vram_peak_mib"], 0) + " MiB" +
              (published.contains("vram_note") ? " " + published["vram_note"].get<std::string>() : std::string());
    md += "\n";
    md += "- Host peak: ";
    md += sum.contains("host_peak_rss_mib") ? mib(sum["host_peak_rss_mib"]["max"].get<double>()) + " resident (engine RSS)"
                                            : std::string("not measured");
    md += ", host budget " + mib(sc["hardware"].value("host_budget_mib", 0.0)) + "\n";
    md += cgroup_line(r, cfg);
    for (const auto& run : cfg.value("runs", json::array()))
        if (run.contains("metrics") && run["metrics"].contains("engine")) {
            const json& e = run["metrics"]["engine"];
            md += "- Engine: " + e.value("backend", std::string("?")) + " backend, " +
                  std::to_string(e.value("threads", 0)) + " threads, " + e.value("io_engine", std::string("?")) + "\n";
            break;
        }
    return md;
}

// Which partition rule ran, in words: the two rules differ in what a warm pass reads from disk.
std::string partition_line(const json& cfg) {
    const Changes c = changes_from_json(cfg.value("changes", json::object()));
    if (!c.partition) return "Partition: off (`--routing exact`, the model's own top-k over all experts).\n\n";
    if (c.rule == PartitionRule::kPinnedTop1)
        return "Partition rule: **pinned-top1** (ours, beyond the seed): rank 1 is the exact argmax over all experts, read "
               "from disk when not resident; ranks 2-k among the layer's S resident experts.\n\n";
    if (c.rule == PartitionRule::kHotPool)
        return "Partition rule: **hot-pool** (ours, an interpretation of the seed's sentence, not its rule): rank 1 among "
               "the layer's S resident experts, ranks 2-k among the H in VRAM now (promotion changes them), topped up from "
               "the resident ones when fewer than k-1 hot remain; every expert resident, at most one outside VRAM per "
               "token with k = 6 and H = 5.\n\n";
    return "Partition rule: **resident-only** (the seed's): every one of the k experts is chosen among the layer's S "
           "resident experts, in exact score order.\n\n";
}

// "4a" where the scenario labels its passes, else "pass 2": how the lines under a table name a pass.
std::string pass_name(const json& r, int64_t p) {
    const json labels = r["scenario"].value("pass_labels", json::array());
    return p >= 1 && p <= int64_t(labels.size()) ? labels[p - 1].get<std::string>() : "pass " + std::to_string(p);
}

std::string baseline_line(const json& r, const json& cfg) {
    const json* base = find_configuration(r, "baseline");
    if (!base || base == &cfg) return "";
    const int64_t passes = r["scenario"].value("passes", int64_t(1));
    std::string md = "- Same-run baseline (token-major, ubatch 3, exact routing, no promotion):";
    bool any = false;
    for (int64_t p = 1; p <= passes; ++p) {
        const auto b = median_of(*base, p, "prefill_tok_s"), o = median_of(cfg, p, "prefill_tok_s");
        if (!b) continue;
        const std::string label = pass_name(r, p);
        md += std::string(any ? ";" : "") + " " + label + " " + fmt_num(*b, 2) + " tok/s";
        if (o && *b > 0) md += " (speed-up " + fmt_num(*o / *b, 2) + "×)";
        any = true;
    }
    return any ? md + "\n" : "";
}

// SPEC §5's hardware figures of one configuration against the raw probes of the same run:
// achieved expert-streaming disk GB/s over raw sequential O_DIRECT, achieved host->device
// GB/s over a pinned copy, and the GPU's busy share of the time no disk read was in flight.
std::string targets_line(const json& r, const json& cfg) {
    const json& mach = r.value("machine", json::object());
    const auto probe = [&](const char* key) -> std::optional<double> {
        if (mach.contains(key) && mach[key].is_number() && mach[key].get<double>() > 0) return mach[key].get<double>();
        return std::nullopt;
    };
    const auto raw_disk = probe("raw_disk_gb_s"), pinned = probe("pinned_pcie_gb_s");
    const int64_t passes = r["scenario"].value("passes", int64_t(1));
    std::string md;
    for (int64_t p = 1; p <= passes; ++p) {
        const std::string label = pass_name(r, p);
        std::vector<std::string> parts;
        const auto disk = median_of(cfg, p, "disk_gb_s"), pcie = median_of(cfg, p, "pcie_gb_s");
        const auto busy = median_of(cfg, p, "gpu_busy_while_disk_idle_fraction");
        const auto busy_io = median_of(cfg, p, "gpu_busy_while_io_idle_fraction");
        if (disk && *disk > 0)
            parts.push_back("disk " + fmt_num(*disk, 2) + " GB/s" +
                            (raw_disk ? " = " + fmt_num(100.0 * *disk / *raw_disk, 0) + " % of raw sequential (target ≥ 90 %)" : ""));
        if (pcie && *pcie > 0)
            parts.push_back("PCIe " + fmt_num(*pcie, 1) + " GB/s" +
                            (pinned ? " = " + fmt_num(100.0 * *pcie / *pinned, 0) + " % of pinned (target ≥ 85 %)" : ""));
        if (busy) parts.push_back("GPU busy " + fmt_num(100.0 * *busy, 0) + " % of the time no disk read was in flight (target ≥ 90 %)");
        if (busy_io) parts.push_back("GPU busy " + fmt_num(100.0 * *busy_io, 0) + " % of the time no disk read or expert copy was pending (target ≥ 90 %)");
        // A pass with no expert read from disk (warm) against its bound: the wall can be no
        // shorter than the bytes over PCIe at the pinned probe's speed, nor than the GPU's kernel
        // time (issue #14's bound); what the disk did meanwhile (Engram rows, read from disk every
        // pass: SPEC §2) is named beside it, with the bound that counts it too.
        const auto wall = median_of(cfg, p, "prefill_ms"), gpu = median_of(cfg, p, "gpu_busy_ms"),
                   bytes = median_of(cfg, p, "pcie_bytes"), expert_disk = median_of(cfg, p, "experts.disk_bytes"),
                   disk_busy = median_of(cfg, p, "overlap.disk_busy_ms");
        if (wall && gpu && bytes && pinned && expert_disk && *expert_disk == 0 && *wall > 0) {
            const double pcie_ms = *bytes / (*pinned * 1e6), bound = std::max(pcie_ms, *gpu);
            std::string b = "wall " + fmt_num(*wall, 0) + " ms = " + fmt_num(*wall / bound, 2) + "× its bound max(PCIe bytes / pinned " +
                            fmt_num(pcie_ms, 0) + " ms, GPU kernel time " + fmt_num(*gpu, 0) + " ms) (target ≤ 1.15×)";
            if (disk_busy && *disk_busy > 0)
                b += ", with Engram reads in flight " + fmt_num(*disk_busy, 0) + " ms of it (" +
                     fmt_num(*wall / std::max(bound, *disk_busy), 2) + "× max(PCIe, GPU kernel time, Engram reads))";
            parts.push_back(b);
        }
        if (parts.empty()) continue;
        md += "  - " + label + ": ";
        for (size_t i = 0; i < parts.size(); ++i) md += (i ? "; " : "") + parts[i];
        md += "\n";
    }
    // Decode against what must move per token: the expert bytes copied over PCIe at the pinned
    // probe's speed (the copy and compute streams overlap, so the larger of that and the GPU's
    // kernel time bounds a token).
    {
        const auto ms = median_of(cfg, 0, "decode_ms"), steps = median_of(cfg, 0, "steps"),
                   bytes = median_of(cfg, 0, "pcie_bytes"), gpu = median_of(cfg, 0, "gpu_busy_ms");
        if (ms && steps && *steps > 0 && bytes && pinned && *ms > 0) {
            const double per_tok_ms = *ms / *steps, pcie_ms = *bytes / *steps / (*pinned * 1e6);
            std::string d = "  - decode: " + fmt_num(1000.0 / per_tok_ms, 2) + " tok/s; PCIe " + fmt_num(*bytes / *steps / 1e6, 1) +
                            " MB per token over the pinned probe bounds it at " + fmt_num(pcie_ms > 0 ? 1000.0 / pcie_ms : 0.0, 2) +
                            " tok/s";
            if (gpu) {
                // A token's copies can start only once its routing is known, after the attention
                // half: the sum is the bound of that order, the max the bound of perfect overlap.
                const double gpu_ms = *gpu / *steps, bound = std::max(pcie_ms, gpu_ms);
                d += "; GPU kernel time " + fmt_num(gpu_ms, 2) + " ms per token; wall " + fmt_num(per_tok_ms, 2) + " ms per token = " +
                     fmt_num(per_tok_ms / bound, 2) + "× max(PCIe, GPU kernel time), " + fmt_num(per_tok_ms / (pcie_ms + gpu_ms), 2) +
                     "× their sum (routing orders a token's copies after its attention)";
            }
            // Issue 24's bound where the CPU computes host-resident experts (--decode-experts cpu
            // or hybrid): a token's host expert bytes over the rates of the paths they took
            // together (the host read probe, and the pinned copy probe where any were copied),
            // plus the GPU's kernel time. Where the run says which of that kernel time ran beside
            // the host's paths (gpu_busy_beside_host_ms: the MoE calls' experts and shared
            // experts, computed while the copies land and the CPU computes; results from 2026-12-07
            // on), that part is left out: it may hide under those paths, and the sum is then a
            // lower bound of the wall. Before it, the kernel time left out other kernels instead
            // (the output head, the Engram projections, the grouping), and the sum was not one.
            const auto cpu_bytes = median_of(cfg, 0, "host_experts.cpu_bytes"),
                       copied = median_of(cfg, 0, "host_experts.copied_bytes");
            // Each host expert byte once (a split expert's down is copied whole while the CPU
            // reads some of its columns); results before host_bytes existed: the two paths' sum.
            const auto host_bytes = median_of(cfg, 0, "host_experts.host_bytes");
            const auto host_read = probe("host_read_gb_s");
            const bool copies_allowed = copied && *copied > 0;
            if (gpu && cpu_bytes && *cpu_bytes > 0 && host_read) {
                const double host_mb = (host_bytes ? *host_bytes : *cpu_bytes + (copied ? *copied : 0.0)) / *steps / 1e6;
                const double rate = *host_read + (copies_allowed ? *pinned : 0.0);
                const auto beside = median_of(cfg, 0, "gpu_busy_beside_host_ms");
                const double gpu_in_bound_ms = (*gpu - (beside ? *beside : 0.0)) / *steps;
                const double host_ms = host_mb / rate, bound = host_ms + gpu_in_bound_ms;
                d += "; host-resident experts " + fmt_num(host_mb, 1) + " MB per token, " +
                     fmt_num(100.0 * *cpu_bytes / *steps / 1e6 / host_mb, 0) + " % on the CPU, over " +
                     (copies_allowed ? "the pinned and host-read probes together (" + fmt_num(*pinned, 1) + " + " +
                                           fmt_num(*host_read, 1) + " GB/s)"
                                     : "the host-read probe (" + fmt_num(*host_read, 1) + " GB/s)") +
                     " take " + fmt_num(host_ms, 2) + " ms; with the GPU kernel time" +
                     (beside
                          ? " outside the experts and shared experts (" + fmt_num(gpu_in_bound_ms, 2) + " ms; their " +
                                fmt_num(*beside / *steps, 2) + " ms run beside the host's paths and are left out)"
                          : std::string()) +
                     " the bound is " + fmt_num(bound, 2) + " ms per token, and the wall reaches " +
                     fmt_num(100.0 * bound / per_tok_ms, 0) + " % of it (issue 24's target ≥ 80 %)";
                // The same with both paths' rates taken at once (probe-pcie --with-host-reads):
                // they share the host's memory.
                const auto together = probe("pcie_and_host_read_gb_s");
                if (copies_allowed && together) {
                    const double host_ms2 = host_mb / *together, bound2 = host_ms2 + gpu_in_bound_ms;
                    d += "; both probes taken at once (the copies and the reads sharing the host's memory: " +
                         fmt_num(*together, 1) + " GB/s together, against " + fmt_num(rate, 1) + " apart) take " +
                         fmt_num(host_ms2, 2) + " ms, a bound of " + fmt_num(bound2, 2) + " ms per token, which the wall reaches at " +
                         fmt_num(100.0 * bound2 / per_tok_ms, 0) + " %";
                }
            }
            // A token's Engram rows are read once its id is known, and no bound above counts
            // their wait: the disk's own latency for such a batch, from the same run's probe
            // (probe-disk's timed batches; machines described before it have none).
            const auto engram_wait = median_of(cfg, 0, "engram.disk_ms");
            const json* disk_probe = mach.contains("raw_disk_probe") ? &mach["raw_disk_probe"] : nullptr;
            if (engram_wait && *engram_wait > 0 && disk_probe && disk_probe->is_object() &&
                disk_probe->contains("batch_ms_median") && (*disk_probe)["batch_ms_median"].is_number() &&
                (*disk_probe)["batch_ms_median"].get<double>() > 0) {
                const double wait_ms = *engram_wait / *steps;
                d += "; the Engram rows' fetches waited " + fmt_num(wait_ms, 2) + " ms per token (" +
                     fmt_num(100.0 * wait_ms / per_tok_ms, 0) + " % of the wall), where this disk takes " +
                     fmt_num((*disk_probe)["batch_ms_median"].get<double>(), 2) + " ms for " +
                     std::to_string(disk_probe->value("batch_reads", int64_t(0))) +
                     " random 4 KiB reads at once (probe-disk, median)";
            }
            md += d + "\n";
        }
    }
    if (md.empty()) return "";
    return "- Hardware use against this run's probes (SPEC §5), " + cfg.value("name", std::string("?")) + ":\n" + md;
}

}  // namespace

std::vector<std::pair<std::string, json>> numeric_leaves(const json& j, bool integers_only) {
    std::vector<std::pair<std::string, json>> out;
    if (j.is_object()) leaves(j, "", integers_only, out);
    return out;
}

void summarize_configuration(json& config) {
    std::vector<std::vector<const json*>> per_pass;
    std::vector<const json*> decodes;
    std::vector<double> rss, cg_peak, vram, vram_dev;
    const json* first_full = nullptr;
    bool stable = true;
    json first_counters;
    for (const auto& run : config["runs"]) {
        if (const json* ps = run_passes(run)) {
            for (size_t i = 0; i < ps->size(); ++i) {
                if (per_pass.size() <= i) per_pass.resize(i + 1);
                per_pass[i].push_back(&(*ps)[i]);
            }
        }
        if (const json* d = run_decode(run)) decodes.push_back(d);
        if (run.contains("cgroup") && run["cgroup"].contains("peak_mib") && run["cgroup"]["peak_mib"].is_number())
            cg_peak.push_back(run["cgroup"]["peak_mib"].get<double>());
        if (run.contains("metrics") && run["metrics"].is_object()) {
            const json& m = run["metrics"];
            if (m.contains("host_peak_rss_mib")) rss.push_back(m["host_peak_rss_mib"].get<double>());
            double v = 0, vd = 0;
            for (const auto& p : m["passes"]) {
                v = std::max(v, p.value("vram_peak_mib", 0.0));
                vd = std::max(vd, p.value("vram_device_reported_mib", 0.0));
            }
            vram.push_back(v);
            vram_dev.push_back(vd);
            const json c = counters_of(m);
            if (!first_full) {
                first_full = &run;
                first_counters = c;
            } else if (c != first_counters) {
                stable = false;
            }
        }
    }
    json sum = {{"passes", json::array()}};
    for (size_t i = 0; i < per_pass.size(); ++i) {
        const json& p0 = *per_pass[i].front();
        sum["passes"].push_back({{"pass", int64_t(i + 1)},
                                 {"state", p0.value("state", "?")},
                                 {"runs", per_pass[i].size()},
                                 {"metrics", summarize_objects(per_pass[i])}});
    }
    if (!decodes.empty()) {
        int64_t stopped = 0;
        for (const json* d : decodes) stopped += d->value("stopped_at_eog", false) ? 1 : 0;
        sum["decode"] = {{"runs", decodes.size()}, {"stopped_at_eog_runs", stopped}, {"metrics", summarize_objects(decodes)}};
    }
    if (!rss.empty()) sum["host_peak_rss_mib"] = stats_json(stats_of(rss));
    if (!cg_peak.empty()) sum["cgroup_peak_mib"] = stats_json(stats_of(cg_peak));
    if (!vram.empty()) sum["vram_peak_mib"] = stats_json(stats_of(vram));
    if (!vram_dev.empty()) sum["vram_device_reported_mib"] = stats_json(stats_of(vram_dev));
    config["summary"] = sum;
    if (first_full) {
        config["counters"] = first_counters;
        config["counters_stable"] = stable;
    } else {
        config.erase("counters");
        config.erase("counters_stable");
    }
}

const json* find_configuration(const json& result, const std::string& name) {
    if (!result.contains("configurations")) return nullptr;
    for (const auto& c : result["configurations"])
        if (c.value("name", "") == name) return &c;
    return nullptr;
}

std::optional<double> median_of(const json& config, int64_t pass, const std::string& metric) {
    if (!config.contains("summary")) return std::nullopt;
    const json& s = config["summary"];
    const json* m = nullptr;
    if (pass == 0) {
        if (!s.contains("decode")) return std::nullopt;
        m = &s["decode"]["metrics"];
    } else {
        if (!s.contains("passes") || pass > int64_t(s["passes"].size())) return std::nullopt;
        m = &s["passes"][pass - 1]["metrics"];
    }
    if (!m->contains(metric)) return std::nullopt;
    return (*m)[metric]["median"].get<double>();
}

bool is_result(const json& j) { return j.is_object() && j.value("format", "") == kResultFormat; }

std::string result_stem(const std::string& out_dir, const std::string& profile, const std::string& scenario,
                        const std::string& timestamp) {
    const std::string dir = out_dir + "/" + profile + "/" + scenario;
    std::string stem = dir + "/" + timestamp;
    for (int i = 2; fs::exists(stem + ".json"); ++i) stem = dir + "/" + timestamp + "-" + std::to_string(i);
    return stem;
}

std::string utc_timestamp() {
    char b[32];
    const std::time_t t = std::time(nullptr);
    struct tm tm;
    gmtime_r(&t, &tm);
    std::strftime(b, sizeof b, "%Y%m%dT%H%M%SZ", &tm);
    return b;
}

std::string utc_iso() {
    char b[32];
    const std::time_t t = std::time(nullptr);
    struct tm tm;
    gmtime_r(&t, &tm);
    std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return b;
}

std::string fmt_num(double v, int decimals) {
    if (!std::isfinite(v)) return "n/a";
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", decimals, std::fabs(v));
    std::string s = b;
    const size_t dot = s.find('.');
    std::string ip = s.substr(0, dot), fp = dot == std::string::npos ? "" : s.substr(dot);
    std::string out;
    for (size_t i = 0; i < ip.size(); ++i) {
        if (i && (ip.size() - i) % 3 == 0) out += ',';
        out += ip[i];
    }
    const bool negative = v < 0 && s.find_first_not_of("0.,") != std::string::npos;
    return (negative ? "-" : "") + out + fp;
}

std::string render_markdown(const json& r, const std::string& svg_name) {
    const json& sc = r["scenario"];
    std::string md = "# " + sc.value("name", "?") + " · " + sc.value("profile", "?") + " profile\n\n";
    if (!sc.value("description", "").empty()) md += sc["description"].get<std::string>() + "\n\n";
    md += status_block(r) + "\n";
    if (r.contains("warnings"))
        for (const auto& w : r["warnings"]) md += "> Warning: " + w.get<std::string>() + "\n";
    if (r.contains("warnings") && !r["warnings"].empty()) md += "\n";

    const json& configs = r.value("configurations", json::array());
    if (sc.value("mode", "run") == "ablation") {
        md += ablation_markdown(ablation_rows(r)) + "\n";
        md += "Cold is pass 1 (slots empty, page cache dropped); warm is pass " + std::to_string(sc.value("passes", int64_t(1))) +
              ". Speed-ups are over the baseline row of this run.\n\n";
        md += derived_ablation_markdown(r);
        if (!svg_name.empty()) md += "![Prefill tok/s, cold and warm, per configuration](" + svg_name + ")\n\n";
        md += changes_legend_markdown() + "\n";
        if (!configs.empty()) md += cgroup_line(r, configs[0]);
        if (const json* all = find_configuration(r, "all three")) md += targets_line(r, *all);
    } else if (!configs.empty()) {
        const json& cfg = configs[0];
        md += "Configuration **" + cfg.value("name", "?") + "**: `" + join_args(cfg.value("change_flags", json::array())) + "`";
        if (show_published(r) && sc["published"].contains("source"))
            md += "; seed figures from " + sc["published"]["source"].get<std::string>();
        md += "\n\n" + partition_line(cfg) + seed_table(r, cfg) + "\n" + run_lines(r, cfg) + baseline_line(r, cfg) +
              targets_line(r, cfg) + derived_markdown(r, cfg) + rtx3060_projection_markdown(r, cfg);
    }
    md += "\n" + machine_line(r.value("machine", json::object()));
    std::string cmds;
    for (const auto& c : configs)
        if (c.contains("engine_command")) cmds += "\n" + c.value("name", "?") + ":\n\n    " + join_args(c["engine_command"]) + "\n";
    if (!cmds.empty()) md += "\n<details><summary>Engine command lines</summary>\n" + cmds + "\n</details>\n";
    return md;
}

void write_result_files(const json& result, const std::string& stem) {
    fs::create_directories(fs::path(stem).parent_path());
    const bool ablation = result["scenario"].value("mode", "run") == "ablation";
    const std::string svg_name = ablation ? fs::path(stem).filename().string() + ".svg" : "";
    // The JSON first: it is the record; the Markdown and the chart are views of it.
    bg::write_file_atomic(stem + ".json", result.dump(2) + "\n");
    if (ablation) bg::write_file_atomic(stem + ".svg", render_ablation_svg(result));
    bg::write_file_atomic(stem + ".md", render_markdown(result, svg_name));
}

}  // namespace bgh
