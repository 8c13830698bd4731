// compare: the committed ci baseline against itself passes; a planted regression (the same run
// with every disk read doubled) fails; so does a slower engine, while a slower machine does not.
#include <gtest/gtest.h>

#include "compare.h"
#include "harness/harness_fixture.h"
#include "results.h"

using bghtest::TempDir;
using nlohmann::json;

namespace {

json baseline() { return bghtest::read_json(std::string(BG_SOURCE_DIR) + "/results/ci/baseline.json"); }

// Every engine metric of every run of every configuration, through `f`, then the summaries
// recomputed, as if the engine itself had measured the changed values.
template <class F>
json edited(json r, F f) {
    for (auto& c : r["configurations"]) {
        for (auto& run : c["runs"]) {
            if (!run.contains("metrics")) continue;
            for (auto& p : run["metrics"]["passes"]) f(c["name"].get<std::string>(), p);
            f(c["name"].get<std::string>(), run["metrics"]["decode"]);
        }
        bgh::summarize_configuration(c);
    }
    return r;
}

}  // namespace

TEST(HarnessCompare, CommittedBaselineIsARealCompleteCiRun) {
    const json b = baseline();
    ASSERT_TRUE(bgh::is_result(b));
    EXPECT_EQ(b["status"], "complete");
    EXPECT_EQ(b["scenario"]["profile"], "ci");
    EXPECT_EQ(b["scenario"]["name"], "seed-4a-4b");
    EXPECT_TRUE(b["configurations"][0]["counters_stable"].get<bool>());
    EXPECT_NE(bgh::find_configuration(b, "baseline"), nullptr) << "speeds need the same-run baseline";
}

TEST(HarnessCompare, IdenticalResultsPass) {
    const auto o = bgh::compare_results(baseline(), baseline());
    EXPECT_EQ(o.exit_code(), 0) << o.table();
    EXPECT_GT(o.identical_counters, 50u);
    EXPECT_NE(o.table().find("RESULT: no regression"), std::string::npos);
}

TEST(HarnessCompare, DoubledDiskReadsAreARegression) {
    const json planted = edited(baseline(), [](const std::string&, json& m) {
        m["experts"]["disk_bytes"] = m["experts"]["disk_bytes"].get<uint64_t>() * 2;
        m["experts"]["disk_read_bytes"] = m["experts"]["disk_read_bytes"].get<uint64_t>() * 2;
    });
    const auto o = bgh::compare_results(baseline(), planted);
    EXPECT_EQ(o.exit_code(), 1) << o.table();
    EXPECT_NE(o.table().find("pass 1 experts.disk_bytes"), std::string::npos);
    EXPECT_NE(o.table().find("+100.0 %"), std::string::npos) << o.table();
    EXPECT_NE(o.table().find("REGRESSION"), std::string::npos);

    // The same through the command line, as CI runs it.
    TempDir dir;
    bghtest::write_text(dir / "planted.json", planted.dump());
    const auto e = bghtest::exec({bghtest::harness_bin(), "compare", std::string(BG_SOURCE_DIR) + "/results/ci/baseline.json",
                                  dir / "planted.json"});
    EXPECT_EQ(e.code, 1) << e.out;
    EXPECT_NE(e.out.find("REGRESSION"), std::string::npos) << e.out;
}

TEST(HarnessCompare, FewerFetchesOrOtherTokensAreMismatchesToo) {
    const json changed = edited(baseline(), [](const std::string&, json& m) {
        if (m.contains("tokens")) m["tokens"] = m["tokens"].get<int>() + 1;
        m["experts"]["host_hits"] = m["experts"]["host_hits"].get<uint64_t>() / 2;
    });
    const auto o = bgh::compare_results(baseline(), changed);
    EXPECT_EQ(o.exit_code(), 1) << o.table();
    EXPECT_NE(o.table().find("MISMATCH"), std::string::npos) << o.table();
}

TEST(HarnessCompare, SpeedsCountOnlyAsRatiosToTheSameRunBaseline) {
    // A machine half as fast: every configuration slows alike; not a regression.
    const json slow_machine = edited(baseline(), [](const std::string&, json& m) {
        for (const char* k : {"prefill_tok_s", "decode_tok_s"})
            if (m.contains(k)) m[k] = m[k].get<double>() / 2;
    });
    auto o = bgh::compare_results(baseline(), slow_machine);
    EXPECT_EQ(o.exit_code(), 0) << o.table();

    // An engine whose optimised path got 3x slower while the baseline did not: a regression.
    const json slow_engine = edited(baseline(), [](const std::string& config, json& m) {
        if (config != "baseline" && m.contains("prefill_tok_s")) m["prefill_tok_s"] = m["prefill_tok_s"].get<double>() / 3;
    });
    o = bgh::compare_results(baseline(), slow_engine);
    EXPECT_EQ(o.exit_code(), 1) << o.table();
    EXPECT_NE(o.table().find("SLOWER"), std::string::npos);
    // Within a looser tolerance it passes.
    EXPECT_EQ(bgh::compare_results(baseline(), slow_engine, 0.9).exit_code(), 0);
    // A sanitizer build's timings are shown, not judged; its counters still are.
    o = bgh::compare_results(baseline(), slow_engine, std::nullopt, false);
    EXPECT_EQ(o.exit_code(), 0) << o.table();
    EXPECT_NE(o.table().find("not judged"), std::string::npos);
    const json planted = edited(slow_engine, [](const std::string&, json& m) {
        m["experts"]["disk_bytes"] = m["experts"]["disk_bytes"].get<uint64_t>() * 2;
    });
    EXPECT_EQ(bgh::compare_results(baseline(), planted, std::nullopt, false).exit_code(), 1);
}

TEST(HarnessCompare, DifferentScenariosOrIncompleteRunsDoNotPass) {
    json other = baseline();
    other["scenario"]["name"] = "decode";
    EXPECT_EQ(bgh::compare_results(baseline(), other).exit_code(), 2);
    json partial = baseline();
    partial["status"] = "interrupted";
    EXPECT_EQ(bgh::compare_results(baseline(), partial).exit_code(), 1);
    EXPECT_EQ(bgh::compare_results(baseline(), json::object()).exit_code(), 2);
}
