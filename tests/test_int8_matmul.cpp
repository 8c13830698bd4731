// The CPU's integer matmul (`--matmul fast`; engine/cpu/int8_matmul.h) on fresh random inputs:
//  - the activation quantisation holds its contract (tensor/qtypes/int8_act.h);
//  - y against a float64 reference of the same arithmetic, written from ggml's block definitions:
//    weights by the exact dequantize_row, activations as q * d from the quantisation, products
//    and sums in double. The int8 path's integer block sums are exact, so the only difference is
//    FP32 summation of the block partials: ||y - ref|| / ||ref|| <= 1e-5 (expected ~1e-7..1e-6);
//  - against the exact float product the difference is the activations' int8 rounding: for
//    inputs uniform in [-1, 1] about 1/(127 sqrt 12) / 0.577 = 3.9e-3 relative, held to
//    [1e-3, 1e-2].
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <random>
#include <vector>

#include "cpu/int8_expert.h"
#include "cpu/int8_matmul.h"
#include "cpu/ops.h"
#include "cpu/int8_rows.h"
#include "int8_run.h"
#include "cpu/thread_pool.h"
#include "random_inputs.h"
#include "random_weights.h"
#include "tensor/qtypes/all.h"
#include "tensor/qtypes/int8_act.h"

using namespace bg;

namespace {

constexpr double kTolSameArithmetic = 1e-5;

// y[t][r] = sum_i deq(W)[r][i] * q[t][i] * d[t][i/32], in double.
std::vector<double> ref_int8(const bgtest::HostMat& W, const std::vector<int8_t>& q, const std::vector<float>& d,
                             int64_t M) {
    const int64_t nb = W.cols / 32;
    std::vector<double> y(static_cast<size_t>(M * W.rows));
    for (int64_t t = 0; t < M; ++t)
        for (int64_t r = 0; r < W.rows; ++r) {
            double s = 0;
            for (int64_t i = 0; i < W.cols; ++i)
                s += static_cast<double>(W.deq[r * W.cols + i]) * q[t * W.cols + i] * static_cast<double>(d[t * nb + i / 32]);
            y[t * W.rows + r] = s;
        }
    return y;
}

TEST(Int8Act, QuantisedBlockHoldsItsContract) {
    auto rng = bgtest::fresh_rng();
    std::uniform_real_distribution<float> mag(-30.0f, 12.0f);  // block scales from 2^-30 to 2^12
    for (int rep = 0; rep < 2000; ++rep) {
        const float scale = std::exp2(mag(rng));
        std::vector<float> x = bgtest::uniform(rng, 32, -scale, scale);
        int8_t q[32];
        int32_t sum = 0;
        const float d = qtypes::quantize_act_block(x.data(), q, &sum);
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        ASSERT_EQ(d, amax / 127.0f);
        int32_t s = 0;
        for (int i = 0; i < 32; ++i) {
            ASSERT_LE(std::abs(q[i]), 127);
            // q = round(x / d) with x / d rounded to float first: |x / d - q| <= 0.5 + half an ulp
            // of 127 (3.8e-6), so |x - q d| <= 0.5 d (1 + 7.6e-6) exactly. Checked in double: in
            // float, q * d itself rounds by up to 1.4e-5 of 0.5 d (seed 2831311434 failed so).
            const double err = std::fabs(static_cast<double>(x[i]) - q[i] * static_cast<double>(d));
            ASSERT_LE(err, 0.5 * d * (1 + 1e-5)) << "x " << x[i] << " q " << int(q[i]) << " d " << d;
            s += q[i];
        }
        ASSERT_EQ(sum, s);
    }
    // A block of zeros (the padding of a short pass) quantises to zeros with scale 0.
    float z[32] = {};
    int8_t q[32];
    int32_t sum = 1;
    EXPECT_EQ(qtypes::quantize_act_block(z, q, &sum), 0.0f);
    EXPECT_EQ(sum, 0);
    for (int8_t v : q) EXPECT_EQ(v, 0);
}

TEST(Int8Traits, UnpackGivesTheExactWeights) {
    auto rng = bgtest::fresh_rng();
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0}) {
        const bgtest::HostMat W = bgtest::random_mat(t, 7, 96, 3, rng);
        qtypes::visit(t, [&](auto traits) {
            using T = decltype(traits);
            for (int64_t r = 0; r < W.rows; ++r)
                for (int64_t b = 0; b < W.cols / 32; ++b) {
                    int8_t v[32];
                    float d[2] = {0, 0}, m[2] = {1, 1};
                    T::unpack(W.bytes.data() + r * W.stride, b, v, d, m);
                    ASSERT_EQ(d[0], d[1]);
                    ASSERT_EQ(m[0], 0.0f);
                    ASSERT_EQ(m[1], 0.0f);
                    for (int i = 0; i < 32; ++i)
                        ASSERT_EQ(static_cast<float>(v[i]) * d[0], W.deq[r * W.cols + b * 32 + i])
                            << type_name(t) << " row " << r << " block " << b << " element " << i;
                }
        });
    }
}

struct Case {
    GgmlType type;
    int64_t rows, cols, M;
};

class Int8Matmul : public ::testing::TestWithParam<Case> {};

TEST_P(Int8Matmul, MatchesFloat64ReferenceOfItsArithmetic) {
    const Case c = GetParam();
    auto rng = bgtest::fresh_rng();
    const bgtest::Int8Run run = bgtest::run_int8(c.type, c.rows, c.cols, c.M, rng);
    const bgtest::HostMat& W = run.W;
    const std::vector<float>& out = run.out;
    const std::vector<double> ref = ref_int8(W, run.q, run.d, c.M);
    const bgtest::Cmp same = bgtest::compare(out, ref);
    ASSERT_LT(same.bad, 0) << "output " << same.bad << " not written";
    EXPECT_LE(same.rel, kTolSameArithmetic);
    const bgtest::Cmp exact = bgtest::compare(out, bgtest::ref_matmul(W, run.x, run.ldx, c.M));
    EXPECT_GE(exact.rel, 1e-3) << "the activations were not rounded to int8";
    EXPECT_LE(exact.rel, 1e-2);
    std::printf("  %s r%lld c%lld M%lld: rel err %.3g against its arithmetic, %.3g against the exact product\n",
                type_name(c.type), (long long)c.rows, (long long)c.cols, (long long)c.M, same.rel, exact.rel);
}

INSTANTIATE_TEST_SUITE_P(Cases, Int8Matmul,
                         ::testing::Values(Case{GgmlType::MXFP4, 64, 256, 1}, Case{GgmlType::MXFP4, 37, 160, 3},
                                           Case{GgmlType::MXFP4, 100, 512, 8}, Case{GgmlType::MXFP4, 33, 96, 16},
                                           Case{GgmlType::MXFP4, 48, 256, 64}, Case{GgmlType::Q8_0, 64, 256, 1},
                                           Case{GgmlType::Q8_0, 37, 160, 3}, Case{GgmlType::Q8_0, 100, 512, 8},
                                           Case{GgmlType::Q8_0, 33, 96, 16}, Case{GgmlType::Q8_0, 48, 256, 65}),
                         [](const auto& info) {
                             const Case& c = info.param;
                             return std::string(type_name(c.type)) + "_r" + std::to_string(c.rows) + "_c" +
                                    std::to_string(c.cols) + "_M" + std::to_string(c.M);
                         });

// Scale edges the random weights do not reach, which the SIMD kernels decode in vector form: MXFP4
// every scale byte, the subnormal scales (0, 1) and ggml's 255 (2^127, products to inf and NaN)
// included; Q8_0 FP16 scales that are zero, negative zero, subnormal, the largest finite and
// infinite, beside the stored -128.
void put_scale_edges(bgtest::HostMat& W, std::mt19937& rng) {
    const int64_t nb = W.cols / 32;
    if (W.type == GgmlType::MXFP4) {
        std::uniform_int_distribution<int> any(0, 255);
        const uint8_t edges[] = {0, 1, 2, 127, 128, 254, 255};
        for (int64_t r = 0; r < W.rows; ++r)
            for (int64_t b = 0; b < nb; ++b)
                W.bytes[r * W.stride + b * 17] = (r + b) % 3 ? static_cast<uint8_t>(any(rng)) : edges[(r + b) % 7];
    } else if (W.type == GgmlType::Q8_0) {
        const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00};
        std::uniform_int_distribution<int> pick(0, 8);
        for (int64_t r = 0; r < W.rows; ++r) {
            W.bytes[r * W.stride + 2 + r % 32] = 0x80;  // -128
            for (int64_t b = 0; b < nb; ++b)
                if ((r + b) % 4 == 0) {
                    const uint16_t h = edges[pick(rng)];
                    W.bytes[r * W.stride + b * 34] = static_cast<uint8_t>(h & 0xFF);
                    W.bytes[r * W.stride + b * 34 + 1] = static_cast<uint8_t>(h >> 8);
                }
        }
    }
}

// Every row kernel computes the same arithmetic in the same order, so a SIMD kernel's y equals
// the portable kernel's bit for bit: every type with int8 traits, row counts that leave a short
// group of eight (or sixteen), one token (the fused paths) and token counts around the AVX2
// kernel's tile of eight (the AVX-512 kernel hands those to it), a padded row stride, Q8_0's
// stored -128, the scale edges above, three threads.
void expect_kernel_equals_portable(cpu::CpuIsa isa) {
    auto rng = bgtest::fresh_rng();
    cpu::ThreadPool pool(3);
    cpu::Int8MatmulScratch scratch;
    for (const GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                             GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS}) {
        ASSERT_TRUE(qtypes::int8_path_takes(t)) << type_name(t);
        for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {64, 512}, {8, 256}, {3, 768}}) {
            bgtest::HostMat W = bgtest::random_mat(t, rows, cols, 7, rng);
            if (t == GgmlType::Q8_0)
                for (int64_t r = 0; r < rows; ++r) W.bytes[r * W.stride + 2 + r % 32] = 0x80;  // -128
            if (rows == 37) put_scale_edges(W, rng);
            const MatView v{W.bytes.data(), t, cols, rows, W.stride};
            for (const int64_t M : {1, 3, 8, 9, 16, 17}) {
                const int64_t ldx = cols + 5, ldy = rows + 3;
                const std::vector<float> x = bgtest::uniform(rng, M * ldx, -1.0f, 1.0f);
                std::vector<float> y_portable(static_cast<size_t>(M * ldy), 7.0f), y_isa = y_portable;
                cpu::matmul_int8(pool, scratch, v, x.data(), ldx, M, y_portable.data(), ldy, cpu::CpuIsa::kPortable);
                cpu::matmul_int8(pool, scratch, v, x.data(), ldx, M, y_isa.data(), ldy, isa);
                ASSERT_EQ(0, std::memcmp(y_portable.data(), y_isa.data(), y_isa.size() * sizeof(float)))
                    << cpu::cpu_isa_name(isa) << " " << type_name(t) << " rows " << rows << " cols " << cols << " M " << M;
                for (int64_t tok = 0; tok < M; ++tok)  // the padding between token rows untouched
                    for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y_isa[tok * ldy + r], 7.0f);
            }
        }
    }
}

TEST(Int8MatmulKernels, Avx2EqualsPortableBitForBit) {
    if (!cpu::cpu_isa_usable(cpu::CpuIsa::kAvx2)) GTEST_SKIP() << "this CPU or build has no AVX2 kernel";
    expect_kernel_equals_portable(cpu::CpuIsa::kAvx2);
}

// The AVX-512 kernel: its own one-token MXFP4 and Q8_0 paths, and every other case through the
// AVX2 kernel.
TEST(Int8MatmulKernels, Avx512EqualsPortableBitForBit) {
    if (!cpu::cpu_isa_usable(cpu::CpuIsa::kAvx512))
        GTEST_SKIP() << "this CPU or build has no AVX-512 (F, BW, VL, VNNI) kernel: not checked here";
    expect_kernel_equals_portable(cpu::CpuIsa::kAvx512);
}

// The AVX-512 kernel's own path, one token of MXFP4, Q8_0, a K-quant or IQ2_XXS, sixteen rows at a time:
// row counts under sixteen (handed to the AVX2 kernel), at sixteen, and with a short last group
// (which takes the sixteen rows ending with it and stores its own), several widths, fresh inputs
// each time, with and without the scale edges (MXFP4, Q8_0), three threads.
TEST(Int8MatmulKernels, Avx512OneTokenEqualsPortableBitForBit) {
    if (!cpu::cpu_isa_usable(cpu::CpuIsa::kAvx512))
        GTEST_SKIP() << "this CPU or build has no AVX-512 (F, BW, VL, VNNI) kernel: not checked here";
    auto rng = bgtest::fresh_rng();
    cpu::ThreadPool pool(3);
    cpu::Int8MatmulScratch scratch;
    for (const GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                             GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS})
        for (const int64_t rows : {1, 7, 13, 16, 17, 29, 37, 61, 100})
            for (const int64_t cols : {32, 96, 256, 512, 2304, 2880})
                for (const bool edges : {false, true}) {
                    if (cols % type_traits(t).block_elems != 0) continue;
                    bgtest::HostMat W = bgtest::random_mat(t, rows, cols, 3, rng);
                    if (edges) put_scale_edges(W, rng);
                    const MatView v{W.bytes.data(), t, cols, rows, W.stride};
                    const int64_t ldy = rows + 3;
                    const std::vector<float> x = bgtest::uniform(rng, cols, -1.0f, 1.0f);
                    std::vector<float> y_portable(static_cast<size_t>(ldy), 7.0f), y_avx512 = y_portable;
                    cpu::matmul_int8(pool, scratch, v, x.data(), cols, 1, y_portable.data(), ldy, cpu::CpuIsa::kPortable);
                    cpu::matmul_int8(pool, scratch, v, x.data(), cols, 1, y_avx512.data(), ldy, cpu::CpuIsa::kAvx512);
                    ASSERT_EQ(0, std::memcmp(y_portable.data(), y_avx512.data(), y_avx512.size() * sizeof(float)))
                        << type_name(t) << " rows " << rows << " cols " << cols << (edges ? " with scale edges" : "");
                }
}

// The row kernel called on row ranges of its own (a work split's, and ranges that do not start
// on a group of sixteen): each range's rows equal the portable kernel's, and no other row of y is
// written, the rows a short last group reads again included.
TEST(Int8MatmulKernels, Avx512RowRangesWriteTheirRowsAlone) {
    if (!cpu::cpu_isa_usable(cpu::CpuIsa::kAvx512))
        GTEST_SKIP() << "this CPU or build has no AVX-512 (F, BW, VL, VNNI) kernel: not checked here";
    auto rng = bgtest::fresh_rng();
    for (const GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::IQ2_XXS})
        for (const int64_t M : {1, 3}) {
            const int64_t rows = 45, cols = 256, ldy = rows + 2;
            const bgtest::HostMat W = bgtest::random_mat(t, rows, cols, 5, rng);
            const MatView v{W.bytes.data(), t, cols, rows, W.stride};
            const std::vector<float> x = bgtest::uniform(rng, M * cols, -1.0f, 1.0f);
            std::vector<int8_t> xq(static_cast<size_t>(M * cols));
            std::vector<float> xd(static_cast<size_t>(M * cols / 32));
            std::vector<int32_t> xs(static_cast<size_t>(M * cols / 16));
            cpu::quantize_int8_rows(x.data(), cols, M, cols, xq.data(), xd.data());
            cpu::int8_half_sums(xq.data(), M, cols, xs.data());
            std::vector<float> y_portable(static_cast<size_t>(M * ldy), 7.0f);
            cpu::Int8RowsArgs args{&v, xq.data(), xd.data(), xs.data(), M, y_portable.data(), ldy};
            cpu::int8_rows_portable(args, 0, rows);
            for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, 16}, {16, 32}, {32, 45}, {40, 45}, {5, 21},
                                         {3, 44}, {0, 45}}) {
                std::vector<float> y(static_cast<size_t>(M * ldy), 7.0f);
                args.y = y.data();
                cpu::int8_rows_avx512(args, r0, r1);
                for (int64_t tok = 0; tok < M; ++tok)
                    for (int64_t r = 0; r < ldy; ++r) {
                        const float want = r >= r0 && r < r1 ? y_portable[tok * ldy + r] : 7.0f;
                        ASSERT_EQ(0, std::memcmp(&want, &y[tok * ldy + r], sizeof(float)))
                            << type_name(t) << " M " << M << " range [" << r0 << ", " << r1 << ") row " << r << " token " << tok;
                    }
            }
        }
}

// A routed expert as one pool job (cpu/int8_expert.h) gives, bit for bit, what its three steps
// give one by one: matmul_int8 over the gate and up rows, the SwiGLU, matmul_int8 over the down
// rows. Every kernel this machine runs, teams of one to four, token counts that split the rows
// unevenly, fresh inputs each time; y starts as NaN, so a row no member wrote shows.
TEST(Int8Expert, OneJobEqualsItsStepsBitForBit) {
    auto rng = bgtest::fresh_rng();
    struct Shape {
        GgmlType type;
        int64_t E, F;
    };
    for (const cpu::CpuIsa isa : {cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512}) {
        if (!cpu::cpu_isa_usable(isa)) continue;
        for (const int threads : {1, 3, 4}) {
            cpu::ThreadPool pool(threads);
            cpu::Int8MatmulScratch steps_scratch, job_scratch;
            for (const Shape sh : {Shape{GgmlType::MXFP4, 288, 224}, Shape{GgmlType::Q8_0, 96, 160},
                                   Shape{GgmlType::Q4_K, 512, 256}, Shape{GgmlType::MXFP4, 1024, 512}})
                for (const int64_t m : {1, 3, 17}) {
                    const int64_t E = sh.E, F = sh.F;
                    const bgtest::HostMat gu_w = bgtest::random_mat(sh.type, 2 * F, E, 0, rng);
                    const bgtest::HostMat down_w = bgtest::random_mat(sh.type, E, F, 0, rng);
                    const MatView gate_up{gu_w.bytes.data(), sh.type, E, 2 * F, gu_w.stride};
                    const MatView down{down_w.bytes.data(), sh.type, F, E, down_w.stride};
                    const int64_t ldx = E + 5;
                    const std::vector<float> x = bgtest::uniform(rng, m * ldx, -1.0f, 1.0f);
                    const float limit = 7.0f;
                    std::vector<float> gu(static_cast<size_t>(m * 2 * F)), h(static_cast<size_t>(m * F));
                    std::vector<float> y_steps(static_cast<size_t>(m * E));
                    cpu::matmul_int8(pool, steps_scratch, gate_up, x.data(), ldx, m, gu.data(), 2 * F, isa);
                    for (int64_t t = 0; t < m; ++t)
                        cpu::swiglu(gu.data() + t * 2 * F, gu.data() + t * 2 * F + F, F, limit, SwigluClamp::kDeepSeek,
                                    h.data() + t * F);
                    cpu::matmul_int8(pool, steps_scratch, down, h.data(), F, m, y_steps.data(), E, isa);
                    std::vector<float> gu2(gu.size()), h2(h.size()), y_job(y_steps.size(), std::nanf(""));
                    cpu::expert_ffn_int8(pool, job_scratch, gate_up, down, x.data(), ldx, m, limit,
                                         SwigluClamp::kDeepSeek, gu2.data(), h2.data(), y_job.data(), isa);
                    ASSERT_EQ(0, std::memcmp(y_steps.data(), y_job.data(), y_job.size() * sizeof(float)))
                        << cpu::cpu_isa_name(isa) << " threads " << threads << " " << type_name(sh.type) << " E " << E
                        << " F " << F << " m " << m;
                    ASSERT_EQ(0, std::memcmp(h.data(), h2.data(), h.size() * sizeof(float)));
                }
        }
    }
}

// best_cpu_isa picks the widest kernel this CPU runs, and the names are the metrics'.
TEST(Int8MatmulKernels, BestIsaIsTheWidestUsable) {
    const cpu::CpuIsa best = cpu::best_cpu_isa();
    if (cpu::cpu_isa_usable(cpu::CpuIsa::kAvx512))
        EXPECT_EQ(best, cpu::CpuIsa::kAvx512);
    else if (cpu::cpu_isa_usable(cpu::CpuIsa::kAvx2))
        EXPECT_EQ(best, cpu::CpuIsa::kAvx2);
    else
        EXPECT_EQ(best, cpu::CpuIsa::kPortable);
    EXPECT_STREQ(cpu::cpu_isa_name(cpu::CpuIsa::kPortable), "portable");
    EXPECT_STREQ(cpu::cpu_isa_name(cpu::CpuIsa::kAvx2), "avx2");
    EXPECT_STREQ(cpu::cpu_isa_name(cpu::CpuIsa::kAvx512), "avx512vnni");
    std::printf("  best_cpu_isa: %s (avx512vnni %s)\n", cpu::cpu_isa_name(best),
                cpu::cpu_isa_usable(cpu::CpuIsa::kAvx512) ? "usable" : "not usable here");
}

}  // namespace
