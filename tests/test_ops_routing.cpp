// The hot-pool routing policy (cpu/routing.h) against a straightforward reading of its
// definition, on random scores, resident sets and hot sets (ties included), and the properties
// that make it a pure function of (scores, resident set, hot set).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/ops.h"
#include "cpu/routing.h"

namespace {

using bg::RoutingPolicy;

struct Inputs {
    int64_t ne = 0;
    int k = 0;
    std::vector<float> logits, bias;
    std::vector<uint8_t> resident, hot;
    bg::RouteWeighting wt;
};

struct Routed {
    std::vector<int32_t> ids;
    std::vector<float> weights;
};

// bg::route with scratch and order arrays filled with garbage first (a pure function ignores it).
Routed route(RoutingPolicy policy, const Inputs& in, std::mt19937_64& rng) {
    Routed r{std::vector<int32_t>(in.k), std::vector<float>(in.k)};
    std::vector<float> scratch(static_cast<size_t>(2 * in.ne));
    std::vector<int32_t> order(static_cast<size_t>(in.ne));
    for (float& x : scratch) x = std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng);
    for (int32_t& x : order) x = static_cast<int32_t>(rng() % 1000);
    bg::route(policy, in.logits.data(), in.bias.data(), in.resident.data(), in.hot.data(), in.ne, in.k, in.wt, r.ids.data(),
              r.weights.data(), scratch.data(), order.data());
    return r;
}

float p_of(float logit) { return std::sqrt(bg::cpu::softplus(logit)); }

// The definition, read plainly: experts sorted by p + bias (descending, lower id first on ties);
// rank 1 the first resident one; then the hot ones other than it, in that order, up to k in all;
// then the resident ones not chosen yet, in that order, up to k.
std::vector<int32_t> reference_ids(const Inputs& in) {
    std::vector<int32_t> sorted(static_cast<size_t>(in.ne));
    std::iota(sorted.begin(), sorted.end(), 0);
    auto key = [&](int32_t e) { return p_of(in.logits[e]) + in.bias[e]; };
    std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return key(a) != key(b) ? key(a) > key(b) : a < b; });
    std::vector<int32_t> chosen;
    auto is_chosen = [&](int32_t e) { return std::find(chosen.begin(), chosen.end(), e) != chosen.end(); };
    for (int32_t e : sorted)
        if (in.resident[e]) {
            chosen.push_back(e);
            break;
        }
    for (int32_t e : sorted)
        if (static_cast<int>(chosen.size()) < in.k && in.hot[e] && !is_chosen(e)) chosen.push_back(e);
    for (int32_t e : sorted)
        if (static_cast<int>(chosen.size()) < in.k && in.resident[e] && !is_chosen(e)) chosen.push_back(e);
    return chosen;
}

// Random inputs: n_expert, k, S resident and H of them hot (each random unless given); logits on
// a coarse grid some of the time, so that equal keys (and the lower-id rule) occur.
Inputs random_inputs(std::mt19937_64& rng, int64_t s_override = -1, int64_t h_override = -1, int k_override = -1) {
    Inputs in;
    in.k = k_override > 0 ? k_override : std::uniform_int_distribution<int>(1, 8)(rng);
    in.ne = std::uniform_int_distribution<int64_t>(std::max<int64_t>(in.k, s_override), 400)(rng);
    const int64_t s = s_override >= 0 ? s_override : std::uniform_int_distribution<int64_t>(in.k, in.ne)(rng);
    const int64_t h = h_override >= 0 ? h_override : std::uniform_int_distribution<int64_t>(0, s)(rng);
    const bool ties = rng() % 3 == 0;
    std::normal_distribution<float> nd(0.0f, 2.0f), bd(0.0f, 0.1f);
    for (int64_t e = 0; e < in.ne; ++e) {
        float x = nd(rng);
        if (ties) x = std::round(x * 2.0f) / 2.0f;
        in.logits.push_back(x);
        in.bias.push_back(ties ? 0.0f : bd(rng));
    }
    std::vector<int32_t> perm(static_cast<size_t>(in.ne));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    in.resident.assign(static_cast<size_t>(in.ne), 0);
    in.hot.assign(static_cast<size_t>(in.ne), 0);
    for (int64_t i = 0; i < s; ++i) in.resident[perm[i]] = 1;
    std::shuffle(perm.begin(), perm.begin() + s, rng);  // the hot ones: any H of the resident ones
    for (int64_t i = 0; i < h; ++i) in.hot[perm[i]] = 1;
    in.wt = bg::RouteWeighting{rng() % 4 != 0, rng() % 2 ? 1.0f : 2.5f};
    return in;
}

TEST(HotPoolRouting, MatchesItsDefinitionOnRandomInputs) {
    std::mt19937_64 rng(20261203);
    for (int trial = 0; trial < 3000; ++trial) {
        const Inputs in = random_inputs(rng);
        SCOPED_TRACE(::testing::Message() << "trial " << trial << ": n_expert " << in.ne << ", k " << in.k);
        const Routed got = route(RoutingPolicy::kHotPool, in, rng);
        const std::vector<int32_t> want = reference_ids(in);
        ASSERT_EQ(got.ids, want);
        double sum = 0;
        for (int32_t e : want) sum += p_of(in.logits[e]);
        const double f = in.wt.norm ? in.wt.scale / std::max(sum, 6.1035e-5) : in.wt.scale;
        for (int j = 0; j < in.k; ++j)
            ASSERT_NEAR(got.weights[j], p_of(in.logits[want[j]]) * f, 2e-6 * std::max(1.0, p_of(in.logits[want[j]]) * f));
    }
}

TEST(HotPoolRouting, IsAPureFunctionOfScoresResidentSetAndHotSet) {
    std::mt19937_64 rng(77);
    for (int trial = 0; trial < 500; ++trial) {
        Inputs in = random_inputs(rng);
        const Routed a = route(RoutingPolicy::kHotPool, in, rng);
        const Routed b = route(RoutingPolicy::kHotPool, in, rng);  // other garbage in the scratch
        ASSERT_EQ(a.ids, b.ids);
        ASSERT_EQ(a.weights, b.weights);
        // Experts outside the resident set never matter: their scores can be anything.
        for (int64_t e = 0; e < in.ne; ++e)
            if (!in.resident[e]) in.logits[e] = std::normal_distribution<float>(0.0f, 8.0f)(rng), in.bias[e] += 3.0f;
        const Routed c = route(RoutingPolicy::kHotPool, in, rng);
        ASSERT_EQ(a.ids, c.ids);
        ASSERT_EQ(a.weights, c.weights);
    }
}

TEST(HotPoolRouting, TheSeedsShapeUsesEveryHotExpertAndAtMostOneOutsideVram) {
    // k = 6, S = 20, H = 5 (the seed's): rank 1 the best resident; if it is a host expert, ranks
    // 2..6 are the five hot ones; if it is hot, the four other hot ones and the best host one.
    std::mt19937_64 rng(5);
    int host_rank1 = 0, hot_rank1 = 0;
    for (int trial = 0; trial < 2000; ++trial) {
        const Inputs in = random_inputs(rng, 20, 5, 6);
        const Routed r = route(RoutingPolicy::kHotPool, in, rng);
        const Routed res = route(RoutingPolicy::kResidentOnly, in, rng);
        ASSERT_EQ(r.ids[0], res.ids[0]) << "rank 1 is resident-only's rank 1";
        int hot = 0, outside = 0;
        for (int32_t e : r.ids) {
            ASSERT_TRUE(in.resident[e]);
            hot += in.hot[e];
            outside += !in.hot[e];
        }
        EXPECT_EQ(hot, 5) << "every hot expert";
        EXPECT_EQ(outside, 1);
        (in.hot[r.ids[0]] ? hot_rank1 : host_rank1)++;
    }
    EXPECT_GT(host_rank1, 0);
    EXPECT_GT(hot_rank1, 0);
}

TEST(HotPoolRouting, WithoutHotExpertsItIsResidentOnly) {
    std::mt19937_64 rng(9);
    for (int trial = 0; trial < 300; ++trial) {
        const Inputs in = random_inputs(rng, -1, 0);
        EXPECT_EQ(route(RoutingPolicy::kHotPool, in, rng).ids, route(RoutingPolicy::kResidentOnly, in, rng).ids);
    }
}

TEST(HotPoolRouting, HandMadeCase) {
    // 8 experts, k = 3. Keys (bias 0) order: 5, 7, 1, 4, 3, 0, 6, 2. Resident {0, 2, 3, 4, 6};
    // hot {3, 6}.
    const float logits[8] = {0.1f, 2.0f, -1.0f, 0.5f, 1.5f, 4.0f, 0.0f, 3.0f};
    Inputs in;
    in.ne = 8;
    in.k = 3;
    in.logits.assign(logits, logits + 8);
    in.bias.assign(8, 0.0f);
    in.resident = {1, 0, 1, 1, 1, 0, 1, 0};
    in.hot = {0, 0, 0, 1, 0, 0, 1, 0};
    std::mt19937_64 rng(1);
    // Rank 1: expert 4 (best resident, a host one); then the hot 3 and 6, though 0 outranks 6.
    EXPECT_EQ(route(RoutingPolicy::kHotPool, in, rng).ids, (std::vector<int32_t>{4, 3, 6}));
    EXPECT_EQ(route(RoutingPolicy::kResidentOnly, in, rng).ids, (std::vector<int32_t>{4, 3, 0}));
    // Rank 1 hot itself: 4 joins the hot set; ranks 2..3 are the hot 3 and 6 (k - 1 = 2 left).
    in.hot[4] = 1;
    EXPECT_EQ(route(RoutingPolicy::kHotPool, in, rng).ids, (std::vector<int32_t>{4, 3, 6}));
    // One hot expert only (3), and it is not rank 1: 4, 3, then the best resident left, 0.
    in.hot = {0, 0, 0, 1, 0, 0, 0, 0};
    EXPECT_EQ(route(RoutingPolicy::kHotPool, in, rng).ids, (std::vector<int32_t>{4, 3, 0}));
    // The only hot expert is rank 1: then the best residents left, 3 and 0.
    in.hot = {0, 0, 0, 0, 1, 0, 0, 0};
    EXPECT_EQ(route(RoutingPolicy::kHotPool, in, rng).ids, (std::vector<int32_t>{4, 3, 0}));
}

}  // namespace
