// The CUDA forward against the float64 reference (tests/reference) on every key variant a real
// file can carry (tests/key_variants.h): the keys reach the GPU path as they reach the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "cuda/cuda_device.cuh"
#include "cuda/dequant.cuh"
#include "key_variants.h"
#include "reference/dsv41_reference.h"
#include "runtime/session.h"

namespace {

// Greedy tokens after a 24-token prompt, and the logits of every prompt position.
// Tolerance: kLogitsTol relative (max |diff| / max |logit| per position), the CPU/GPU logits
// tolerance of test_gpu_e2e; tokens exactly. 2e-3 as when the GPU dequantised weights to FP32
// for cuBLAS (FP32 sum order): the fused kernels take each activation as hi + lo FP16 (these
// models: Q8_0 dense weights, MXFP4 experts), about 2^-22 relative (quant_matmul.cuh);
// test_emulated_gpu_numerics.cpp runs these same variants on the CPU with that rounding emulated:
// at most 7.1e-7 from the float64 reference, every token equal (with one FP16 rounding instead:
// up to 0.25, and 4 of the 13 variants' tokens differ).
constexpr double kLogitsTol = 2e-3;


TEST(GpuReference, CudaForwardAgreesWithReferenceOnEveryKeyVariant) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::vector<bgtest::KeyVariant> variants = bgtest::key_variants();
    variants.insert(variants.begin(), {"base", [](bgtest::GgufEdit&) {}});
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
        bg::Session gpu(c, &bg::cuda::cuda_device());
        const int64_t V = ref.hparams().n_vocab;
        const std::vector<int32_t> prompt = bg::random_prompt(24, 5, V, 0);
        const std::vector<float> got = gpu.all_logits(bg::RoutingPolicy::kExact);
        const auto want = ref.logits(prompt);
        ASSERT_EQ(got.size(), prompt.size() * static_cast<size_t>(V));
        const double worst = ref::max_rel_diff(want, got, V);
        std::printf("%-32s max rel diff %.3g (tolerance %.3g)\n", v.name.c_str(), worst, kLogitsTol);
        EXPECT_LT(worst, kLogitsTol);
        gpu.run(false);
        EXPECT_EQ(gpu.generated(), ref.greedy(prompt, 8));
    }
}

}  // namespace
