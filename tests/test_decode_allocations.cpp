// Nothing allocates on the per-token path (the developers' guide): once the first decode steps
// have sized what the engine keeps between steps, a decode step makes no heap allocation, on the
// CPU backend, for each routing rule and with experts read from disk, held in host slots or in
// the hot tier. This executable replaces the global operator new with one that counts its calls
// (decode_allocations.h), and reads the count at each generated token. test_gpu_decode_allocations
// does the same on the CUDA backend.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "decode_allocations.h"
#include "model_fixture.h"
#include "runtime/session.h"

namespace {

bg::RunConfig tiny_cfg(bg::RoutingPolicy routing, int64_t slots, int64_t hot, double temp) {
    bg::RunConfig c;
    c.model_path = bgtest::tiny_model();
    c.prompt_tokens = 24;
    c.prompt_seed = 3;
    c.gen = 12;
    c.ignore_eos = true;
    c.slots = slots;
    c.hot = hot;
    c.transient_slots = 4;
    c.threads = 2;
    c.passes = 2;
    c.routing = routing;
    c.sampling.temp = temp;
    c.sampling.top_k = 40;
    return c;
}

}  // namespace

// Steps after the first (which may size buffers kept from then on: the sampler's) allocate
// nothing. (Measured when this test came: 14-16 allocations a step before, from std::function
// copies of the thread pool's jobs, a scratch vector of group_by_expert and the growth of the
// generated tokens' vector.)
TEST(DecodeAllocations, StepsAfterTheFirstAllocateNothing) {
    struct Case {
        const char* what;
        bg::RoutingPolicy routing;
        int64_t slots, hot;
        double temp;
    };
    for (const Case& k : {Case{"resident-only", bg::RoutingPolicy::kResidentOnly, 8, 2, 0.0},
                          Case{"exact (disk reads)", bg::RoutingPolicy::kExact, 8, 2, 0.0},
                          Case{"exact, every expert resident", bg::RoutingPolicy::kExact, bg::RunConfig::kMostThatFit, 2, 0.0},
                          Case{"hot-pool", bg::RoutingPolicy::kHotPool, 8, 2, 0.0},
                          Case{"resident-only, temp 0.8, top-k 40", bg::RoutingPolicy::kResidentOnly, 8, 2, 0.8}}) {
        SCOPED_TRACE(k.what);
        const std::vector<uint64_t> per_step = bgtest::allocations_per_step(tiny_cfg(k.routing, k.slots, k.hot, k.temp));
        ASSERT_GE(per_step.size(), 8u);
        std::printf("  %-34s allocations per decode step:", k.what);
        for (uint64_t n : per_step) std::printf(" %llu", (unsigned long long)n);
        std::printf("\n");
        for (size_t i = 1; i < per_step.size(); ++i) EXPECT_EQ(per_step[i], 0u) << "decode step " << i + 1;
    }
}
