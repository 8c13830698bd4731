// `--matmul fast` (int8 activations, exact integer block sums) against `--matmul precise` (the
// float path the float64 reference checks use), end to end on the CPU backend: every key variant
// of the tiny model (Q8_0 dense weights and MXFP4 experts, so every matrix but the 1-D weights
// takes the int8 path), top-1 agreement over the prompt and the largest logit difference, stated
// and held to bounds set from measurement (tests/key_variant_agreement.h). Also: the fast path is
// what `betelgeuse run` does by default, and it is deterministic (cold and warm passes give the
// same bits).
#include <gtest/gtest.h>

#include "cpu/cpu_ops.h"
#include "key_variant_agreement.h"
#include "model_fixture.h"
#include "runtime/session.h"

namespace {

TEST(FastMatmul, AgainstPreciseOnEveryKeyVariant) {
    bgtest::key_variants_fast_against_precise(bg::cpu::cpu_device(), bgtest::kFastTop1, bgtest::kFastMaxRel);
}

TEST(FastMatmul, IsTheDefaultAndTierStateInvariant) {
    bg::RunConfig c;
    EXPECT_EQ(c.matmul, bg::MatmulMode::kFast);
    c.model_path = bgtest::tiny_model();
    c.prompt_tokens = 20;
    c.gen = 4;
    c.routing = bg::RoutingPolicy::kResidentOnly;
    c.slots = 8;
    c.hot = 2;
    bg::Session s(c);
    const std::vector<float> cold = s.all_logits(bg::RoutingPolicy::kResidentOnly);
    const std::vector<float> warm = s.all_logits(bg::RoutingPolicy::kResidentOnly);
    EXPECT_EQ(cold, warm);
    c.matmul = bg::MatmulMode::kPrecise;
    bg::Session p(c);
    EXPECT_NE(cold, p.all_logits(bg::RoutingPolicy::kResidentOnly)) << "fast and precise took the same path";
}

}  // namespace
