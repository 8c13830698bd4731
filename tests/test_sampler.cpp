// Sampling: greedy at temperature 0, reproducible with a seed, and top-k / top-p / min-p keep
// exactly the tokens their definitions keep, on hand-made logits.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "argmax_cases.h"
#include "backend/ops.h"
#include "cpu/cpu_ops.h"
#include "cpu/thread_pool.h"
#include "random_inputs.h"
#include "runtime/sampler.h"
#include "util/check.h"

namespace {

using bg::Sampler;
using bg::SamplingConfig;

std::set<int32_t> kept(const SamplingConfig& c, const std::vector<float>& logits) {
    std::set<int32_t> ids;
    for (const bg::Candidate& x : Sampler(c).filter(logits.data(), static_cast<int64_t>(logits.size()))) ids.insert(x.id);
    return ids;
}

SamplingConfig only(int64_t top_k, double top_p, double min_p) {
    SamplingConfig c;
    c.temp = 1.0;
    c.top_k = top_k;
    c.top_p = top_p;
    c.min_p = min_p;
    return c;
}

// Logits whose softmax is exactly the given probabilities.
std::vector<float> logits_of(const std::vector<double>& p) {
    std::vector<float> l;
    for (double x : p) l.push_back(static_cast<float>(std::log(x)));
    return l;
}

TEST(Sampler, TemperatureZeroIsGreedy) {
    const std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.5f, 0.7f};
    SamplingConfig c;  // the default: temp 0
    Sampler s(c);
    EXPECT_TRUE(s.greedy());
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(logits.data(), 5), 1) << "the first of the equal best";
    EXPECT_EQ(bg::argmax(logits.data(), 5), 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOthers) {
    std::vector<float> logits(1000);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37) * 2.0);
    SamplingConfig c;
    c.temp = 1.5;
    c.top_k = 0;
    c.top_p = 1.0;
    c.min_p = 0.0;
    auto draw = [&](uint64_t seed) {
        c.seed = seed;
        Sampler s(c);
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits.data(), 1000));
        return out;
    };
    EXPECT_EQ(draw(7), draw(7));
    EXPECT_NE(draw(7), draw(8));
    const std::vector<int32_t> a = draw(7);
    EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 10u) << "a flat distribution gives many tokens";
}

TEST(Sampler, TopKKeepsTheKHighest) {
    const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 3.0f, -2.0f, 4.0f};
    EXPECT_EQ(kept(only(3, 1.0, 0.0), logits), (std::set<int32_t>{1, 5, 2})) << "of the tied 3.0s the lower id";
    EXPECT_EQ(kept(only(1, 1.0, 0.0), logits), (std::set<int32_t>{1}));
    EXPECT_EQ(kept(only(0, 1.0, 0.0), logits).size(), 6u) << "0: no limit";
    EXPECT_EQ(kept(only(100, 1.0, 0.0), logits).size(), 6u);
}

TEST(Sampler, TopPKeepsTheFewestReachingTheMass) {
    const std::vector<float> l = logits_of({0.05, 0.4, 0.3, 0.15, 0.1});
    // (Thresholds stay off the exact sums: the logits are floats.)
    EXPECT_EQ(kept(only(0, 0.39, 0.0), l), (std::set<int32_t>{1}));
    EXPECT_EQ(kept(only(0, 0.5, 0.0), l), (std::set<int32_t>{1, 2}));
    EXPECT_EQ(kept(only(0, 0.69, 0.0), l), (std::set<int32_t>{1, 2})) << "0.4 + 0.3 reaches 0.69";
    EXPECT_EQ(kept(only(0, 0.71, 0.0), l), (std::set<int32_t>{1, 2, 3}));
    EXPECT_EQ(kept(only(0, 0.96, 0.0), l), (std::set<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(kept(only(0, 0.0, 0.0), l), (std::set<int32_t>{1})) << "at least one token";
    // After top-k the mass is taken over the survivors: 0.4 / 0.7 of the two left.
    EXPECT_EQ(kept(only(2, 0.55, 0.0), l), (std::set<int32_t>{1}));
    EXPECT_EQ(kept(only(2, 0.6, 0.0), l), (std::set<int32_t>{1, 2}));
}

TEST(Sampler, MinPKeepsTokensNearTheBest) {
    const std::vector<float> l = logits_of({0.05, 0.4, 0.3, 0.15, 0.1});
    // Relative to the best (0.4): 0.125, 1, 0.75, 0.375, 0.25.
    EXPECT_EQ(kept(only(0, 1.0, 0.3), l), (std::set<int32_t>{1, 2, 3}));
    EXPECT_EQ(kept(only(0, 1.0, 0.76), l), (std::set<int32_t>{1}));
    EXPECT_EQ(kept(only(0, 1.0, 0.2), l), (std::set<int32_t>{1, 2, 3, 4}));
    EXPECT_EQ(kept(only(0, 1.0, 1.0), l), (std::set<int32_t>{1}));
}

TEST(Sampler, DrawsOnlyKeptTokensInProportion) {
    const std::vector<float> l = logits_of({0.05, 0.4, 0.3, 0.15, 0.1});
    SamplingConfig c = only(3, 1.0, 0.0);
    c.seed = 11;
    Sampler s(c);
    std::vector<int> count(5, 0);
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++count[s.sample(l.data(), 5)];
    EXPECT_EQ(count[0] + count[4], 0) << "outside the top 3";
    // Renormalised over {0.4, 0.3, 0.15}: 0.47, 0.35, 0.18.
    EXPECT_NEAR(count[1] / double(n), 0.4 / 0.85, 0.02);
    EXPECT_NEAR(count[2] / double(n), 0.3 / 0.85, 0.02);
    EXPECT_NEAR(count[3] / double(n), 0.15 / 0.85, 0.02);
}

// --ignore-eos sets the logits of end-of-generation tokens to -inf: with no filter left to drop
// them, such a token has no weight and is never drawn, even where rounding runs a draw past the
// last candidate.
TEST(Sampler, NeverDrawsATokenWhoseLogitIsMinusInfinity) {
    std::vector<float> l = logits_of({0.3, 0.2, 0.2, 0.15, 0.15});
    l[0] = l[3] = -INFINITY;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
        SamplingConfig c = only(0, 1.0, 0.0);
        c.temp = 3.0;
        c.seed = seed;
        Sampler s(c);
        std::vector<int> count(5, 0);
        for (int i = 0; i < 5000; ++i) ++count[s.sample(l.data(), 5)];
        EXPECT_EQ(count[0] + count[3], 0);
        for (int i : {1, 2, 4}) EXPECT_GT(count[i], 0) << "every finite token is drawn: " << i;
    }
}

// argmax against the plain loop's definition (the first index of the largest value, NaNs never
// chosen) on fresh random vectors: lengths around the kernel's 16 lanes, ties, -inf and NaNs.
TEST(Sampler, ArgmaxIsTheFirstLargestSkippingNaNs) {
    auto rng = bgtest::fresh_rng();
    std::uniform_int_distribution<int> value(-4, 4), kind(0, 9);
    auto reference = [](const std::vector<float>& x) {
        int64_t best = -1;
        for (size_t i = 0; i < x.size(); ++i)
            if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = static_cast<int64_t>(i);
        return static_cast<int32_t>(best < 0 ? 0 : best);
    };
    for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 129280})
        for (int trial = 0; trial < 40; ++trial) {
            std::vector<float> x(static_cast<size_t>(n));
            for (float& v : x) {
                const int k = kind(rng);
                v = k == 0 ? NAN : k == 1 ? -INFINITY : static_cast<float>(value(rng));  // small ints: many ties
            }
            if (trial == 0) std::fill(x.begin(), x.end(), NAN);
            if (trial == 1) std::fill(x.begin(), x.end(), -INFINITY);
            if (trial == 2) x[0] = NAN;
            ASSERT_EQ(bg::argmax(x.data(), n), reference(x)) << "n " << n << " trial " << trial;
        }
}

// top-k keeps what a full sort's first k are (higher logit first, lower id among equals), in that
// order, on fresh random logits with many ties; sampling twice with one sampler reuses its buffers
// and gives what a fresh sampler gives.
TEST(Sampler, TopKIsTheFullSortsFirstK) {
    auto rng = bgtest::fresh_rng();
    std::uniform_int_distribution<int> value(-50, 50);
    for (int64_t n : {5, 64, 1000, 129280})
        for (int64_t k : {1, 2, 40, 999}) {
            if (k >= n) continue;
            std::vector<float> l(static_cast<size_t>(n));
            for (float& v : l) v = static_cast<float>(value(rng)) * 0.25f;
            std::vector<bg::Candidate> all;
            for (int64_t i = 0; i < n; ++i) all.push_back({static_cast<int32_t>(i), l[i]});
            std::sort(all.begin(), all.end(), [](const bg::Candidate& a, const bg::Candidate& b) {
                return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
            });
            Sampler s(only(k, 1.0, 0.0));
            for (int twice = 0; twice < 2; ++twice) {
                const std::vector<bg::Candidate> got = s.filter(l.data(), n);
                ASSERT_EQ(got.size(), static_cast<size_t>(k));
                for (int64_t i = 0; i < k; ++i) {
                    ASSERT_EQ(got[i].id, all[i].id) << "n " << n << " k " << k << " rank " << i;
                    ASSERT_EQ(got[i].logit, all[i].logit);
                }
            }
        }
}

TEST(Sampler, BadValuesAreErrors) {
    SamplingConfig c;
    c.temp = -1;
    EXPECT_THROW(Sampler{c}, bg::Error);
    c = SamplingConfig{};
    c.top_p = 1.5;
    EXPECT_THROW(Sampler{c}, bg::Error);
    c = SamplingConfig{};
    c.min_p = -0.1;
    EXPECT_THROW(Sampler{c}, bg::Error);
}

// The CPU ops' greedy choice (Ops::argmax, what a decode step on the CPU backend takes) is the
// host's argmax over the logits with the banned ids set to -inf, in every case that decides.
TEST(Sampler, OpsArgmaxIsTheHostsGreedyChoice) {
    auto rng = bgtest::fresh_rng();
    bg::cpu::ThreadPool pool(1);
    const std::unique_ptr<bg::Ops> ops = bg::cpu::make_cpu_ops(pool);
    for (const bgtest::ArgmaxCase& c : bgtest::argmax_cases(rng)) {
        int32_t got = -1;
        ops->argmax(c.x.data(), static_cast<int64_t>(c.x.size()), c.ban, &got);
        EXPECT_EQ(got, bgtest::host_greedy(c)) << c.what;
    }
}

}  // namespace
