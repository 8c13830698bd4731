// The store's residency policy as bookkeeping alone (runtime/expert_homes.h): homes from the
// plan, promotion as a pure function of the pass's usage (ties by id), LRU slots taken least
// recently used first and never from the layer that holds them, and `loaded` moving with each
// expert when promotion swaps homes.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/expert_homes.h"

namespace {

using bg::ExpertHomes;
using bg::Tier;

// Two layers of 10 experts; resident {1, 3, 5, 7}, the first two hot.
bg::ResidencyPlan plan() {
    bg::ResidencyPlan p;
    p.slots = 4;
    p.hot = 2;
    for (int l = 0; l < 2; ++l) {
        p.resident.push_back({1, 3, 5, 7});
        p.hot_ids.push_back({1, 3});
        std::vector<uint8_t> m(10, 0);
        for (int e : {1, 3, 5, 7}) m[e] = 1;
        p.mask.push_back(m);
    }
    return p;
}

TEST(ExpertHomes, HomesFollowThePlan) {
    const ExpertHomes h(plan(), 10, 0);
    EXPECT_EQ(h.at(0, 1).tier, Tier::kHot);
    EXPECT_EQ(h.at(0, 3).tier, Tier::kHot);
    EXPECT_EQ(h.at(0, 5).tier, Tier::kHost);
    EXPECT_EQ(h.at(0, 7).tier, Tier::kHost);
    EXPECT_EQ(h.at(0, 0).tier, Tier::kNone);
    EXPECT_FALSE(h.at(0, 5).loaded);
    EXPECT_EQ(h.hot_experts(1), (std::vector<int32_t>{1, 3}));
    EXPECT_EQ(h.host_owners(0), (std::vector<int32_t>{5, 7}));
}

TEST(ExpertHomes, PromotionIsAPureFunctionOfUsage) {
    ExpertHomes h(plan(), 10, 0);
    h.begin_pass();
    // Layer 0: 7 most used, then 5 and 1 tied (ties by id: 1), 3 least.
    h.add_usage(0, 7, 9);
    h.add_usage(0, 5, 4);
    h.add_usage(0, 1, 4);
    h.add_usage(0, 3, 1);
    h.add_usage(0, 0, 100);  // not resident: never counted
    h.at(0, 7).loaded = true;
    const std::vector<ExpertHomes::Swap> sw = h.promotion(0, plan().resident[0]);
    ASSERT_EQ(sw.size(), 1u);
    EXPECT_EQ(sw[0].leaving, 3);
    EXPECT_EQ(sw[0].entering, 7);
    EXPECT_EQ(h.promotion(0, plan().resident[0]).size(), 1u) << "asking again changes nothing";
    EXPECT_TRUE(h.promotion(1, plan().resident[1]).empty()) << "no usage: 1 and 3 stay (ties by id)";
    h.apply(0, sw[0]);
    EXPECT_EQ(h.hot_experts(0), (std::vector<int32_t>{1, 7}));
    EXPECT_EQ(h.at(0, 7).tier, Tier::kHot);
    EXPECT_EQ(h.at(0, 3).tier, Tier::kHost);
    EXPECT_TRUE(h.at(0, 7).loaded) << "loaded moves with the expert";
    EXPECT_FALSE(h.at(0, 3).loaded);
    EXPECT_EQ(h.host_owners(0)[static_cast<size_t>(h.at(0, 3).slot)], 3);
    h.begin_pass();
    EXPECT_TRUE(h.promotion(0, plan().resident[0]).size() <= 2u);
}

TEST(ExpertHomes, LruTakesTheLeastRecentlyUsedSlotNotHeldByTheLayer) {
    ExpertHomes h(plan(), 10, 2);
    const int32_t a[] = {0, 2};
    uint64_t st = h.begin_lru_layer(0, a, 2);
    EXPECT_TRUE(h.take_lru(0, 0, st));
    EXPECT_TRUE(h.take_lru(0, 2, st));
    EXPECT_EQ(h.at(0, 0).tier, Tier::kLru);
    // Same layer again, a third non-resident expert: both slots are this layer's now.
    const int32_t b[] = {0, 2, 4};
    st = h.begin_lru_layer(0, b, 3);
    EXPECT_FALSE(h.take_lru(0, 4, st));
    EXPECT_EQ(h.at(0, 4).tier, Tier::kNone);
    // Layer 1 uses expert 6 only: it evicts the least recently used of layer 0's two (stamps
    // equal: the first slot).
    const int32_t c[] = {6};
    st = h.begin_lru_layer(1, c, 1);
    EXPECT_TRUE(h.take_lru(1, 6, st));
    EXPECT_EQ(h.at(1, 6).tier, Tier::kLru);
    EXPECT_EQ((h.at(0, 0).tier == Tier::kNone) + (h.at(0, 2).tier == Tier::kNone), 1) << "one of layer 0's evicted";
    EXPECT_EQ(h.count_read(1, 6), 1);
    EXPECT_EQ(h.count_read(1, 6), 2);
    h.begin_pass();
    EXPECT_EQ(h.count_read(1, 6), 1);
}

}  // namespace
