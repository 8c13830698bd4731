// Defaults that work on any model: without --slots and --hot, S and H follow the model's
// experts per layer (S = min(20, experts), H = round(S x 5/20)), so `betelgeuse run --model M`
// with no other flag runs on a model with fewer than 20 experts per layer and says how it chose.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "model_fixture.h"
#include "runtime/run_config.h"

namespace {

struct Resolved {
    int64_t slots, hot;
};

Resolved resolved(int64_t n_expert, int64_t n_expert_used, int64_t slots = bg::RunConfig::kFromModel,
                  int64_t hot = bg::RunConfig::kFromModel) {
    bg::RunConfig c;
    c.slots = slots;
    c.hot = hot;
    c.resolve_residency_defaults(n_expert, n_expert_used);
    return {c.slots, c.hot};
}

TEST(RunDefaults, SlotsAndHotFollowTheModel) {
    EXPECT_EQ(resolved(384, 6).slots, 20);  // the seed's values for the real model
    EXPECT_EQ(resolved(384, 6).hot, 5);
    EXPECT_EQ(resolved(20, 6).slots, 20);
    EXPECT_EQ(resolved(12, 6).slots, 12);   // fewer than 20 experts: all of them resident
    EXPECT_EQ(resolved(12, 6).hot, 3);
    EXPECT_EQ(resolved(6, 2).hot, 2);       // 1.5 rounds up
    EXPECT_EQ(resolved(2, 1).hot, 1);
    EXPECT_EQ(resolved(1, 1).slots, 1);
    EXPECT_EQ(resolved(1, 1).hot, 1);       // at least one VRAM slot per layer
    EXPECT_EQ(resolved(64, 24).slots, 24);  // a token's experts must fit among the resident ones
    EXPECT_EQ(resolved(64, 24).hot, 6);
}

TEST(RunDefaults, GivenValuesAreKept) {
    EXPECT_EQ(resolved(384, 6, 8).slots, 8);
    EXPECT_EQ(resolved(384, 6, 8).hot, 2);  // H scaled from the given S
    EXPECT_EQ(resolved(384, 6, bg::RunConfig::kFromModel, 0).hot, 0);
    EXPECT_EQ(resolved(384, 6, 30, 7).slots, 30);
    EXPECT_EQ(resolved(384, 6, 30, 7).hot, 7);
    bg::RunConfig c;
    c.slots = 30;
    c.hot = 7;
    c.resolve_residency_defaults(384, 6);
    EXPECT_EQ(c.residency_defaults, "");
}

TEST(RunDefaults, StartUpPrintSaysHowTheyWereChosen) {
    bg::RunConfig c;
    c.resolve_residency_defaults(12, 6);
    const std::string d = c.describe();
    EXPECT_NE(d.find("S = min(20, 12 experts per layer) = 12"), std::string::npos) << d;
    EXPECT_NE(d.find("H = round(S x 5/20) = 3"), std::string::npos) << d;
}

// A tiny model with 12 experts per layer (top-6), fewer than the seed's S = 20.
std::string twelve_expert_model() {
    nlohmann::json j = nlohmann::json::parse(bgtest::kTinyScale);
    j["name"] = "tiny-12-experts";
    j["n_expert"] = 12;
    return bgtest::cached_model(bg::parse_scale(j.dump(), "tiny-12-experts"), 5);
}

TEST(RunDefaults, RunWithOnlyAModelRunsOnFewerThan20Experts) {
    const bgtest::Exit r = bgtest::run_cli({"run", "--model", twelve_expert_model()});
    ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
    EXPECT_NE(r.err.find("S = min(20, 12 experts per layer) = 12"), std::string::npos) << r.err;
}

}  // namespace
