// The CUDA forward against the float64 reference (tests/reference) on every key variant a real
// file can carry (tests/key_variants.h): the keys reach the GPU path as they reach the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "cuda/cuda_device.cuh"
#include "cuda/dequant.cuh"
#include "key_variant_agreement.h"
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

// `--matmul fast` against precise on the GPU, every key variant (the same bounds as the CPU's,
// tests/test_fast_matmul.cpp: both compute the same int8 arithmetic).
TEST(GpuReference, FastMatmulAgainstPreciseOnEveryKeyVariant) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    bgtest::key_variants_fast_against_precise(bg::cuda::cuda_device(), bgtest::kFastTop1, bgtest::kFastMaxRel);
}

TEST(GpuReference, CudaForwardAgreesWithReferenceOnEveryKeyVariant) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    bgtest::key_variants_against_reference(bg::cuda::cuda_device(), kLogitsTol);
}

}  // namespace
