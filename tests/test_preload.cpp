// --preload (issue 24): every resident expert read into its slot before the first pass, so that
// pass reads no resident expert from disk, with the same tokens as a cold start, and preload
// reports exactly the resident experts' bytes. Tiny model, CPU backend, both io engines.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "model_fixture.h"
#include "runtime/session.h"

namespace {

bg::RunConfig run_cfg(const std::string& io, bool preload) {
    bg::RunConfig c;
    c.model_path = bgtest::tiny_model();
    c.prompt_tokens = 40;
    c.prompt_seed = 9;
    c.gen = 5;
    c.ignore_eos = true;
    c.slots = 8;
    c.hot = 2;
    c.transient_slots = 4;
    c.threads = 2;
    c.ubatch = 16;
    c.passes = 2;
    c.routing = bg::RoutingPolicy::kResidentOnly;  // every routed expert is resident: a preloaded pass reads none
    c.io = bg::parse_enum<bg::io::IoEngine>(io);
    c.verify_slots = true;  // each pass compares every loaded slot with the file
    c.preload = preload;
    return c;
}

TEST(Preload, FirstPassReadsNoResidentExpertAndGivesTheColdTokens) {
    for (const char* io : {"uring", "pread"}) {
        SCOPED_TRACE(io);
        bg::Session cold(run_cfg(io, false));
        const nlohmann::json mc = cold.run(false);
        bg::Session pre(run_cfg(io, true));
        const nlohmann::json mp = pre.run(false);

        // Exactly the resident experts (hot ones included), each layer at its own expert size.
        uint64_t experts = 0, bytes = 0;
        const bg::ResidencyPlan& plan = pre.plan();
        for (int64_t l = 0; l < plan.n_layer(); ++l) {
            std::set<int32_t> homes(plan.resident[l].begin(), plan.resident[l].end());
            homes.insert(plan.hot_ids[l].begin(), plan.hot_ids[l].end());
            experts += homes.size();
            bytes += homes.size() * pre.model().expert_bytes_each(l);
        }
        ASSERT_TRUE(mp.contains("preload"));
        EXPECT_FALSE(mc.contains("preload"));
        EXPECT_EQ(mp["preload"]["experts"].get<uint64_t>(), experts);
        EXPECT_EQ(mp["preload"]["bytes"].get<uint64_t>(), bytes);
        EXPECT_GT(experts, 0u);

        const nlohmann::json& p1 = mp["passes"][0];
        EXPECT_EQ(p1["state"], "preloaded");
        EXPECT_EQ(mc["passes"][0]["state"], "cold");
        EXPECT_EQ(p1["experts"]["disk_bytes"].get<uint64_t>(), 0u);
        EXPECT_GT(mc["passes"][0]["experts"]["disk_bytes"].get<uint64_t>(), 0u) << "the cold pass read nothing: no test";
        EXPECT_EQ(p1["experts"]["consumed_bytes"], mc["passes"][0]["experts"]["consumed_bytes"]);
        EXPECT_EQ(p1["verified_slots"].get<uint64_t>(), experts) << "every resident slot filled and equal to the file";
        EXPECT_EQ(mp["passes"][1]["state"], "warm");
        EXPECT_EQ(pre.generated(), cold.generated());
        EXPECT_EQ(pre.generated().size(), 5u);
    }
}

}  // namespace
