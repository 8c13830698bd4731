// The forward-level agreement the GPU tests demand of the CUDA backend since its matmuls run
// through the fused quantized kernels (activations rounded to FP16/BF16 before each matmul),
// checked here on the CPU with that rounding emulated (tests/emulated_gpu_numerics.h): the
// emulation differs from the GPU only in the order of FP32 sums (~1e-6 relative), far below the
// activation rounding (FP16 2^-11, BF16 2^-8), so a tolerance that holds here with room holds
// on the GPU, and one that fails here cannot hold there. Same figures as test_gpu_e2e and
// test_gpu_reference:
//  - ci scale (BF16 dense weights, MXFP4 experts, Q8_0 Engram, F32 router), exact and
//    pinned-top1 routing, prompt 64 + 6 generated: the same experts on >= 99.5 % of routing
//    decisions (issue #14) and the same greedy tokens as the CPU backend;
//  - logits of every prompt position within kLogitsTol (max |diff| / max |logit| per run, the
//    metric of test_gpu_e2e) of the CPU backend's;
//  - every key variant of the tiny model (Q8_0 dense, MXFP4 experts) against the float64
//    reference within kLogitsTol, greedy tokens equal.
// Measured when this was written (hi + lo split activations): ci scale every routing decision
// and token equal, logits 1.2e-5 (exact) and 1.4e-5 (pinned-top1) from the CPU's; the variants
// at most 7.1e-7 from the reference. With one rounding per activation (hi only), the ci scale
// kept 47 % (exact) and 70 % (pinned-top1) of routing decisions, no token, logits 0.58 apart;
// the variants up to 0.25 from the reference, 4 of 13 with other tokens. So this test fails for
// the single-rounding contract and passes for the split one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "emulated_gpu_numerics.h"
#include "key_variant_agreement.h"
#include "model_fixture.h"
#include "routing_agreement.h"
#include "runtime/session.h"

namespace {

// The GPU tests' figure (test_gpu_e2e, test_gpu_reference): 2e-3, set for FP32 sums in another
// order; the split activations' residue (2^-22 FP16, 2^-16 BF16 per activation) stays two
// orders of magnitude below it here.
constexpr double kLogitsTol = 2e-3;

bg::RunConfig ci_cfg(const std::string& routing) {
    bg::RunConfig c;
    c.model_path = bgtest::ci_model();
    c.prompt_tokens = 64;
    c.prompt_seed = 5;
    c.gen = 6;
    c.routing = bg::parse_enum<bg::RoutingPolicy>(routing);
    c.matmul = bg::MatmulMode::kPrecise;  // the rounding emulated is the float path's (quant_matmul.cuh)
    c.vram_budget_mib = 4096;
    return c;
}

TEST(EmulatedGpuNumerics, CiScaleSameExpertsTokensAndLogitsWithinTolerance) {
    bgtest::GpuNumericsDevice emulated;
    for (const char* routing : {"exact", "pinned-top1"}) {
        SCOPED_TRACE(routing);
        const bg::RunConfig c = ci_cfg(routing);
        const bg::RoutingPolicy policy = bg::parse_enum<bg::RoutingPolicy>(routing);
        bg::Session cpu(c);
        bg::Session emu(c, &emulated);
        const bgtest::RoutingAgreement agree = bgtest::run_both_recording_routes(cpu, emu);
        EXPECT_EQ(cpu.generated(), emu.generated());
        const double rel = bgtest::max_rel_diff(cpu.all_logits(policy), emu.all_logits(policy));
        std::printf("  %-12s routing agreement %.5f (%zu of %zu), logits max rel diff %.3g\n", routing, agree.fraction(),
                    agree.same, agree.total, rel);
        EXPECT_GE(agree.fraction(), bgtest::kRoutingAgreement) << agree.same << " of " << agree.total;
        EXPECT_LT(rel, kLogitsTol);
    }
}

TEST(EmulatedGpuNumerics, KeyVariantsAgainstTheFloat64Reference) {
    bgtest::GpuNumericsDevice emulated;
    const double worst_all = bgtest::key_variants_against_reference(emulated, kLogitsTol);
    std::printf("  worst over the variants: %.3g (tolerance %.3g)\n", worst_all, kLogitsTol);
}

// The device scale where BG_DEVICE_MODEL names its file (as GpuE2E.DeviceScaleSameExpertsAsTheCpuBackend;
// skipped, visibly, elsewhere): >= 99.5 % of routing decisions equal.
TEST(EmulatedGpuNumerics, DeviceScaleSameExperts) {
    const char* path = std::getenv("BG_DEVICE_MODEL");
    if (!path || !*path) GTEST_SKIP() << "BG_DEVICE_MODEL (the device-scale model's path) is not set";
    bgtest::GpuNumericsDevice emulated;
    bg::RunConfig c = bgtest::device_scale_config(path);
    c.matmul = bg::MatmulMode::kPrecise;
    bg::Session cpu(c);
    bg::Session emu(c, &emulated);
    const bgtest::RoutingAgreement agree = bgtest::run_both_recording_routes(cpu, emu);
    std::printf("  device scale: routing agreement %.5f (%zu of %zu); tokens %s\n", agree.fraction(), agree.same,
                agree.total, cpu.generated() == emu.generated() ? "equal" : "differ");
    EXPECT_GE(agree.fraction(), bgtest::kRoutingAgreement) << agree.same << " of " << agree.total;
}

}  // namespace
