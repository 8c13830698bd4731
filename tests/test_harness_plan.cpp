// `betelgeuse plan`: what it prints is what a run allocates, and the published PC's scenarios
// fit their budgets (checked from the full scale, without the 500 GB file).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/harness_fixture.h"
#include "model/scale.h"
#include "model_fixture.h"
#include "runtime/memory_plan.h"
#include "runtime/session.h"
#include "scenario.h"

namespace {

// The plan from the scale alone (no file) equals, item by item, what a CPU run of a model made
// from that scale allocated (the Session checks its live allocations against the same plan).
TEST(MemoryPlan, RunAllocatesExactlyWhatThePlanFromTheScalePrinted) {
    bg::RunConfig c;
    c.model_path = bgtest::ci_model();
    c.prompt_tokens = 64;
    c.gen = 4;
    c.routing = bg::RoutingPolicy::kResidentOnly;
    c.transient_slots = 24;
    c.lru_slots = 7;
    c.host_budget_mib = 1024;
    c.vram_budget_mib = 256;
    bg::Session s(c);
    const bg::ModelScale scale = bg::load_scale(bgtest::source_path("scenarios/models/ci.json"));
    const bg::MemoryPlan want = bg::plan_memory(bg::shape_of(scale), c, false, 64, s.plan().slots, s.plan().hot);
    const bg::MemoryPlan& got = s.memory();
    ASSERT_EQ(want.items.size(), got.items.size());
    for (size_t i = 0; i < want.items.size(); ++i) {
        EXPECT_EQ(want.items[i].what, got.items[i].what);
        EXPECT_EQ(want.items[i].bytes, got.items[i].bytes) << want.items[i].what;
    }
    // And the live objects hold those bytes.
    EXPECT_EQ(got.total(bg::MemoryTier::kVram), s.store().device_bytes() + s.engram().buffer_bytes());
    EXPECT_EQ(got.total(bg::MemoryTier::kHost),
              s.model().dense_bytes() + s.forward().buffer_bytes() + s.store().host_bytes() + s.engram().host_bytes() +
                  s.store().timeline_bytes() + s.engram().timeline().bytes());
    // The metrics carry the plan.
    const nlohmann::json m = s.run(false);
    EXPECT_EQ(m["memory"]["host_bytes"].get<uint64_t>(), got.total(bg::MemoryTier::kHost));
}

int run_command(const std::string& cmd, std::string* out) {
    FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
    char buf[4096];
    size_t n;
    while (f && (n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    const int st = f ? ::pclose(f) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Every scenario of the published PC, of the slice (the PC's budgets per layer) and of the device
// scale (the PC's budgets scaled), with the flags the harness gives the engine, fits: VRAM within
// its budget (the seed peaked at 11,396 MiB of 12 GiB), the host within its budget and within the
// cgroup with room for page cache, io buffers and the heap.
TEST(MemoryPlan, EveryScenarioFits) {
    int checked = 0;
    for (const char* profile : {"scenarios/rtx3060", "scenarios/slice", "scenarios/device"})
    for (const auto& e : std::filesystem::directory_iterator(bgtest::source_path(profile))) {
        if (e.path().extension() != ".json") continue;
        const bgh::Scenario sc = bgh::load_scenario(e.path().string());
        for (const bgh::Changes& c : sc.configurations()) {
            std::vector<std::string> args = bgh::engine_args(sc, c, "/dev/null");
            ASSERT_EQ(args[0], "run");
            ASSERT_EQ(args[1], "--model");
            std::string cmd = bghtest::engine_bin() + " plan --json --scale '" + sc.model_scale_path + "' --cgroup-memory " +
                              std::to_string(sc.cgroup_memory_mib);
            for (size_t i = 3; i < args.size(); ++i) {
                if (args[i] == "--metrics-json") { ++i; continue; }
                cmd += " '" + args[i] + "'";
            }
            std::string out;
            const int rc = run_command(cmd, &out);
            EXPECT_EQ(rc, 0) << e.path().filename() << ": " << out;
            if (rc != 0) continue;
            const nlohmann::json p = nlohmann::json::parse(out.substr(out.find('{')));
            EXPECT_TRUE(p["fits"].get<bool>());
            EXPECT_LE(p["vram_bytes"].get<uint64_t>(), static_cast<uint64_t>(sc.vram_budget_mib) << 20);
            if (std::string(profile) == "scenarios/rtx3060") {
                EXPECT_LE(p["vram_bytes"].get<uint64_t>(), 12288ull << 20);
            }
            ++checked;
        }
    }
    EXPECT_GE(checked, 10);
}

// A budget that cannot hold the plan: a clear one-line failure naming what would fit.
TEST(MemoryPlan, TooSmallABudgetNamesWhatWouldFit) {
    std::string out;
    const int rc = run_command(bghtest::engine_bin() + " plan --scale '" + bgtest::source_path("scenarios/models/full.json") +
                                   "' --vram-budget 11000 --host-budget 12288 --slots 20 --hot 5 --transient-slots 12",
                               &out);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("does not fit"), std::string::npos) << out;
    // A hot slot is 40 layers x 17.9 MiB = 717 MiB of VRAM: hot 3 is the most that 11,000 MiB
    // holds beside the rest; each expert leaving VRAM needs a host slot, and 12 GiB holds 15
    // per layer beside the rest, so S = 18.
    EXPECT_NE(out.find("it would fit --slots 18 --hot 3"), std::string::npos) << out;
}

// Without --slots and --hot the plan takes the run's defaults (the seed's 20 and 5 on the real
// model), not an unset value.
TEST(MemoryPlan, DefaultSlotsFollowTheModel) {
    std::string out;
    const int rc = run_command(bghtest::engine_bin() + " plan --json --scale '" +
                                   bgtest::source_path("scenarios/models/full.json") + "' --transient-slots 12",
                               &out);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("hot expert slots (40 layers x 5 x 17.9 MiB)"), std::string::npos) << out;
    EXPECT_NE(out.find("host expert slots (40 layers x 15 x 17.9 MiB)"), std::string::npos) << out;
}

}  // namespace
