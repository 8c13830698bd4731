// GPU dequantisation against the CPU's exact dequantize_row on fresh random blocks.
// Skipped, visibly, where no GPU is present.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/dequant.cuh"
#include "tensor/ggml_types.h"

namespace {

class GpuDequant : public ::testing::TestWithParam<bg::GgmlType> {};

TEST_P(GpuDequant, MatchesCpuBitForBit) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const bg::GgmlType t = GetParam();
    const int64_t n = 32 * 1000;
    std::random_device rd;
    const uint32_t seed = rd();
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(n);
    for (auto& v : x) v = nd(gen);
    std::vector<uint8_t> q(bg::row_bytes(t, n));
    bg::quantize_row(t, x.data(), q.data(), n);
    std::vector<float> want(n), got(n);
    bg::dequantize_row(t, q.data(), want.data(), n);

    void* d_src = nullptr;
    float* d_dst = nullptr;
    ASSERT_EQ(cudaMalloc(&d_src, q.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_dst, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_src, q.data(), q.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(bg::cuda::dequantize(t, d_src, d_dst, n, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d_dst, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_src);
    cudaFree(d_dst);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0) << "element " << i << " seed " << seed << ": cpu " << want[i] << " gpu " << got[i];
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuDequant,
                         ::testing::Values(bg::GgmlType::F32, bg::GgmlType::F16, bg::GgmlType::BF16,
                                           bg::GgmlType::Q8_0, bg::GgmlType::MXFP4),
                         [](const auto& info) { return std::string(bg::type_name(info.param)); });

}  // namespace
