// betelgeuse-harness: runs benchmark scenarios of the betelgeuse engine inside memory cgroups and
// writes, compares and reports their results. Exit codes: 0 done, 1 failed or a regression,
// 2 bad input (scenario, arguments, results that cannot be compared), 3 the engine was
// OOM-killed, 4 refused (no memory cgroup can be created), 130 interrupted.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include "bench.h"
#include "child.h"
#include "compare.h"
#include "report.h"
#include "results.h"
#include "scenario.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string default_engine() {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    return ec ? "betelgeuse" : (self.parent_path() / "betelgeuse").string();
}

json read_json(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    try {
        return json::parse(in);
    } catch (const json::parse_error& e) {
        throw std::runtime_error(path + ": not valid JSON: " + e.what());
    }
}

struct RunFlags {
    std::string scenario;
    bgh::BenchOptions bench;
    bool no_cgroup = false;
    bool no_probe = false;
    bool quiet = false;
    std::string fake_layout = "v2";
};

void add_run_flags(CLI::App* cmd, RunFlags& f) {
    cmd->add_option("scenario", f.scenario, "Scenario file (JSON; schema in harness/README.md)")->required();
    cmd->add_option("--out", f.bench.out_dir, "Results folder: writes <out>/<profile>/<scenario>/<UTC time>.{json,md}")
        ->capture_default_str();
    cmd->add_option("--engine", f.bench.engine_path, "The betelgeuse binary (default: beside this one)");
    cmd->add_flag("--no-cgroup", f.no_cgroup, "Run without a memory cgroup (no limit); recorded in the results");
    cmd->add_option("--cgroup-parent", f.bench.cgroup_parent,
                    "Create the cgroups under this one (a path inside the memory hierarchy; default: its root)");
    cmd->add_flag("--no-probe", f.no_probe, "Skip the raw disk, PCIe and host memory bandwidth probes");
    cmd->add_flag("--quiet", f.quiet, "Do not print the Markdown at the end, only where the results are");
    cmd->add_option("--fake-cgroup-root", f.bench.fake_cgroup_root,
                    "Testing: lay cgroups out as plain folders under this directory (limits nothing)");
    cmd->add_option("--fake-cgroup-layout", f.fake_layout, "Testing: v1 or v2 for --fake-cgroup-root")
        ->check(CLI::IsMember({"v1", "v2"}))
        ->capture_default_str();
}

int do_run(RunFlags& f, bool ablate, const std::vector<std::string>& argv) {
    bgh::Scenario s = bgh::load_scenario(f.scenario);
    if (ablate && s.mode != "ablation") {
        // Any scenario's model, prompt and limits can be ablated; its own changes are replaced
        // by the matrix, and its results go beside its own under a distinct name.
        s.mode = "ablation";
        s.name += "-ablation";
        s.description = "Ablation of the scenario " + s.file + " (its changes replaced by the matrix). " + s.description;
        s.published.reset();
        s.source->erase("published");
    }
    for (const auto& w : s.warnings) std::fprintf(stderr, "harness: warning: %s\n", w.c_str());
    bgh::BenchOptions& o = f.bench;
    if (o.engine_path.empty()) o.engine_path = default_engine();
    if (::access(o.engine_path.c_str(), X_OK) != 0)
        throw std::runtime_error("no engine binary at " + o.engine_path + " (build the betelgeuse target, or pass --engine)");
    o.engine_path = fs::absolute(o.engine_path).string();
    o.use_cgroup = !f.no_cgroup;
    o.fake_layout = f.fake_layout == "v1" ? bgh::CgroupLayout::kV1 : bgh::CgroupLayout::kV2;
    o.probe = !f.no_probe;
    o.progress = ::isatty(STDERR_FILENO);
    o.print_tables = !f.quiet;
    o.command_line = argv;
    const bgh::BenchOutcome out = bgh::run_bench(s, o);
    if (out.status != "complete") std::fprintf(stderr, "harness: %s: %s\n", out.status.c_str(), out.detail.c_str());
    return out.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"betelgeuse-harness: benchmark scenarios of the betelgeuse engine in memory cgroups; results as JSON "
                 "and Markdown, ablation, regression compare, reports"};
    app.require_subcommand(1);
    std::vector<std::string> args(argv, argv + argc);

    RunFlags run_flags, ablate_flags;
    auto* run = app.add_subcommand("run", "Run a scenario and write results/<profile>/<scenario>/<UTC time>.{json,md}");
    add_run_flags(run, run_flags);
    auto* ablate = app.add_subcommand(
        "ablate", "Run the ablation of a scenario: baseline, each change alone, all three, each left out of all three");
    add_run_flags(ablate, ablate_flags);

    std::string base_path, new_path;
    double tolerance = -1;
    auto* cmp = app.add_subcommand("compare", "Compare a result with a baseline result; exit 1 on a regression");
    cmp->add_option("baseline", base_path, "Baseline result JSON")->required();
    cmp->add_option("new", new_path, "New result JSON")->required();
    cmp->add_option("--tolerance", tolerance, "Allowed relative drop of a speed ratio (default: the scenario's)")
        ->check(CLI::Range(0.0, 1.0));
    bool counters_only = false;
    cmp->add_flag("--counters-only", counters_only,
                  "Judge only the machine-independent counters; show speed ratios without failing on them (sanitizer or "
                  "debug builds)");

    std::string report_dir;
    auto* rep = app.add_subcommand("report", "Regenerate the Markdown (and ablation SVG charts) of every result under DIR");
    rep->add_option("dir", report_dir, "Results folder")->required()->check(CLI::ExistingDirectory);

    std::vector<std::string> validate_paths;
    auto* val = app.add_subcommand("validate", "Check scenario files and print what each would run");
    val->add_option("scenarios", validate_paths, "Scenario files")->required();

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }

    try {
        bgh::install_interrupt_handlers();
        if (*run) return do_run(run_flags, false, args);
        if (*ablate) return do_run(ablate_flags, true, args);
        if (*cmp) {
            const auto o = bgh::compare_results(read_json(base_path), read_json(new_path),
                                                tolerance >= 0 ? std::optional<double>(tolerance) : std::nullopt,
                                                !counters_only);
            std::printf("compare %s -> %s\n%s", base_path.c_str(), new_path.c_str(), o.table().c_str());
            return o.exit_code();
        }
        if (*rep) {
            const auto o = bgh::regenerate_reports(report_dir);
            for (const auto& w : o.written) std::printf("wrote %s\n", w.c_str());
            for (const auto& s : o.skipped) std::printf("skipped %s\n", s.c_str());
            if (o.written.empty()) {
                std::fprintf(stderr, "harness: no result files under %s\n", report_dir.c_str());
                return 1;
            }
            return 0;
        }
        if (*val) {
            int bad = 0;
            for (const auto& p : validate_paths) {
                try {
                    const bgh::Scenario s = bgh::load_scenario(p);
                    std::printf("%s: ok (%s, profile %s, %zu configuration(s) x %lld repetition(s))\n", p.c_str(),
                                s.mode.c_str(), s.profile.c_str(), s.configurations().size(), (long long)s.repetitions);
                    for (const auto& w : s.warnings) std::printf("  warning: %s\n", w.c_str());
                } catch (const bgh::ScenarioError& e) {
                    std::fprintf(stderr, "%s\n", e.what());
                    ++bad;
                }
            }
            return bad ? 2 : 0;
        }
    } catch (const bgh::ScenarioError& e) {
        std::fprintf(stderr, "harness: invalid scenario:\n%s\n", e.what());
        return 2;
    } catch (const bgh::CgroupError& e) {
        std::fprintf(stderr, "harness: refusing to run: %s\n", e.what());
        return 4;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "harness: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
