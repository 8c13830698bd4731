// Grouping a layer's routing slots by expert (bg::group_by_expert, the CPU side of
// Ops::group_by_expert; the CUDA kernel is checked against it in test_gpu_cuda_ops): against a
// direct reading of the contract (experts ascending, slots in order within an expert, rows from
// the slot's position and rank, ids outside the experts counted and left out), on fresh random
// ids.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cpu/routing.h"
#include "random_inputs.h"

using namespace bg;

namespace {

struct Grouped {
    std::vector<int32_t> counts, gather, scatter;
};

Grouped by_contract(const std::vector<int32_t>& ids, int64_t k, int64_t pos0, int64_t ne) {
    Grouped g;
    g.counts.assign(static_cast<size_t>(ne + 1), 0);
    for (int64_t e = 0; e < ne; ++e)
        for (size_t s = 0; s < ids.size(); ++s)
            if (ids[s] == e) {
                ++g.counts[e];
                g.gather.push_back(static_cast<int32_t>(pos0 + static_cast<int64_t>(s) / k));
                g.scatter.push_back(static_cast<int32_t>(pos0 * k + static_cast<int64_t>(s)));
            }
    for (int32_t id : ids) g.counts[ne] += id < 0 || id >= ne;
    return g;
}

TEST(MoeGroup, MatchesTheContractOnRandomSlots) {
    std::mt19937 rng = bgtest::fresh_rng();
    for (const auto& [n_tok, k, ne] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1, 6, 384}, {16, 6, 384}, {500, 6, 384}, {37, 2, 16}, {3, 8, 600}}) {
        std::uniform_int_distribution<int32_t> expert(0, static_cast<int32_t>(ne - 1));
        std::uniform_int_distribution<int64_t> start(0, 1000);
        for (bool with_invalid : {false, true}) {
            std::vector<int32_t> ids(static_cast<size_t>(n_tok * k));
            for (auto& id : ids) id = expert(rng);
            if (with_invalid) {
                ids[0] = -1;
                ids[ids.size() - 1] = static_cast<int32_t>(ne);
            }
            const int64_t pos0 = start(rng);
            const Grouped want = by_contract(ids, k, pos0, ne);
            Grouped got;
            got.counts.assign(static_cast<size_t>(ne + 1), -7);
            got.gather.assign(ids.size(), -7);
            got.scatter.assign(ids.size(), -7);
            group_by_expert(ids.data(), static_cast<int64_t>(ids.size()), k, pos0, ne, got.counts.data(),
                            got.gather.data(), got.scatter.data());
            got.gather.resize(want.gather.size());
            got.scatter.resize(want.scatter.size());
            EXPECT_EQ(got.counts, want.counts) << n_tok << " tokens, " << ne << " experts";
            EXPECT_EQ(got.gather, want.gather);
            EXPECT_EQ(got.scatter, want.scatter);
            EXPECT_EQ(got.counts[ne], with_invalid ? 2 : 0);
        }
    }
}

}  // namespace
