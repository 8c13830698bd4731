// Scenario files: every mistake is reported with its key path and the reason, the shipped
// scenarios validate, and the three changes map onto the engine flags the documentation states.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "harness/harness_fixture.h"
#include "runtime/decode_split.h"
#include "scenario.h"

using bghtest::TempDir;
using nlohmann::json;

namespace {

json valid() {
    return {{"profile", "test"},
            {"model", {{"path", "m.gguf"}, {"scale", "scale.json"}}},
            {"hardware", {{"vram_budget_mib", 64}, {"host_budget_mib", 256}, {"cgroup_memory_mib", 512}}},
            {"changes", {{"partition", true}, {"layer_major", false}, {"promotion", true}}},
            {"prompt", {{"tokens", 64}, {"seed", 3}}},
            {"passes", 2},
            {"decode_tokens", 8}};
}

struct Fixture : ::testing::Test {
    TempDir dir;
    void SetUp() override { bghtest::write_text(dir / "scale.json", "{}"); }
    bgh::Scenario parse(const json& j) { return bgh::parse_scenario(j.dump(), dir / "s.json"); }
    // The problems a scenario has, each without the file name in front.
    std::vector<std::string> problems(const json& j) {
        try {
            parse(j);
        } catch (const bgh::ScenarioError& e) {
            std::vector<std::string> out;
            for (const auto& p : e.problems) out.push_back(p.substr(p.find(": ") + 2));
            return out;
        }
        return {};
    }
    json with(json j, const json& patch) {
        j.merge_patch(patch);
        return j;
    }
};

bool has(const std::vector<std::string>& v, const std::string& text) {
    for (const auto& s : v)
        if (s.find(text) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_F(Fixture, ValidScenarioParsesWithDefaults) {
    const bgh::Scenario s = parse(valid());
    EXPECT_EQ(s.name, "s");
    EXPECT_EQ(s.profile, "test");
    EXPECT_EQ(s.mode, "run");
    EXPECT_EQ(s.model_path, dir / "m.gguf") << "relative paths are anchored at the scenario's folder";
    EXPECT_EQ(s.model_scale_path, dir / "scale.json");
    EXPECT_EQ(s.prompt_tokens, 64);
    EXPECT_EQ(s.prompt_seed, 3u);
    EXPECT_EQ(s.repetitions, 1);
    EXPECT_EQ(s.engine.slots, 20);
    EXPECT_EQ(s.engine.hot, 5);
    EXPECT_FALSE(s.swap);
    EXPECT_TRUE(s.baseline_reference);
    EXPECT_DOUBLE_EQ(s.speed_ratio_tolerance, 0.25);
    ASSERT_EQ(s.configurations().size(), 2u);
    EXPECT_EQ(bgh::changes_name(s.configurations()[0]), "without layer-major");
    EXPECT_EQ(bgh::changes_name(s.configurations()[1]), "baseline");
}

TEST_F(Fixture, UnknownKeysAreRejectedWithTheirPath) {
    auto p = problems(with(valid(), {{"pases", 3}}));
    EXPECT_TRUE(has(p, "pases: unknown key")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"hardware", {{"vram_budget", 1}}}}));
    EXPECT_TRUE(has(p, "hardware.vram_budget: unknown key")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"engine", {{"slot", 1}}}}));
    EXPECT_TRUE(has(p, "engine.slot: unknown key")) << ::testing::PrintToString(p);
    json pub = valid();
    pub["published"] = {{"passes", json::array({json{{"prefill_tok_s", 1}, {"speed", 2}}})}};
    p = problems(pub);
    EXPECT_TRUE(has(p, "published.passes[0].speed: unknown key")) << ::testing::PrintToString(p);
}

TEST_F(Fixture, BadValuesNameTheKeyAndTheReason) {
    auto p = problems(with(valid(), {{"passes", 0}}));
    EXPECT_TRUE(has(p, "passes: must be between 1 and 1000, got 0")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"passes", "two"}}));
    EXPECT_TRUE(has(p, "passes: must be an integer, got \"two\"")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"hardware", {{"cgroup_memory_mib", -5}}}}));
    EXPECT_TRUE(has(p, "hardware.cgroup_memory_mib: must be between")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"changes", {{"partition", "yes"}}}}));
    EXPECT_TRUE(has(p, "changes.partition: must be true or false")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"engine", {{"io", "mmap"}}}}));
    EXPECT_TRUE(has(p, "engine.io: must be one of uring, pread")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"engine", {{"read_size", 5000}}}}));
    EXPECT_TRUE(has(p, "engine.read_size: must be a multiple of 4096")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"engine", {{"slots", 4}, {"hot", 5}}}}));
    EXPECT_TRUE(has(p, "engine.hot: must be at most engine.slots (4)")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"profile", "Big Box"}}));
    EXPECT_TRUE(has(p, "profile: must be lower-case")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"mode", "sweep"}}));
    EXPECT_TRUE(has(p, "mode: must be one of run, ablation")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"tolerances", {{"speed_ratio", 1.5}}}}));
    EXPECT_TRUE(has(p, "tolerances.speed_ratio: must be between 0 and 1")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"pass_labels", {"4a"}}}));
    EXPECT_TRUE(has(p, "pass_labels: must be an array of 2 strings")) << ::testing::PrintToString(p);
    json pub = valid();
    pub["published"] = {{"decode_tok_s", {19, 18}}};
    p = problems(pub);
    EXPECT_TRUE(has(p, "published.decode_tok_s: must be a non-negative number or a range")) << ::testing::PrintToString(p);
}

TEST_F(Fixture, MissingAndContradictoryKeys) {
    json j = valid();
    j.erase("hardware");
    auto p = problems(j);
    EXPECT_TRUE(has(p, "hardware: required key is missing")) << ::testing::PrintToString(p);
    j = valid();
    j["hardware"].erase("vram_budget_mib");
    p = problems(j);
    EXPECT_TRUE(has(p, "hardware.vram_budget_mib: required key is missing")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"prompt", {{"text_file", "p.txt"}}}}));
    EXPECT_TRUE(has(p, "prompt: give one of \"tokens\"")) << ::testing::PrintToString(p);
    EXPECT_TRUE(has(p, "prompt.text_file: no prompt file at")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"prompt", {{"tokens", nullptr}, {"seed", nullptr}, {"ids_file", "ids.txt"}}}}));
    EXPECT_TRUE(has(p, "prompt.ids_file: no prompt file at")) << ::testing::PrintToString(p);
    EXPECT_FALSE(has(p, "prompt: give one of")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"prompt", {{"file", "p.txt"}}}}));
    EXPECT_TRUE(has(p, "prompt.file: unknown key")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"model", {{"scale", nullptr}}}}));
    EXPECT_TRUE(has(p, "model.path: no model file at " + dir / "m.gguf" + ", and no model.scale")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"model", {{"scale", "nope.json"}}}}));
    EXPECT_TRUE(has(p, "model.scale: no scale file at")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"mode", "ablation"}}));
    EXPECT_TRUE(has(p, "changes: not used in mode \"ablation\"")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"engine", {{"extra_args", {"--verify-slots", "--ubatch=8", "--routing"}}}}}));
    EXPECT_TRUE(has(p, "engine.extra_args[1]: --ubatch is set by changes.layer_major")) << ::testing::PrintToString(p);
    EXPECT_TRUE(has(p, "engine.extra_args[2]: --routing is set by changes.partition")) << ::testing::PrintToString(p);
    EXPECT_FALSE(has(p, "extra_args[0]"));
}

TEST_F(Fixture, EveryProblemIsReportedAtOnce) {
    json j = valid();
    j["passes"] = -1;
    j["bogus"] = true;
    j["engine"] = {{"queue_depth", 0}};
    const auto p = problems(j);
    EXPECT_EQ(p.size(), 3u) << ::testing::PrintToString(p);
    try {
        parse(j);
        FAIL();
    } catch (const bgh::ScenarioError& e) {
        EXPECT_EQ(std::string(e.what()).find(dir / "s.json" + ": "), 0u) << "each line starts with the file";
    }
}

TEST_F(Fixture, NotJsonOrNotAnObject) {
    EXPECT_THROW(bgh::parse_scenario("{", dir / "s.json"), bgh::ScenarioError);
    EXPECT_THROW(bgh::parse_scenario("[1]", dir / "s.json"), bgh::ScenarioError);
    EXPECT_THROW(bgh::load_scenario(dir / "missing.json"), bgh::ScenarioError);
}

// What fuzz_scenario found (fuzz/crashers/scenario/): hostile text is a clean, one-line-per-problem
// ScenarioError, never a crash, another exception or a silently changed value.
TEST_F(Fixture, HostileTextIsRejectedCleanly) {
    auto reject = [&](const std::string& text) -> std::vector<std::string> {
        try {
            bgh::parse_scenario(text, dir / "s.json");
        } catch (const bgh::ScenarioError& e) {
            for (const auto& p : e.problems) EXPECT_EQ(p.find('\n'), std::string::npos) << p;
            return e.problems;
        } catch (const std::exception& e) {
            ADD_FAILURE() << "not a ScenarioError: " << e.what();
            return {};
        }
        ADD_FAILURE() << "accepted: " << text.substr(0, 80);
        return {};
    };
    auto p = reject(std::string(R"({"description": )") + std::string(100000, '[') + std::string(100000, ']') + "}");
    EXPECT_TRUE(has(p, "nested deeper than 64 levels")) << ::testing::PrintToString(p);
    p = reject(R"({"name": ")" + std::string(200000, 'a') + R"(" , "profile": "A"})");
    EXPECT_TRUE(has(p, "profile: must be lower-case")) << ::testing::PrintToString(p);
    p = reject(R"({"passes": 1e999})");
    EXPECT_TRUE(has(p, "not valid JSON")) << ::testing::PrintToString(p);
    p = reject("{\"profile\": \"x\xff\"}");
    EXPECT_TRUE(has(p, "\\xff")) << "invalid UTF-8 is quoted escaped: " << ::testing::PrintToString(p);

    json j = valid();
    j["a\nb"] = 1;
    p = problems(j);
    EXPECT_TRUE(has(p, R"("a\nb": unknown key)")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"model", {{"seed", 18446744073709551615ull}}}}));
    EXPECT_TRUE(has(p, "model.seed: must be between 0 and 9223372036854775807")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"model", {{"path", std::string("m.gguf\0x", 8)}}}}));
    EXPECT_TRUE(has(p, "model.path: must not contain a NUL character")) << ::testing::PrintToString(p);
    p = problems(with(valid(), {{"profile", std::string(41, 'x') + "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"}}));
    ASSERT_FALSE(p.empty());
    EXPECT_NO_THROW((void)json(p.front()).dump()) << "a value cut to 60 bytes stays valid UTF-8";
}

TEST_F(Fixture, HostBudgetAboveTheCgroupIsAWarning) {
    const bgh::Scenario s = parse(with(valid(), {{"hardware", {{"host_budget_mib", 4096}}}}));
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_NE(s.warnings[0].find("cannot stop an OOM kill"), std::string::npos);
}

TEST_F(Fixture, ChangesMapOntoTheDocumentedEngineFlags) {
    using V = std::vector<std::string>;
    EXPECT_EQ(bgh::change_flags({false, false, false}), (V{"--routing", "exact", "--prefill", "token-major", "--ubatch", "3"}));
    // The seed's partition rule (SPEC §2.1): every one of the k experts among the resident ones.
    EXPECT_EQ(bgh::change_flags({true, true, true}),
              (V{"--routing", "resident-only", "--prefill", "layer-major", "--ubatch", "16", "--promote"}));
    EXPECT_EQ(bgh::change_flags({true, false, false, bgh::PartitionRule::kPinnedTop1}),
              (V{"--routing", "pinned-top1", "--prefill", "token-major", "--ubatch", "3"}));
    const bgh::Scenario s = parse(with(valid(), {{"engine", {{"extra_args", {"--verify-slots"}}}}}));
    const auto a = bgh::engine_args(s, s.changes, "/tmp/m.json");
    std::string line;
    for (const auto& x : a) line += " " + x;
    line += " ";
    for (const char* f : {" --routing resident-only ", " --prefill token-major --ubatch 3 ", " --promote ", " --passes 2 ",
                          " --gen 8 --ignore-eos ", " --prompt-tokens 64 ", " --prompt-seed 3 ", " --host-budget 256 ",
                          " --vram-budget 64 ", " --verify-slots ", " --metrics-json /tmp/m.json "})
        EXPECT_NE(line.find(f), std::string::npos) << f << " in " << line;
}

TEST_F(Fixture, PartitionRuleIsTheSeedsUnlessTheScenarioAsksForPinnedTop1) {
    EXPECT_EQ(parse(valid()).changes.rule, bgh::PartitionRule::kResidentOnly);
    const bgh::Scenario p = parse(with(valid(), {{"changes", {{"partition_rule", "pinned-top1"}}}}));
    EXPECT_EQ(p.changes.rule, bgh::PartitionRule::kPinnedTop1);
    EXPECT_EQ(bgh::changes_name(p.changes), "without layer-major (pinned-top1)");
    const auto a = bgh::engine_args(p, p.changes, "/tmp/m.json");
    EXPECT_NE(std::find(a.begin(), a.end(), "pinned-top1"), a.end());
    EXPECT_EQ(std::find(a.begin(), a.end(), "resident-only"), a.end());

    EXPECT_TRUE(has(problems(with(valid(), {{"changes", {{"partition_rule", "top1"}}}})),
                    "changes.partition_rule: must be one of resident-only, pinned-top1"));
    EXPECT_TRUE(has(problems(with(valid(), {{"changes", {{"partition", false}, {"partition_rule", "pinned-top1"}}}})),
                    "changes.partition_rule: only meaningful with changes.partition true"));
}

// hot-pool (ours, an interpretation of the seed): its own --routing value, name and record.
TEST_F(Fixture, PartitionRuleHotPoolRunsHotPoolRouting) {
    const bgh::Scenario h = parse(with(valid(), {{"changes", {{"partition_rule", "hot-pool"}}}}));
    EXPECT_EQ(h.changes.rule, bgh::PartitionRule::kHotPool);
    EXPECT_EQ(bgh::changes_name(h.changes), "without layer-major (hot-pool)");
    const auto a = bgh::engine_args(h, h.changes, "/tmp/m.json");
    const auto at = std::find(a.begin(), a.end(), "--routing");
    ASSERT_NE(at, a.end());
    EXPECT_EQ(*(at + 1), "hot-pool");
    EXPECT_EQ(bgh::changes_from_json(bgh::changes_to_json(h.changes)), h.changes);
    // The slice decode scenario's sibling differs from it in the rule alone.
    const bgh::Scenario d = bgh::load_scenario(bgtest::source_path("scenarios/slice/decode.json"));
    const bgh::Scenario dh = bgh::load_scenario(bgtest::source_path("scenarios/slice/decode-hot-pool.json"));
    EXPECT_EQ(dh.changes.rule, bgh::PartitionRule::kHotPool);
    bgh::Changes same = dh.changes;
    same.rule = d.changes.rule;
    EXPECT_EQ(same, d.changes);
    std::vector<std::string> da = bgh::engine_args(d, d.changes, "m"), dha = bgh::engine_args(dh, dh.changes, "m");
    ASSERT_EQ(da.size(), dha.size());
    for (size_t i = 0; i < da.size(); ++i) {
        if (da[i] != dha[i]) {
            EXPECT_TRUE(da[i] == "resident-only" && dha[i] == "hot-pool") << da[i] << " vs " << dha[i];
        }
    }
    EXPECT_EQ(dh.decode_tokens, d.decode_tokens);
    EXPECT_EQ(dh.vram_budget_mib, d.vram_budget_mib);
    EXPECT_EQ(dh.host_budget_mib, d.host_budget_mib);
}

TEST_F(Fixture, ChangesRoundTripThroughResultJsonAndOldResultsMeanPinnedTop1) {
    for (const bgh::Changes& c : parse(with(valid(), {{"changes", nullptr}, {"mode", "ablation"}})).configurations())
        EXPECT_EQ(bgh::changes_from_json(bgh::changes_to_json(c)), c) << bgh::changes_name(c);
    // Results written before the rule was recorded ran every partition with pinned-top1.
    const bgh::Changes old = bgh::changes_from_json({{"partition", true}, {"layer_major", true}, {"promotion", true}});
    EXPECT_EQ(old.rule, bgh::PartitionRule::kPinnedTop1);
    EXPECT_EQ(bgh::changes_to_json({true, true, true})["partition_rule"], "resident-only");
    EXPECT_FALSE(bgh::changes_to_json({false, true, true}).contains("partition_rule"));
}

TEST_F(Fixture, AblationIsTheMatrixPlusAllThreeWithPinnedTop1) {
    json j = valid();
    j.erase("changes");
    j["mode"] = "ablation";
    const bgh::Scenario s = parse(j);
    const auto c = s.configurations();
    ASSERT_EQ(c.size(), 9u);
    std::set<std::string> names;
    for (const auto& x : c) names.insert(bgh::changes_name(x));
    EXPECT_EQ(names, (std::set<std::string>{"baseline", "partition only", "layer-major only", "promotion only", "all three",
                                            "without partition", "without layer-major", "without promotion",
                                            "all three (pinned-top1)"}));
    EXPECT_EQ(c[0].count(), 0) << "the baseline runs first";
    for (size_t i = 0; i + 1 < c.size(); ++i) {
        if (c[i].partition) {
            EXPECT_EQ(c[i].rule, bgh::PartitionRule::kResidentOnly) << bgh::changes_name(c[i]);
        }
    }
    EXPECT_EQ(c.back(), (bgh::Changes{true, true, true, bgh::PartitionRule::kPinnedTop1}));
    EXPECT_EQ(bgh::change_flags(c.back())[1], "pinned-top1");
}

TEST_F(Fixture, DeriveLayersIsAPositiveLayerCount) {
    EXPECT_EQ(parse(valid()).derive_layers, 0);
    EXPECT_EQ(parse(with(valid(), {{"derive_layers", 40}})).derive_layers, 40);
    EXPECT_TRUE(has(problems(with(valid(), {{"derive_layers", 0}})), "derive_layers: must be between 1 and 4096"));
    EXPECT_TRUE(has(problems(with(valid(), {{"derive_layers", "40"}})), "derive_layers: must be an integer"));
}

TEST_F(Fixture, SlotsAndHotTakeMax) {
    const bgh::Scenario s = parse(with(valid(), {{"engine", {{"slots", "max"}, {"hot", "max"}}}}));
    EXPECT_EQ(s.engine.slots, bgh::EngineOptions::kMost);
    EXPECT_EQ(s.engine.hot, bgh::EngineOptions::kMost);
    std::string line;
    for (const auto& x : bgh::engine_args(s, s.changes, "m")) line += " " + x;
    EXPECT_NE((line + " ").find(" --slots max --hot max "), std::string::npos) << line;
    const bgh::Scenario h = parse(with(valid(), {{"engine", {{"slots", "max"}, {"hot", 40}}}}));  // H may exceed 20 then
    EXPECT_EQ(h.engine.hot, 40);
    EXPECT_TRUE(has(problems(with(valid(), {{"engine", {{"slots", "most"}}}})), "engine.slots: must be an integer or \"max\""));
    EXPECT_TRUE(has(problems(with(valid(), {{"engine", {{"hot", 2.5}}}})), "engine.hot: must be an integer"));
}

// engine.decode_experts reaches the engine as --decode-experts; other words are refused, and
// extra_args may not set it behind the scenario's back.
TEST_F(Fixture, DecodeExpertsReachTheEngine) {
    for (const char* where : {"gpu", "cpu", "hybrid", "auto"}) {
        const bgh::Scenario s = parse(with(valid(), {{"engine", {{"decode_experts", where}}}}));
        EXPECT_EQ(s.engine.decode_experts, where);
        std::string line;
        for (const auto& x : bgh::engine_args(s, s.changes, "m")) line += " " + x;
        EXPECT_NE((line + " ").find(std::string(" --decode-experts ") + where + " "), std::string::npos) << line;
    }
    const bgh::Scenario d = parse(valid());
    std::string line;
    for (const auto& x : bgh::engine_args(d, d.changes, "m")) line += " " + x;
    EXPECT_EQ(line.find("--decode-experts"), std::string::npos) << "unset: the engine's default";
    EXPECT_TRUE(has(problems(with(valid(), {{"engine", {{"decode_experts", "gpus"}}}})), "engine.decode_experts"));
    EXPECT_TRUE(has(problems(with(valid(), {{"engine", {{"extra_args", {"--decode-experts", "cpu"}}}}})),
                    "engine.decode_experts"));
}

// engine.host_expert_positions reaches the engine as --host-expert-positions, 1 where a scenario
// says nothing (its baselines copy every host expert in prefill, as all results before the
// engine's default became 12 did); out of 1..64 it is refused, and extra_args may not set it.
TEST_F(Fixture, HostExpertPositionsReachTheEngineAndDefaultToOne) {
    const auto line_of = [](const bgh::Scenario& s) {
        std::string line;
        for (const auto& x : bgh::engine_args(s, s.changes, "m")) line += " " + x;
        return line + " ";
    };
    const bgh::Scenario d = parse(valid());
    EXPECT_EQ(d.engine.host_expert_positions, 1);
    EXPECT_NE(line_of(d).find(" --host-expert-positions 1 "), std::string::npos) << line_of(d);
    const bgh::Scenario s = parse(with(valid(), {{"engine", {{"host_expert_positions", 12}}}}));
    EXPECT_NE(line_of(s).find(" --host-expert-positions 12 "), std::string::npos) << line_of(s);
    for (int64_t bad : {int64_t{0}, bg::kMaxHostExpertPositions + 1})
        EXPECT_TRUE(has(problems(with(valid(), {{"engine", {{"host_expert_positions", bad}}}})),
                        "engine.host_expert_positions"));
    EXPECT_TRUE(has(problems(with(valid(), {{"engine", {{"extra_args", {"--host-expert-positions", "4"}}}}})),
                    "engine.host_expert_positions"));
}

// Every scenario file under scenarios/ (beside the models, plans and prompts) loads without a
// problem or a warning, and sits in the folder of its profile.
TEST(HarnessScenarios, EveryScenarioFileLoads) {
    const std::filesystem::path root = std::filesystem::path(BG_SOURCE_DIR) / "scenarios";
    int n = 0;
    for (const auto& d : std::filesystem::directory_iterator(root)) {
        if (!d.is_directory() || d.path().filename() == "models" || d.path().filename() == "prompts") continue;
        for (const auto& f : std::filesystem::directory_iterator(d.path())) {
            if (f.path().extension() != ".json") continue;
            SCOPED_TRACE(f.path().string());
            bgh::Scenario s;
            ASSERT_NO_THROW(s = bgh::load_scenario(f.path().string()));
            EXPECT_EQ(s.profile, d.path().filename().string());
            EXPECT_TRUE(s.warnings.empty());
            ++n;
        }
    }
    EXPECT_GE(n, 30);
}

TEST(HarnessScenarios, EveryShippedScenarioValidates) {
    const std::string root = std::string(BG_SOURCE_DIR) + "/scenarios";
    std::set<std::string> seen;
    for (const char* profile : {"ci", "device", "rtx3060", "slice"}) {
        for (const char* name : {"seed-4a-4b", "seed-500-baseline", "seed-500-optimized", "ablation", "decode"}) {
            const std::string path = root + "/" + profile + "/" + name + ".json";
            SCOPED_TRACE(path);
            bgh::Scenario s;
            ASSERT_NO_THROW(s = bgh::load_scenario(path));
            EXPECT_EQ(s.profile, profile);
            EXPECT_EQ(s.name, name);
            // Our own text, 64 or 500 tokens under the DeepSeek tokenizer (bos included).
            const bool long_prompt = std::string(name).find("500") != std::string::npos || std::string(name) == "ablation";
            EXPECT_EQ(s.prompt_text_file, root + "/prompts/" + (long_prompt ? "500" : "64") + "-tokens.txt");
            EXPECT_EQ(s.prompt_tokens, 0);
            EXPECT_EQ(s.engine.slots, 20);
            EXPECT_EQ(s.engine.hot, 5);
            EXPECT_FALSE(s.swap);
            EXPECT_TRUE(s.warnings.empty());
        }
    }
    // The residency study asks what the resident set holds, which only a rule that may leave it
    // (pinned-top1) can show: with resident-only a warm pass reads nothing from disk by construction.
    for (const char* name : {"bias-plan", "lru-2000", "profiled-other-prompt", "profiled-same-prompt"}) {
        const bgh::Scenario s = bgh::load_scenario(root + "/ci/residency-4b-" + name + ".json");
        EXPECT_TRUE(s.changes.partition) << name;
        EXPECT_EQ(s.changes.rule, bgh::PartitionRule::kPinnedTop1) << name;
    }
    // The seed's figures beside ours, for the profiles that stand for the published PC.
    const bgh::Scenario r = bgh::load_scenario(root + "/rtx3060/seed-4a-4b.json");
    ASSERT_TRUE(r.published);
    EXPECT_DOUBLE_EQ(r.published->passes[0].prefill_tok_s->low, 6.83);
    EXPECT_DOUBLE_EQ(r.published->passes[1].prefill_tok_s->low, 61.80);
    EXPECT_EQ(r.vram_budget_mib, 12288);
    EXPECT_EQ(r.cgroup_memory_mib, 12288);
}
