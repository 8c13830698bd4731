#include "bench.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ablate.h"
#include "child.h"
#include "machine.h"
#include "page_cache.h"
#include "progress.h"
#include "results.h"
#include "util/build_info.h"

namespace bgh {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string last_nonempty_line(const std::string& s) {
    size_t end = s.find_last_not_of(" \n\r\t");
    if (end == std::string::npos) return "";
    size_t begin = s.rfind('\n', end);
    return s.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

std::unique_ptr<MemoryCgroup> make_cgroup(const Scenario& s, const BenchOptions& o, const std::string& name) {
    CgroupLimits lim;
    lim.memory_bytes = uint64_t(s.cgroup_memory_mib) << 20;
    lim.swap = s.swap;
    if (!o.fake_cgroup_root.empty()) return MemoryCgroup::create_fake(o.fake_cgroup_root, o.fake_layout, name, lim);
    return MemoryCgroup::create(name, lim, o.cgroup_parent);
}

void generate_model(const Scenario& s, const BenchOptions& o, Progress& progress) {
    fs::create_directories(fs::path(s.model_path).parent_path());
    progress.note("generating the model " + s.model_path + " from " + s.model_scale_path);
    if (!o.progress) std::fprintf(stderr, "harness: generating %s from %s\n", s.model_path.c_str(), s.model_scale_path.c_str());
    const ChildResult r = run_child({o.engine_path, "make-model", "--scale", s.model_scale_path, "--out", s.model_path,
                                     "--seed", std::to_string(s.model_seed)},
                                    nullptr, {}, [&] { progress.tick(); });
    progress.finish();
    if (!r.ok())
        throw std::runtime_error("make-model failed (" + r.describe() + "): " + last_nonempty_line(r.output_tail));
}

std::string temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string t = std::string(base && *base ? base : "/tmp") + "/betelgeuse-harness-XXXXXX";
    if (!::mkdtemp(t.data())) throw std::runtime_error("cannot create a temporary folder: " + std::string(std::strerror(errno)));
    return t;
}

}  // namespace

json scenario_json(const Scenario& s) {
    json prompt = !s.prompt_text_file.empty()  ? json{{"text_file", s.prompt_text_file}}
                  : !s.prompt_ids_file.empty() ? json{{"ids_file", s.prompt_ids_file}}
                                               : json{{"tokens", s.prompt_tokens}, {"seed", s.prompt_seed}};
    json j = {{"name", s.name},
              {"profile", s.profile},
              {"mode", s.mode},
              {"file", s.file},
              {"description", s.description},
              {"model", {{"path", s.model_path}, {"scale", s.model_scale_path}, {"seed", s.model_seed}}},
              {"hardware",
               {{"vram_budget_mib", s.vram_budget_mib},
                {"host_budget_mib", s.host_budget_mib},
                {"cgroup_memory_mib", s.cgroup_memory_mib},
                {"swap", s.swap}}},
              {"prompt", prompt},
              {"passes", s.passes},
              {"pass_labels", s.pass_labels},
              {"decode_tokens", s.decode_tokens},
              {"repetitions", s.repetitions},
              {"tolerances", {{"speed_ratio", s.speed_ratio_tolerance}}},
              {"source", *s.source}};
    if (s.mode == "run") {
        j["changes"] = changes_to_json(s.changes);
        j["baseline_reference"] = s.baseline_reference;
    }
    if (s.source->contains("published")) j["published"] = (*s.source)["published"];
    if (s.derive_layers > 0) j["derive_layers"] = s.derive_layers;
    return j;
}

BenchOutcome run_bench(const Scenario& s, const BenchOptions& o) {
    Progress progress(o.progress);
    progress.set_scenario(s.name);
    const std::string tag = std::to_string(::getpid());

    // Refuse before spending time on anything else when no cgroup can be made.
    if (o.use_cgroup) make_cgroup(s, o, "betelgeuse-check-" + tag)->remove();
    if (!fs::exists(s.model_path)) generate_model(s, o, progress);

    // Every shard of a split model is evicted before a cold run, not only the file named.
    const std::vector<std::string> files = model_files(s.model_path);

    MachineProbe mp;
    mp.engine_path = o.engine_path;
    mp.model_path = s.model_path;
    mp.disk_probe_flags = {"--io", s.engine.io, "--queue-depth", std::to_string(s.engine.queue_depth), "--read-size",
                           std::to_string(s.engine.read_size_bytes)};
    mp.probe_disk = mp.probe_pcie = mp.probe_host = o.probe;
    if (o.probe) progress.note("measuring the machine (raw disk, PCIe and host memory bandwidth)");
    json machine = describe_machine(mp);
    progress.finish();
    const json engine = engine_build(o.engine_path);
    std::vector<std::string> warnings = s.warnings;
    const json harness_build = bg::build_info().to_json();
    if (engine.value("commit", json()) != harness_build["commit"] || engine.value("dirty", json()) != harness_build["dirty"]) {
        warnings.push_back("the engine (" + engine.value("describe", std::string("commit unknown")) + ") and the harness (" +
                           bg::build_info().describe + ") were built from different commits: the result's git names the engine's");
        progress.note(warnings.back());
    }

    const std::string timestamp = utc_timestamp();
    BenchOutcome out;
    const std::string stem = result_stem(o.out_dir, s.profile, s.name, timestamp);
    out.json_path = stem + ".json";
    out.md_path = stem + ".md";
    if (s.mode == "ablation") out.svg_path = stem + ".svg";

    json r = {{"format", kResultFormat},
              {"format_version", kResultFormatVersion},
              {"status", "running"},
              {"timestamp", timestamp},
              {"started_utc", utc_iso()},
              {"scenario", scenario_json(s)},
              // The commits the binaries were built from (embedded at their builds), not that of
              // the checkout the harness happens to run in.
              {"harness", {{"command_line", o.command_line}, {"engine", o.engine_path}, {"build", harness_build}}},
              {"git", engine},
              {"machine", machine},
              {"warnings", warnings},
              {"configurations", json::array()}};
    if (o.use_cgroup) {
        r["cgroup"] = {{"enabled", true}, {"limit_mib", s.cgroup_memory_mib}};
    } else {
        r["cgroup"] = {{"enabled", false}, {"reason", "--no-cgroup given: the engine ran without a memory limit"}};
    }
    const auto configs = s.configurations();
    for (const auto& c : configs)
        r["configurations"].push_back({{"name", changes_name(c)},
                                       {"changes", changes_to_json(c)},
                                       {"change_flags", change_flags(c)},
                                       {"runs", json::array()}});

    auto save = [&] {
        for (auto& c : r["configurations"]) summarize_configuration(c);
        if (s.mode == "ablation") r["ablation"] = ablation_json(ablation_rows(r));
        write_result_files(r, stem);
    };
    save();

    const std::string tmp = temp_dir();
    std::string status = "complete", detail;
    int seq = 0;
    const int total = int(configs.size() * s.repetitions);
    // Repetitions outermost: slow drift of the machine (thermal, other load) spreads over every
    // configuration alike instead of biasing the one that ran last.
    for (int64_t rep = 1; rep <= s.repetitions && status == "complete"; ++rep) {
        for (size_t ci = 0; ci < configs.size() && status == "complete"; ++ci) {
            if (interrupt_requested()) {
                status = "interrupted";
                detail = std::string("interrupted (") + strsignal(interrupt_signal()) + ") after " + std::to_string(seq) +
                         " of " + std::to_string(total) + " engine runs; the tables show what was measured";
                break;
            }
            ++seq;
            const std::string cname = changes_name(configs[ci]);
            const std::string metrics_path = tmp + "/metrics-" + std::to_string(seq) + ".json";
            std::vector<std::string> argv = engine_args(s, configs[ci], metrics_path);
            argv.insert(argv.begin(), o.engine_path);
            json& cj = r["configurations"][ci];
            if (!cj.contains("engine_command")) cj["engine_command"] = argv;

            json run = {{"repetition", rep}, {"started_utc", utc_iso()}};
            const auto ev = evict_page_cache(files);
            const auto cached = cached_percent(files);
            run["page_cache"] = {{"evicted", !ev}, {"cached_pct_at_start", cached ? json(*cached) : json(nullptr)}};
            if (ev) run["page_cache"]["error"] = *ev;

            std::unique_ptr<MemoryCgroup> cg;
            if (o.use_cgroup) {
                cg = make_cgroup(s, o, "betelgeuse-" + tag + "-" + std::to_string(seq));
                r["cgroup"] = cg->describe();
                r["cgroup"]["enabled"] = true;
                r["cgroup"]["path"] = fs::path(cg->path()).parent_path().string() + "/betelgeuse-" + tag + "-<n>";
            }
            json partial_passes = json::array(), partial_decode;
            progress.start_run(s.name, cname + ", repetition " + std::to_string(rep) + "/" + std::to_string(s.repetitions) +
                                           " (run " + std::to_string(seq) + "/" + std::to_string(total) + ")",
                               s.passes, s.prompt_text_file.empty() && s.prompt_ids_file.empty() ? s.prompt_tokens : 0, s.decode_tokens);
            ChildResult cr;
            try {
                cr = run_child(
                    argv, cg.get(),
                    [&](const std::string& line) {
                        progress.engine_line(line);
                        if (auto p = parse_pass_line(line)) partial_passes.push_back(*p);
                        else if (auto d = parse_decode_line(line)) partial_decode = *d;
                    },
                    [&] {
                        if (cg) cg->sample();
                        progress.tick();
                    });
            } catch (const std::exception& e) {
                progress.finish();
                status = "failed";
                detail = std::string("could not start the engine: ") + e.what();
                break;
            }
            progress.finish();
            run["wall_ms"] = cr.wall_ms;
            run["exit"] = cr.describe();
            CgroupUsage usage;
            if (cg) {
                usage = cg->usage();
                run["cgroup"] = {{"peak_mib", usage.peak_bytes ? json(*usage.peak_bytes / 1048576.0) : json(nullptr)},
                                 {"peak_source", usage.peak_source},
                                 {"oom_events", usage.oom_events},
                                 {"oom_kills", usage.oom_kills},
                                 {"limit_mib", s.cgroup_memory_mib}};
                try {
                    cg->remove();
                    run["cgroup"]["removed"] = true;
                } catch (const CgroupError& e) {
                    run["cgroup"]["removed"] = false;
                    r["warnings"].push_back(e.what());
                }
            }
            json metrics;
            if (cr.ok()) {
                std::ifstream in(metrics_path);
                try {
                    metrics = json::parse(in);
                } catch (...) {
                    metrics = nullptr;
                }
            }
            fs::remove(metrics_path);
            std::string run_status = "ok";
            const bool oom = cg && usage.oom_kills > 0 && !cr.ok();
            if (metrics.is_object()) {
                run["metrics"] = metrics;
            } else {
                run["partial"] = {{"passes", partial_passes}};
                if (!partial_decode.is_null()) run["partial"]["decode"] = partial_decode;
                run["output_tail"] = cr.output_tail;
                if (oom) {
                    run_status = "oom";
                    status = "oom";
                    detail = "OOM: the kernel killed the engine at the memory cgroup's limit of " +
                             std::to_string(s.cgroup_memory_mib) + " MiB" +
                             (usage.peak_bytes ? " (peak " + fmt_num(*usage.peak_bytes / 1048576.0, 1) + " MiB)" : "") +
                             " in configuration " + cname + ", repetition " + std::to_string(rep) + ", after " +
                             std::to_string(partial_passes.size()) + " of " + std::to_string(s.passes) + " passes";
                } else if (cr.interrupted) {
                    run_status = "interrupted";
                    status = "interrupted";
                    detail = std::string("interrupted (") + strsignal(interrupt_signal()) + ") during configuration " + cname +
                             ", repetition " + std::to_string(rep) + ", after " + std::to_string(partial_passes.size()) +
                             " of " + std::to_string(s.passes) + " passes; the tables show what was measured";
                } else {
                    run_status = "failed";
                    status = "failed";
                    detail = "the engine failed (" + cr.describe() + ") in configuration " + cname + ": " +
                             last_nonempty_line(cr.output_tail);
                }
            }
            run["status"] = run_status;
            cj["runs"].push_back(run);
            if (!cj.contains("engine_config") && metrics.is_object() && metrics.contains("config"))
                cj["engine_config"] = metrics["config"];
            save();
        }
    }
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (status == "complete" && interrupt_requested()) {
        status = "interrupted";
        detail = std::string("interrupted (") + strsignal(interrupt_signal()) + ") at the end";
    }
    r["status"] = status;
    if (!detail.empty()) r["status_detail"] = detail;
    r["finished_utc"] = utc_iso();
    save();

    out.status = status;
    out.detail = detail;
    out.exit_code = status == "complete" ? 0 : status == "oom" ? 3 : status == "interrupted" ? 130 : 1;
    out.result = r;
    if (o.print_tables) {
        std::ifstream md(out.md_path);
        std::printf("%s\n", std::string(std::istreambuf_iterator<char>(md), {}).c_str());
    }
    std::printf("results: %s\n         %s\n", out.json_path.c_str(), out.md_path.c_str());
    if (!out.svg_path.empty()) std::printf("         %s\n", out.svg_path.c_str());
    std::fflush(stdout);
    return out;
}

}  // namespace bgh
