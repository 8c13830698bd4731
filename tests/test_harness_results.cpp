// Results: the JSON holds every pass of every repetition with medians and spreads, the Markdown
// is exactly what the JSON renders to (and `report` regenerates it), the ablation gets its table
// and SVG, and Ctrl-C in the middle of a run leaves complete, atomic files.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "ablate.h"
#include "derive.h"
#include "gguf/gguf.h"
#include "harness/harness_fixture.h"
#include "machine.h"
#include "model_fixture.h"
#include "page_cache.h"
#include "progress.h"
#include "report.h"
#include "results.h"
#include "util/build_info.h"

using bghtest::TempDir;
using nlohmann::json;

namespace {

std::string stem_of(const std::string& json_path) { return json_path.substr(0, json_path.size() - 5); }

std::vector<std::string> cgroup_flags() {
    return bghtest::can_create_cgroups() ? std::vector<std::string>{} : std::vector<std::string>{"--no-cgroup"};
}

// Files other than results in a results folder: leftovers of a write that was not atomic.
std::vector<std::string> stray_files(const std::string& dir) {
    std::vector<std::string> v;
    for (auto& e : bghtest::fs::recursive_directory_iterator(dir)) {
        const std::string ext = e.path().extension().string();
        if (e.is_regular_file() && ext != ".json" && ext != ".md" && ext != ".svg") v.push_back(e.path().string());
    }
    return v;
}

// The engine's decode line as the harness reads it when no metrics file came back; a stop at an
// end-of-generation token is said after the figures.
TEST(EngineLog, DecodeLineIsReadWithOrWithoutAStop) {
    for (const std::string line : {"decode: 16 tokens, 26.31 tok/s", "decode: 3 tokens, 12.50 tok/s (stopped at end-of-generation token 5)"}) {
        const auto j = bgh::parse_decode_line(line);
        ASSERT_TRUE(j.has_value()) << line;
        EXPECT_EQ((*j)["tokens"], line[8] == '1' ? 16 : 3);
    }
    EXPECT_FALSE(bgh::parse_decode_line("decode: 3 tokens (stopped), 12.50 tok/s").has_value()) << "the form before the fix";
}

// An engine that cannot say what it was built from leaves the commit null, with the reason.
TEST(HarnessBuild, AnEngineThatCannotReportItsBuildIsNamedUnknown) {
    const json b = bgh::engine_build("/nonexistent/betelgeuse");
    EXPECT_TRUE(b["commit"].is_null());
    EXPECT_TRUE(b["dirty"].is_null());
    EXPECT_NE(b.value("note", std::string()).find("did not report the commit"), std::string::npos) << b.dump();
    EXPECT_EQ(bgh::engine_build(bghtest::engine_bin()), bg::build_info().to_json());
}

}  // namespace

TEST(HarnessResults, StatsAndNumbers) {
    const bgh::Stats s = bgh::stats_of({3, 1, 2, 10});
    EXPECT_DOUBLE_EQ(s.median, 2.5);
    EXPECT_DOUBLE_EQ(s.min, 1);
    EXPECT_DOUBLE_EQ(s.max, 10);
    EXPECT_DOUBLE_EQ(s.spread_pct(), 360);
    EXPECT_EQ(bgh::fmt_num(4782, 0), "4,782");
    EXPECT_EQ(bgh::fmt_num(1234567.891, 2), "1,234,567.89");
    EXPECT_EQ(bgh::fmt_num(-0.001, 2), "0.00");
    EXPECT_EQ(bgh::fmt_num(61.8, 2), "61.80");
}

TEST(HarnessResults, JsonHoldsEveryRunAndTheMarkdownMatchesIt) {
    TempDir dir;
    const json published = {{"source", "the seed"},
                            {"passes", {{{"prefill_tok_s", 6.83}, {"disk_read_pct", 14.65}, {"disk_wait_ms", 4782}},
                                        {{"prefill_tok_s", 61.8}, {"disk_read_pct", 0}, {"disk_wait_ms", 0}}}},
                            {"decode_tok_s", {18.15, 18.92}},
                            {"vram_peak_mib", 11396},
                            {"vram_note", "within 12 GiB"}};
    // The device profile shows the seed's figures beside ours.
    const std::string sc = bghtest::tiny_scenario(
        dir.path, "seedlike", {{"profile", "device"}, {"pass_labels", {"4a", "4b"}}, {"published", published}});
    std::vector<std::string> args = {bghtest::harness_bin(), "run", sc, "--out", dir / "out"};
    for (const auto& f : cgroup_flags()) args.push_back(f);
    const auto e = bghtest::exec(args);
    ASSERT_EQ(e.code, 0) << e.out;
    const std::string path = bghtest::only_result(dir / "out", "device", "seedlike");
    ASSERT_FALSE(path.empty()) << e.out;
    EXPECT_NE(e.out.find(path), std::string::npos) << "the harness says where the results are";
    const json r = bghtest::read_json(path);

    EXPECT_TRUE(bgh::is_result(r));
    EXPECT_EQ(r["status"], "complete");
    EXPECT_EQ(r["scenario"]["name"], "seedlike");
    EXPECT_TRUE(r["harness"]["command_line"].is_array());
    // The commit is the one embedded in the binaries at build time (this test's own build), not
    // that of a checkout the harness runs in.
    EXPECT_EQ(r["git"], bg::build_info().to_json());
    EXPECT_EQ(r["harness"]["build"], bg::build_info().to_json());
    for (const auto& w : r["warnings"]) EXPECT_EQ(w.get<std::string>().find("different commits"), std::string::npos) << w;
    const json& m = r["machine"];
    for (const char* k : {"cpu", "ram_bytes", "disk", "raw_disk_gb_s", "pinned_pcie_gb_s", "host_read_gb_s",
                          "pcie_and_host_read_gb_s", "gpu"})
        EXPECT_TRUE(m.contains(k)) << k;
    EXPECT_TRUE(m["raw_disk_gb_s"].is_number()) << m.dump();
    EXPECT_GT(m["host_read_gb_s"].get<double>(), 0.0) << m.dump();
    EXPECT_TRUE(m["cpu"]["logical_cores"].get<int>() >= 1);

    ASSERT_EQ(r["configurations"].size(), 2u);
    for (const auto& c : r["configurations"]) {
        SCOPED_TRACE(c["name"].get<std::string>());
        ASSERT_EQ(c["runs"].size(), 2u) << "every repetition is kept";
        for (const auto& run : c["runs"]) {
            EXPECT_EQ(run["status"], "ok");
            ASSERT_EQ(run["metrics"]["passes"].size(), 2u);
            EXPECT_TRUE(run["page_cache"]["evicted"].get<bool>());
            EXPECT_EQ(run["metrics"]["build"], bg::build_info().to_json()) << "the engine's own record";
        }
        EXPECT_TRUE(c["engine_command"].is_array());
        const json& p1 = c["summary"]["passes"][0]["metrics"]["prefill_tok_s"];
        EXPECT_EQ(p1["n"], 2);
        EXPECT_TRUE(p1.contains("spread_pct"));
        const double a = c["runs"][0]["metrics"]["passes"][0]["prefill_tok_s"], b = c["runs"][1]["metrics"]["passes"][0]["prefill_tok_s"];
        EXPECT_DOUBLE_EQ(p1["median"].get<double>(), (a + b) / 2);
        EXPECT_TRUE(c["counters_stable"].get<bool>()) << "same prompt, same counters";
        EXPECT_EQ(c["counters"]["passes"][0]["prompt_tokens"], 16);
    }

    const std::string md = bghtest::read_text(stem_of(path) + ".md");
    EXPECT_EQ(md, bgh::render_markdown(r, "")) << "the Markdown is a pure view of the JSON";
    const json& cfg = r["configurations"][0];
    EXPECT_EQ(cfg["name"], "all three");
    for (int p = 1; p <= 2; ++p) {
        const json& pm = cfg["summary"]["passes"][p - 1]["metrics"];
        const std::string row = std::string("| ") + (p == 1 ? "4a | cold | " : "4b | warm | ") +
                                bgh::fmt_num(pm["prefill_tok_s"]["median"].get<double>(), 2) + " tok/s";
        EXPECT_NE(md.find(row), std::string::npos) << row << "\n" << md;
        EXPECT_NE(md.find(bgh::fmt_num(pm["disk_read_pct"]["median"].get<double>(), 2) + " %"), std::string::npos);
    }
    EXPECT_NE(md.find("| pass | state | prefill speed | disk read | disk wait |"), std::string::npos);
    EXPECT_NE(md.find("(seed 6.83 tok/s)"), std::string::npos) << md;
    EXPECT_NE(md.find("(seed 4,782 ms)"), std::string::npos) << md;
    EXPECT_NE(md.find("seed 18.15-18.92 tok/s"), std::string::npos) << md;
    EXPECT_NE(md.find("seed 11,396 MiB within 12 GiB"), std::string::npos) << md;
    EXPECT_NE(md.find(bgh::fmt_num(cfg["summary"]["decode"]["metrics"]["decode_tok_s"]["median"].get<double>(), 2) + " tok/s"),
              std::string::npos);
    EXPECT_NE(md.find("Same-run baseline"), std::string::npos);
    EXPECT_TRUE(stray_files(dir / "out").empty());

    // report regenerates the same Markdown from the JSON alone.
    bghtest::fs::remove(stem_of(path) + ".md");
    const auto rep = bghtest::exec({bghtest::harness_bin(), "report", dir / "out"});
    ASSERT_EQ(rep.code, 0) << rep.out;
    EXPECT_EQ(bghtest::read_text(stem_of(path) + ".md"), md);
}

TEST(HarnessResults, CiProfileShowsNoPublishedFigures) {
    TempDir dir;
    const json published = {{"passes", {{{"prefill_tok_s", 6.83}}}}, {"decode_tok_s", 18.5}};
    const std::string sc =
        bghtest::tiny_scenario(dir.path, "plain", {{"repetitions", 1}, {"profile", "ci"}, {"published", published}});
    auto e = bghtest::exec({bghtest::harness_bin(), "run", sc, "--out", dir / "out", "--no-probe", "--quiet", "--no-cgroup"});
    ASSERT_EQ(e.code, 0) << e.out;
    const std::string md = bghtest::read_text(stem_of(bghtest::only_result(dir / "out", "ci", "plain")) + ".md");
    EXPECT_EQ(md.find("(seed "), std::string::npos) << md;
    EXPECT_EQ(md.find("— seed"), std::string::npos) << md;
    EXPECT_NE(md.find("| 1 | cold |"), std::string::npos) << md;
    EXPECT_NE(md.find("Memory cgroup: none"), std::string::npos) << md;
}

TEST(HarnessResults, AblationWritesItsTableAndAnSvgTheMarkdownLinks) {
    TempDir dir;
    const std::string sc = bghtest::tiny_scenario(dir.path, "small", {{"repetitions", 1}, {"decode_tokens", 0}});
    std::vector<std::string> args = {bghtest::harness_bin(), "ablate", sc, "--out", dir / "out", "--no-probe", "--quiet"};
    for (const auto& f : cgroup_flags()) args.push_back(f);
    const auto e = bghtest::exec(args);
    ASSERT_EQ(e.code, 0) << e.out;
    const std::string path = bghtest::only_result(dir / "out", "test", "small-ablation");
    ASSERT_FALSE(path.empty()) << e.out;
    const json r = bghtest::read_json(path);
    EXPECT_EQ(r["scenario"]["mode"], "ablation");
    ASSERT_EQ(r["configurations"].size(), 9u);
    ASSERT_EQ(r["ablation"].size(), 9u);
    EXPECT_EQ(r["ablation"][0]["configuration"], "baseline");
    EXPECT_DOUBLE_EQ(r["ablation"][0]["speedup_warm"].get<double>(), 1.0);
    for (const auto& row : r["ablation"]) {
        EXPECT_TRUE(row["prefill_tok_s_cold"].is_number());
        EXPECT_TRUE(row["prefill_tok_s_warm"].is_number());
        EXPECT_TRUE(row["disk_read_pct_cold"].is_number());
    }
    const std::string stem = stem_of(path);
    const std::string svg = bghtest::read_text(stem + ".svg");
    EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    for (const char* name : {"baseline", "partition only", "layer-major only", "promotion only", "all three", "without partition",
                             "without layer-major", "without promotion", "all three (pinned-top1)"})
        EXPECT_NE(svg.find(std::string(">") + name + "<"), std::string::npos) << name;
    // The extra row: all three with pinned-top1, its speed-up over the same baseline, the rule named.
    const json& extra = r["ablation"][8];
    EXPECT_EQ(extra["configuration"], "all three (pinned-top1)");
    EXPECT_EQ(extra["changes"]["partition_rule"], "pinned-top1");
    EXPECT_DOUBLE_EQ(extra["speedup_cold"].get<double>(),
                     extra["prefill_tok_s_cold"].get<double>() / r["ablation"][0]["prefill_tok_s_cold"].get<double>());
    EXPECT_EQ(r["configurations"][8]["change_flags"][1], "pinned-top1");
    EXPECT_EQ(r["configurations"][4]["change_flags"][1], "resident-only");
    const std::string md = bghtest::read_text(stem + ".md");
    EXPECT_NE(md.find("](" + bghtest::fs::path(stem).filename().string() + ".svg)"), std::string::npos) << md;
    EXPECT_NE(md.find("| configuration | partition | layer-major | promotion | prefill cold | prefill warm |"), std::string::npos);
    EXPECT_NE(md.find("| all three | resident-only | ✓ | ✓ |"), std::string::npos) << md;
    EXPECT_NE(md.find("| all three (pinned-top1) | pinned-top1 | ✓ | ✓ |"), std::string::npos) << md;
    EXPECT_EQ(md, bgh::render_markdown(r, bghtest::fs::path(stem).filename().string() + ".svg"));
    EXPECT_EQ(bgh::render_ablation_svg(r), svg);
}

// Interrupts a harness run of many passes after `wait_ms` (once its result file exists) and
// checks what it left; returns how many passes had finished, or -1 where a check failed.
static int interrupt_after(int wait_ms) {
    TempDir dir;
    const std::string sc = bghtest::tiny_scenario(dir.path, "long", {{"repetitions", 1}, {"passes", 1000}, {"baseline_reference", false}});
    const bool cg = bghtest::can_create_cgroups();
    std::vector<std::string> args = {bghtest::harness_bin(), "run", sc, "--out", dir / "out", "--no-probe", "--quiet"};
    if (!cg) args.push_back("--no-cgroup");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    // The result file exists from the start; the engine then needs a moment to load.
    for (int i = 0; i < 200 && bghtest::only_result(dir / "out", "test", "long").empty(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    EXPECT_EQ(::kill(pid, SIGINT), 0);
    int st = 0;
    EXPECT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 130);

    const std::string path = bghtest::only_result(dir / "out", "test", "long");
    EXPECT_FALSE(path.empty());
    if (path.empty()) return -1;
    const json r = bghtest::read_json(path);  // parses: never truncated
    EXPECT_EQ(r["status"], "interrupted");
    const json& run = r["configurations"][0]["runs"][0];
    EXPECT_EQ(run["status"], "interrupted");
    EXPECT_TRUE(run.contains("partial"));
    if (!run.contains("partial")) return -1;
    const size_t done = run["partial"]["passes"].size();
    EXPECT_LT(done, 1000u);
    EXPECT_EQ(r["configurations"][0]["summary"]["passes"].size(), done);
    EXPECT_EQ(bghtest::read_text(stem_of(path) + ".md"), bgh::render_markdown(r, ""));
    EXPECT_TRUE(stray_files(dir / "out").empty()) << ::testing::PrintToString(stray_files(dir / "out"));
    if (cg) {
        EXPECT_EQ(run["cgroup"]["removed"], true);
        const std::string hierarchy = bghtest::fs::path(r["cgroup"]["path"].get<std::string>()).parent_path().string();
        EXPECT_TRUE(bghtest::leftover_cgroups(hierarchy, pid).empty());
    }
    return ::testing::Test::HasFailure() ? -1 : static_cast<int>(done);
}

TEST(HarnessResults, SigintLeavesCompleteAtomicResultsAndNoCgroup) {
    // Passes finished before Ctrl-C are kept. On a loaded machine the engine may not have
    // finished one by the first interrupt, so the wait grows until one has; every attempt must
    // still leave a complete, parseable result and no cgroup.
    int done = 0;
    for (int wait_ms : {1500, 4000, 10000}) {
        done = interrupt_after(wait_ms);
        if (done != 0) break;
    }
    EXPECT_GT(done, 0) << "no pass had finished even 10 s after the engine started";
}

// SPEC §5's hardware figures are shown as shares of the probes measured in the same run.
TEST(HarnessResults, MarkdownStatesHardwareUseAgainstTheSameRunsProbes) {
    const json pass = {{"pass", 1}, {"state", "cold"}, {"runs", 1},
                       {"metrics", {{"prefill_tok_s", {{"median", 10.0}}}, {"disk_gb_s", {{"median", 1.8}}},
                                    {"pcie_gb_s", {{"median", 44.0}}},
                                    {"gpu_busy_while_disk_idle_fraction", {{"median", 0.93}}},
                                    {"gpu_busy_while_io_idle_fraction", {{"median", 0.91}}},
                                    {"prefill_ms", {{"median", 100.0}}}, {"gpu_busy_ms", {{"median", 80.0}}},
                                    {"pcie_bytes", {{"median", 2.2e9}}}, {"experts.disk_bytes", {{"median", 0.0}}},
                                    {"overlap.disk_busy_ms", {{"median", 90.0}}}}}};
    const json decode = {{"metrics", {{"decode_ms", {{"median", 150.0}}}, {"steps", {{"median", 15.0}}},
                                      {"pcie_bytes", {{"median", 1.1e9}}}, {"gpu_busy_ms", {{"median", 60.0}}},
                                      {"host_experts.cpu_bytes", {{"median", 0.6e9}}},
                                      {"host_experts.copied_bytes", {{"median", 1.1e9}}}}}};
    const json r = {{"format", bgh::kResultFormat},
                    {"status", "complete"},
                    {"scenario", {{"name", "t"}, {"profile", "device"}, {"mode", "run"}, {"passes", 1},
                                  {"repetitions", 1}, {"pass_labels", {"4a"}},
                                  {"hardware", {{"vram_budget_mib", 2048}, {"host_budget_mib", 2048}}}}},
                    {"configurations", {{{"name", "all three"}, {"change_flags", json::array()},
                                         {"summary", {{"passes", {pass}}, {"decode", decode}}}, {"runs", json::array()}}}},
                    {"machine", {{"raw_disk_gb_s", 2.0}, {"pinned_pcie_gb_s", 55.0}, {"host_read_gb_s", 45.0}}}};
    const std::string md = bgh::render_markdown(r, "");
    EXPECT_NE(md.find("4a: disk 1.80 GB/s = 90 % of raw sequential (target ≥ 90 %)"), std::string::npos) << md;
    EXPECT_NE(md.find("PCIe 44.0 GB/s = 80 % of pinned (target ≥ 85 %)"), std::string::npos) << md;
    EXPECT_NE(md.find("GPU busy 93 % of the time no disk read was in flight"), std::string::npos) << md;
    EXPECT_NE(md.find("GPU busy 91 % of the time no disk read or expert copy was pending"), std::string::npos) << md;
    // A pass that read no expert from disk, against max(PCIe bytes / pinned, GPU kernel time), and
    // against the bound that also counts the Engram rows' disk reads (90 ms here, the largest).
    EXPECT_NE(md.find("wall 100 ms = 1.25× its bound max(PCIe bytes / pinned 40 ms, GPU kernel time 80 ms) (target ≤ 1.15×), "
                      "with Engram reads in flight 90 ms of it (1.11× max(PCIe, GPU kernel time, Engram reads))"),
              std::string::npos)
        << md;
    // Decode against the bytes each token moves over the pinned probe.
    EXPECT_NE(md.find("decode: 100.00 tok/s; PCIe 73.3 MB per token over the pinned probe bounds it at 750.00 tok/s; "
                      "GPU kernel time 4.00 ms per token; wall 10.00 ms per token = 2.50× max(PCIe, GPU kernel time), "
                      "1.88× their sum (routing orders a token's copies after its attention)"),
              std::string::npos)
        << md;
    // Issue 24's bound where the CPU takes host-resident experts: their bytes over the pinned and
    // host-read probes together, plus the GPU's kernel time, against the wall.
    EXPECT_NE(md.find("; host-resident experts 113.3 MB per token, 35 % on the CPU, over the pinned and host-read probes "
                      "together (55.0 + 45.0 GB/s) take 1.13 ms; with the GPU kernel time the bound is 5.13 ms per "
                      "token, and the wall reaches 51 % of it (issue 24's target ≥ 80 %)"),
              std::string::npos)
        << md;
    EXPECT_EQ(md.find("both probes taken at once"), std::string::npos) << "no such probe in this machine record";
    // With the probe that copies and reads at once (the paths share the host's memory), the same
    // bytes over its rate, beside the bound of the two probes taken apart.
    json r2 = r;
    r2["machine"]["pcie_and_host_read_gb_s"] = 80.0;
    const std::string md2 = bgh::render_markdown(r2, "");
    EXPECT_NE(md2.find("(issue 24's target ≥ 80 %); both probes taken at once (the copies and the reads sharing the "
                       "host's memory: 80.0 GB/s together, against 100.0 apart) take 1.42 ms, a bound of 5.42 ms per "
                       "token, which the wall reaches at 54 %"),
              std::string::npos)
        << md2;
    // Where the run counts the kernel time that ran beside the host's paths (the experts and
    // shared experts), the bound leaves it out: 60 - 15 ms over 15 steps, 3.00 ms a token.
    json r4 = r2;
    r4["configurations"][0]["summary"]["decode"]["metrics"]["gpu_busy_beside_host_ms"] = {{"median", 15.0}};
    const std::string md4 = bgh::render_markdown(r4, "");
    EXPECT_NE(md4.find("together (55.0 + 45.0 GB/s) take 1.13 ms; with the GPU kernel time outside the experts and "
                       "shared experts (3.00 ms; their 1.00 ms run beside the host's paths and are left out) the bound "
                       "is 4.13 ms per token, and the wall reaches 41 % of it (issue 24's target ≥ 80 %); both probes "
                       "taken at once (the copies and the reads sharing the host's memory: 80.0 GB/s together, against "
                       "100.0 apart) take 1.42 ms, a bound of 4.42 ms per token, which the wall reaches at 44 %"),
              std::string::npos)
        << md4;
    // The Engram rows' fetch wait, beside the disk's latency for such a batch where the machine's
    // disk probe timed batches (none in r's machine record).
    EXPECT_EQ(md.find("Engram rows' fetches"), std::string::npos) << md;
    json r3 = r;
    r3["configurations"][0]["summary"]["decode"]["metrics"]["engram.disk_ms"] = {{"median", 4.5}};
    r3["machine"]["raw_disk_probe"] = {{"seq_gb_s", 2.0}, {"batch_reads", 24}, {"batch_ms_median", 0.25}};
    const std::string md3 = bgh::render_markdown(r3, "");
    EXPECT_NE(md3.find("; the Engram rows' fetches waited 0.30 ms per token (3 % of the wall), where this disk takes "
                       "0.25 ms for 24 random 4 KiB reads at once (probe-disk, median)"),
              std::string::npos)
        << md3;
}

// The slice profile's per-layer figures and the deeper model derived from them: plain arithmetic,
// labelled as derived, with the seed's published figures beside.
TEST(HarnessResults, DerivedFiguresScalePerLayerFiguresToTheDerivedDepth) {
    const auto f = bgh::derive_layers(64, 2000.0, 5e9, 6e9, 500.0, 5, 40);
    ASSERT_TRUE(f);
    EXPECT_DOUBLE_EQ(f->ms_per_layer, 400.0);
    EXPECT_DOUBLE_EQ(f->disk_bytes_per_layer, 1e9);
    EXPECT_DOUBLE_EQ(f->pcie_bytes_per_layer, 1.2e9);
    EXPECT_DOUBLE_EQ(f->disk_wait_ms_per_layer, 100.0);
    EXPECT_DOUBLE_EQ(f->derived_ms, 16000.0);
    EXPECT_DOUBLE_EQ(f->derived_tok_s, 4.0);  // 64 tokens in 16 s
    EXPECT_DOUBLE_EQ(f->derived_disk_wait_ms, 4000.0);
    EXPECT_FALSE(bgh::derive_layers(64, 0.0, 0, 0, 0, 5, 40));
    EXPECT_FALSE(bgh::derive_layers(64, 10.0, 0, 0, 0, 0, 40));

    auto pass = [](int p, const char* state, double ms, double disk) {
        return json{{"pass", p}, {"state", state}, {"runs", 1},
                    {"metrics", {{"prefill_tok_s", {{"median", 64000.0 / ms}}}, {"prefill_ms", {{"median", ms}}},
                                 {"prompt_tokens", {{"median", 64}}}, {"experts.disk_bytes", {{"median", disk}}},
                                 {"pcie_bytes", {{"median", 2e9}}}, {"disk_wait_ms", {{"median", 50.0}}}}}};
    };
    json r = {{"format", bgh::kResultFormat},
              {"status", "complete"},
              {"scenario", {{"name", "seed-4a-4b"}, {"profile", "slice"}, {"mode", "run"}, {"passes", 2},
                            {"repetitions", 1}, {"pass_labels", {"4a", "4b"}}, {"derive_layers", 40},
                            {"hardware", {{"vram_budget_mib", 2048}, {"host_budget_mib", 2048}}},
                            {"published", {{"passes", {{{"prefill_tok_s", 6.83}}, {{"prefill_tok_s", 61.8}}}}}}}},
              {"configurations", {{{"name", "all three"}, {"change_flags", json::array()},
                                   {"changes", {{"partition", true}, {"layer_major", true}, {"promotion", true},
                                                {"partition_rule", "resident-only"}}},
                                   {"summary", {{"passes", {pass(1, "cold", 1000.0, 5e9), pass(2, "warm", 100.0, 0.0)}}}},
                                   {"runs", {{{"metrics", {{"model", {{"n_layer", 5}}}}}}}}}}},
              {"machine", json::object()}};
    const std::string md = bgh::render_markdown(r, "");
    EXPECT_NE(md.find("Partition rule: **resident-only** (the seed's)"), std::string::npos) << md;
    EXPECT_NE(md.find("DERIVED, not measured"), std::string::npos) << md;
    // Cold: 1000 ms over 5 layers = 200 ms a layer; 40 layers 8 s for 64 tokens = 8 tok/s.
    EXPECT_NE(md.find("| 4a | cold | 200.0 ms | 1,000.0 MB | 400.0 MB | 10.0 ms | **8.00 tok/s** (derived) | **400 ms** (derived) | "
                      "6.83 tok/s |"),
              std::string::npos)
        << md;
    EXPECT_NE(md.find("| 4b | warm | 20.0 ms | 0.0 MB | 400.0 MB | 10.0 ms | **80.00 tok/s** (derived)"), std::string::npos) << md;
    EXPECT_EQ(md.find("(seed 6.83"), std::string::npos) << "the 5-layer table itself shows no seed figure";

    r["scenario"].erase("derive_layers");
    EXPECT_EQ(bgh::render_markdown(r, "").find("derived"), std::string::npos);
}

// A run with an SM limit (the rtx3060-proxy scenario: --sm-limit 28 on a larger GPU) gets a
// labelled projection for the RTX 3060 beside its measurements: the GPU kernel time measured on
// the SMs used, the 3060's VRAM (360 GB/s) and PCIe (25 GB/s) floors for the same bytes, and the
// projected range, on the model that ran and derived for 40 layers. Without a limit, none.
TEST(HarnessResults, SmLimitedRunShowsTheRtx3060Projection) {
    const auto x = bgh::project_rtx3060(64, 40.0, 1.8e9, 0.36e9, 2.5e9);
    EXPECT_DOUBLE_EQ(x.vram_bytes, 2.16e9);
    EXPECT_DOUBLE_EQ(x.vram_floor_ms, 6.0);    // 2.16 GB at 360 GB/s
    EXPECT_DOUBLE_EQ(x.pcie_floor_ms, 100.0);  // 2.5 GB at 25 GB/s
    EXPECT_DOUBLE_EQ(x.low_ms, 100.0);         // max(40, 6, 100)
    EXPECT_DOUBLE_EQ(x.high_ms, 140.0);        // max(40, 6) + 100
    EXPECT_TRUE(x.copy_bound());
    EXPECT_FALSE(bgh::project_rtx3060(64, 200.0, 1.8e9, 0.36e9, 2.5e9).copy_bound());

    auto pass = [](int p, const char* state, double gpu_ms, double pcie) {
        return json{{"pass", p}, {"state", state}, {"runs", 1},
                    {"metrics", {{"prefill_tok_s", {{"median", 100.0}}}, {"prefill_ms", {{"median", 640.0}}},
                                 {"prompt_tokens", {{"median", 64}}}, {"gpu_busy_ms", {{"median", gpu_ms}}},
                                 {"experts.consumed_bytes", {{"median", 1.8e9}}}, {"pcie_bytes", {{"median", pcie}}},
                                 {"experts.disk_bytes", {{"median", 0.0}}}, {"disk_wait_ms", {{"median", 0.0}}}}}};
    };
    const json engine = {{"backend", "cuda"},
                         {"device_image_bytes", 3.6e8},
                         {"sm_limit", {{"requested", 28}, {"used", 24}, {"total", 132}, {"min_count", 8}, {"step", 8},
                                       {"partitioned", true},
                                       {"note", "--sm-limit 28: 24 of the GPU's 132 SMs, the largest count <= 28 this GPU "
                                                "can partition (at least 8, in steps of 8)"}}}};
    json r = {{"format", bgh::kResultFormat},
              {"status", "complete"},
              {"scenario", {{"name", "rtx3060-proxy"}, {"profile", "slice"}, {"mode", "run"}, {"passes", 2},
                            {"repetitions", 1}, {"pass_labels", {"4a", "4b"}}, {"derive_layers", 40},
                            {"hardware", {{"vram_budget_mib", 3068}, {"host_budget_mib", 2875}}}}},
              {"configurations", {{{"name", "all three"}, {"change_flags", json::array()},
                                   {"changes", {{"partition", true}, {"layer_major", true}, {"promotion", true},
                                                {"partition_rule", "resident-only"}}},
                                   {"summary", {{"passes", {pass(1, "cold", 60.0, 3.0e9), pass(2, "warm", 40.0, 2.5e9)}}}},
                                   {"runs", {{{"metrics", {{"model", {{"n_layer", 5}}}, {"engine", engine}}}}}}}}},
              {"machine", json::object()}};
    const std::string md = bgh::render_markdown(r, "");
    EXPECT_NE(md.find("### Projection for the RTX 3060 (not a measurement of one)"), std::string::npos) << md;
    EXPECT_NE(md.find("ran on **24 SMs** of the GPU's 132 (`--sm-limit 28`: --sm-limit 28: 24 of the GPU's 132 SMs"),
              std::string::npos)
        << md;
    EXPECT_NE(md.find("VRAM reads at 360 GB/s and PCIe copies at 25 GB/s"), std::string::npos) << md;
    EXPECT_NE(md.find("`engine.device_image_bytes`, 360.0 MB"), std::string::npos) << md;
    EXPECT_NE(md.find("| GPU kernel time (measured, 24 SMs) |"), std::string::npos) << md;
    EXPECT_NE(md.find("**projected 40-layer prefill (PROJECTED)**"), std::string::npos) << md;
    // Warm: VRAM 1.8 + 0.36 GB -> 6 ms; PCIe 2.5 GB -> 100 ms; 100-140 ms on 5 layers, x 8 for 40.
    EXPECT_NE(md.find("| 4b | warm | 40.0 ms | 2,160.0 MB | 6.00 ms | 2,500.0 MB | 100 ms | copy-bound (PCIe floor above the "
                      "GPU side) | 457.14-640.00 tok/s (100 ms to 140 ms) | **57.14-80.00 tok/s (800 ms to 1,120 ms)** |"),
              std::string::npos)
        << md;
    // Cold: PCIe 3 GB -> 120 ms; 120-180 ms.
    EXPECT_NE(md.find("| 4a | cold | 60.0 ms | 2,160.0 MB | 6.00 ms | 3,000.0 MB | 120 ms | copy-bound"), std::string::npos) << md;

    // No limit: no projection.
    r["configurations"][0]["runs"][0]["metrics"]["engine"]["sm_limit"] = {{"requested", 0}, {"used", 132}, {"total", 132}};
    EXPECT_EQ(bgh::render_markdown(r, "").find("Projection for the RTX 3060"), std::string::npos);
    r["configurations"][0]["runs"][0]["metrics"]["engine"].erase("sm_limit");  // results from before the flag
    EXPECT_EQ(bgh::render_markdown(r, "").find("Projection for the RTX 3060"), std::string::npos);
}

namespace {

// A cold run of a split model must find none of its shards cached: the harness evicts and
// measures every file of the model, not only the first shard it was given.
TEST(HarnessPageCache, EveryShardOfASplitModel) {
    const std::string first = bgtest::cached_split_model(bg::parse_scale(bgtest::kTinyScale, "tiny"), 3, 700000);
    const bg::gguf::Reader r = bg::gguf::Reader::open(first);
    const std::vector<std::string> files = bgh::model_files(first);
    ASSERT_GE(files.size(), 3u);
    ASSERT_EQ(files.size(), r.shards().size());
    for (size_t k = 0; k < files.size(); ++k) EXPECT_EQ(files[k], r.shards()[k].path);
    EXPECT_EQ(bgh::evict_page_cache(files), std::nullopt);
    const std::optional<double> pct = bgh::cached_percent(files);
    ASSERT_TRUE(pct.has_value());
    EXPECT_GE(*pct, 0.0);
    EXPECT_LE(*pct, 100.0);
    // An unsplit file, or one this reader refuses, is itself.
    EXPECT_EQ(bgh::model_files(bgtest::tiny_model()), std::vector<std::string>{bgtest::tiny_model()});
    EXPECT_EQ(bgh::model_files("/nonexistent/m.gguf"), std::vector<std::string>{"/nonexistent/m.gguf"});
    const std::optional<std::string> err = bgh::evict_page_cache({files[0], "/nonexistent/m.gguf"});
    ASSERT_TRUE(err.has_value());
    EXPECT_NE(err->find("/nonexistent/m.gguf"), std::string::npos) << *err;
}

}  // namespace
