// A decode step on the CUDA backend makes no heap allocation once the first has sized what the
// engine keeps (the developers' guide: nothing allocates on the per-token path), with a decode
// step's host-resident experts copied (gpu), computed by the CPU in place (cpu) or split (hybrid),
// and with resident-only routing and exact routing's disk reads. The count is the program's
// operator new calls between generated tokens (decode_allocations.h); the CPU backend's is
// test_decode_allocations.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cuda/cuda_device.cuh"
#include "cuda/dequant.cuh"
#include "decode_allocations.h"
#include "model_fixture.h"
#include "runtime/session.h"

TEST(GpuDecodeAllocations, StepsAfterTheFirstAllocateNothing) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (const char* routing : {"resident-only", "exact"})
        for (const char* where : {"gpu", "cpu", "hybrid"}) {
            SCOPED_TRACE(std::string(routing) + " " + where);
            bg::RunConfig c;
            c.model_path = bgtest::ci_model();
            c.prompt_tokens = 32;
            c.prompt_seed = 5;
            c.gen = 12;
            c.passes = 2;
            c.ignore_eos = true;
            c.promote = true;
            c.vram_budget_mib = 4096;
            c.routing = bg::parse_enum<bg::RoutingPolicy>(routing);
            c.decode_experts = bg::parse_enum<bg::DecodeExperts>(where);
            bg::Session s(c, &bg::cuda::cuda_device());
            const std::vector<uint64_t> per_step = bgtest::allocations_per_step(s, c.gen);
            ASSERT_GE(per_step.size(), 8u);
            std::printf("  %-13s %-6s allocations per decode step:", routing, where);
            for (uint64_t n : per_step) std::printf(" %llu", (unsigned long long)n);
            std::printf("\n");
            for (size_t i = 1; i < per_step.size(); ++i) EXPECT_EQ(per_step[i], 0u) << "decode step " << i + 1;
        }
}
