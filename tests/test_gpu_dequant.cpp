// GPU dequantisation against the CPU's exact dequantize_row on fresh random blocks.
// Skipped, visibly, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/dequant.cuh"
#include "tensor/fp8_rows.h"
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

namespace {

// Fork-fp8 Engram rows (tensor/fp8_rows.h): every E4M3 code and a spread of E8M0 scales (the
// 2^-127 denormal, products that underflow to float denormals, ones that overflow to inf),
// against the CPU decode bit for bit.
TEST(GpuDequant, Fp8RowsMatchCpuBitForBit) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int64_t dim = 256, rows = 300, stride = bg::fp8::packed_row_bytes(dim);
    std::random_device rd;
    const uint32_t seed = rd();
    std::mt19937 gen(seed);
    std::vector<uint8_t> packed(rows * stride);
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t* row = packed.data() + r * stride;
        for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<uint8_t>(r < 1 ? j : gen());  // row 0: every code
        for (int64_t g = 0; g < dim / 32; ++g) row[dim + g] = static_cast<uint8_t>(r < 32 ? r * 8 + g : gen());
    }
    std::vector<float> want(rows * dim), got(rows * dim);
    bg::fp8::dequantize_packed_rows(packed.data(), want.data(), rows, dim);

    void* d_src = nullptr;
    float* d_dst = nullptr;
    ASSERT_EQ(cudaMalloc(&d_src, packed.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_dst, want.size() * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_src, packed.data(), packed.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(bg::cuda::dequantize_fp8_rows(d_src, d_dst, rows, dim, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d_dst, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_src);
    cudaFree(d_dst);
    // Bit for bit, except that a NaN is a NaN: the E4M3 NaN code times its scale is NaN on both,
    // but the GPU's multiply returns its canonical NaN where the CPU keeps the operand's sign.
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << "element " << i << " seed " << seed << ": cpu nan gpu " << got[i];
            continue;
        }
        ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0) << "element " << i << " seed " << seed << ": cpu " << want[i] << " gpu " << got[i];
    }
}

// A type the kernel has no decoder for is refused, not left unwritten.
TEST(GpuDequant, RefusesATypeItCannotDecode) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    EXPECT_EQ(bg::cuda::dequantize(bg::GgmlType::I8, nullptr, nullptr, 32, nullptr), cudaErrorInvalidValue);
}

}  // namespace
