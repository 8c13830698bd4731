// GPU dequantisation against the CPU's exact dequantize_row on fresh random blocks: blocks
// quantize_row writes, and for the 256-weight types any bytes under FP16 super-scales from the
// whole range (subnormal, max, inf, NaN: NaN matches NaN). Skipped, visibly, where no GPU is
// present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/dequant.cuh"
#include "random_weights.h"
#include "tensor/fp8_rows.h"
#include "tensor/ggml_types.h"

namespace {

// got[0..n) = the CUDA dequantisation of the n values whose blocks are q.
void gpu_dequantize(bg::GgmlType t, const std::vector<uint8_t>& q, int64_t n, std::vector<float>& got) {
    void* d_src = nullptr;
    float* d_dst = nullptr;
    ASSERT_EQ(cudaMalloc(&d_src, q.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_dst, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_src, q.data(), q.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(bg::cuda::dequantize(t, d_src, d_dst, n, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d_dst, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_src);
    cudaFree(d_dst);
}

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

    ASSERT_NO_FATAL_FAILURE(gpu_dequantize(t, q, n, got));
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0) << "element " << i << " seed " << seed << ": cpu " << want[i] << " gpu " << got[i];
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuDequant,
                         ::testing::Values(bg::GgmlType::F32, bg::GgmlType::F16, bg::GgmlType::BF16,
                                           bg::GgmlType::Q8_0, bg::GgmlType::MXFP4, bg::GgmlType::Q2_K,
                                           bg::GgmlType::Q3_K, bg::GgmlType::Q4_K, bg::GgmlType::Q5_K,
                                           bg::GgmlType::Q6_K, bg::GgmlType::IQ2_XXS),
                         [](const auto& info) { return std::string(bg::type_name(info.param)); });

class GpuDequantBytes : public ::testing::TestWithParam<bg::GgmlType> {};

TEST_P(GpuDequantBytes, AnyBlockMatchesCpuBitForBit) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const bg::GgmlType t = GetParam();
    const int64_t n = 256 * 400;
    const uint32_t seed = std::random_device{}();
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> q(bg::row_bytes(t, n));
    for (auto& b : q) b = static_cast<uint8_t>(byte(gen));
    // Every fourth block gets an edge-case super-scale, the rest any finite one.
    const uint16_t edges[] = {0x7BFF, 0x0400, 0x03FF, 0x0001, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFFFF};
    int off_d = -1, off_dmin = -1;
    bgtest::super_scale_offsets(t, &off_d, &off_dmin);
    const int64_t bb = bg::type_traits(t).block_bytes;
    for (int64_t b = 0; b < n / 256; ++b)
        for (int off : {off_d, off_dmin}) {
            if (off < 0) continue;
            uint16_t h;
            if (b % 4 == 0) h = edges[static_cast<size_t>(byte(gen)) % std::size(edges)];
            else do h = static_cast<uint16_t>(byte(gen) | (byte(gen) << 8)); while ((h & 0x7C00) == 0x7C00);
            std::memcpy(q.data() + b * bb + off, &h, 2);
        }
    std::vector<float> want(n), got(n);
    bg::dequantize_row(t, q.data(), want.data(), n);
    ASSERT_NO_FATAL_FAILURE(gpu_dequantize(t, q, n, got));
    for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << "element " << i << " seed " << seed;
            continue;
        }
        ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0) << "element " << i << " seed " << seed << ": cpu " << want[i] << " gpu " << got[i];
    }
}

INSTANTIATE_TEST_SUITE_P(SuperBlockTypes, GpuDequantBytes,
                         ::testing::Values(bg::GgmlType::Q2_K, bg::GgmlType::Q3_K, bg::GgmlType::Q4_K,
                                           bg::GgmlType::Q5_K, bg::GgmlType::Q6_K, bg::GgmlType::IQ2_XXS),
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
