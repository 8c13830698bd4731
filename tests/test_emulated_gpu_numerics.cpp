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
#include "key_variants.h"
#include "model_fixture.h"
#include "routing_agreement.h"
#include "reference/dsv41_reference.h"
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
    c.routing = routing;
    c.vram_budget_mib = 4096;
    return c;
}

TEST(EmulatedGpuNumerics, CiScaleSameExpertsTokensAndLogitsWithinTolerance) {
    bgtest::GpuNumericsDevice emulated;
    for (const char* routing : {"exact", "pinned-top1"}) {
        SCOPED_TRACE(routing);
        const bg::RunConfig c = ci_cfg(routing);
        const bg::RoutingPolicy policy = bg::parse_routing_policy(routing);
        bg::Session cpu(c);
        bgtest::RouteRecorder rc;
        cpu.forward().set_observer(&rc);
        cpu.run(false);
        bg::Session emu(c, &emulated);
        bgtest::RouteRecorder re;
        emu.forward().set_observer(&re);
        emu.run(false);
        ASSERT_EQ(rc.seen.size(), re.seen.size());
        const size_t same = bgtest::same_routes(rc, re);
        const double agree = static_cast<double>(same) / rc.seen.size();
        EXPECT_EQ(cpu.generated(), emu.generated());
        cpu.forward().set_observer(nullptr);
        emu.forward().set_observer(nullptr);
        const double rel = bgtest::max_rel_diff(cpu.all_logits(policy), emu.all_logits(policy));
        std::printf("  %-12s routing agreement %.5f (%zu of %zu), logits max rel diff %.3g\n", routing, agree, same,
                    rc.seen.size(), rel);
        EXPECT_GE(agree, bgtest::kRoutingAgreement) << same << " of " << rc.seen.size();
        EXPECT_LT(rel, kLogitsTol);
    }
}

TEST(EmulatedGpuNumerics, KeyVariantsAgainstTheFloat64Reference) {
    bgtest::GpuNumericsDevice emulated;
    std::vector<bgtest::KeyVariant> variants = bgtest::key_variants();
    variants.insert(variants.begin(), {"base", [](bgtest::GgufEdit&) {}});
    double worst_all = 0;
    for (const auto& v : variants) {
        SCOPED_TRACE(v.name);
        const std::string path = bgtest::key_variant_path(v);
        const ref::Dsv41Reference ref(path);
        bg::RunConfig c;
        c.model_path = path;
        c.prompt_tokens = 24;
        c.prompt_seed = 5;
        c.gen = 8;
        c.routing = "exact";
        c.vram_budget_mib = 1024;
        bg::Session emu(c, &emulated);
        const int64_t V = ref.hparams().n_vocab;
        const std::vector<int32_t> prompt = bg::random_prompt(24, 5, V, 0);
        const std::vector<float> got = emu.all_logits(bg::RoutingPolicy::kExact);
        const auto want = ref.logits(prompt);
        ASSERT_EQ(got.size(), prompt.size() * static_cast<size_t>(V));
        const double worst = ref::max_rel_diff(want, got, V);
        worst_all = std::max(worst_all, worst);
        std::printf("  %-32s max rel diff %.3g\n", v.name.c_str(), worst);
        EXPECT_LT(worst, kLogitsTol);
        emu.run(false);
        EXPECT_EQ(emu.generated(), ref.greedy(prompt, 8));
    }
    std::printf("  worst over the variants: %.3g (tolerance %.3g)\n", worst_all, kLogitsTol);
}

// The device scale where BG_DEVICE_MODEL names its file (as GpuE2E.DeviceScaleSameExpertsAsTheCpuBackend;
// skipped, visibly, elsewhere): >= 99.5 % of routing decisions equal.
TEST(EmulatedGpuNumerics, DeviceScaleSameExperts) {
    const char* path = std::getenv("BG_DEVICE_MODEL");
    if (!path || !*path) GTEST_SKIP() << "BG_DEVICE_MODEL (the device-scale model's path) is not set";
    bgtest::GpuNumericsDevice emulated;
    bg::RunConfig c;
    c.model_path = path;
    c.prompt_tokens = 32;
    c.prompt_seed = 5;
    c.gen = 4;
    c.routing = "exact";
    c.vram_budget_mib = 16384;
    c.host_budget_mib = 65536;
    bg::Session cpu(c);
    bgtest::RouteRecorder rc;
    cpu.forward().set_observer(&rc);
    cpu.run(false);
    bg::Session emu(c, &emulated);
    bgtest::RouteRecorder re;
    emu.forward().set_observer(&re);
    emu.run(false);
    ASSERT_EQ(rc.seen.size(), re.seen.size());
    const size_t same = bgtest::same_routes(rc, re);
    const double agree = static_cast<double>(same) / rc.seen.size();
    std::printf("  device scale: routing agreement %.5f (%zu of %zu); tokens %s\n", agree, same, rc.seen.size(),
                cpu.generated() == emu.generated() ? "equal" : "differ");
    EXPECT_GE(agree, bgtest::kRoutingAgreement) << same << " of " << rc.seen.size();
}

}  // namespace
