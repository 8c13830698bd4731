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
#include <memory>
#include <numeric>
#include <algorithm>
#include <utility>
#include <random>
#include <vector>

#include "backend/ops.h"
#include "cpu/cpu_ops.h"
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
                    cpu::expert_ffn_int8(pool, job_scratch, {gate_up.slice_rows(0, F), gate_up.slice_rows(F, F), down, m},
                                         x.data(), ldx, limit, SwigluClamp::kDeepSeek, gu2.data(), h2.data(), y_job.data(),
                                         isa);
                    ASSERT_EQ(0, std::memcmp(y_steps.data(), y_job.data(), y_job.size() * sizeof(float)))
                        << cpu::cpu_isa_name(isa) << " threads " << threads << " " << type_name(sh.type) << " E " << E
                        << " F " << F << " m " << m;
                    ASSERT_EQ(0, std::memcmp(h.data(), h2.data(), h.size() * sizeof(float)));
                }
        }
    }
}

// Several experts of a layer as one pool job (cpu::experts_ffn_int8, a decode layer's CPU experts)
// give each expert's y and h bit for bit as it alone: weight types mixed in one job, tokens per
// expert uneven (so runs of groups cross experts mid-run), teams of one to four, every kernel this
// machine runs; the outputs start as NaN, so a row no member wrote shows.
TEST(Int8Expert, SeveralInOneJobEachEqualsItselfAloneBitForBit) {
    auto rng = bgtest::fresh_rng();
    constexpr int64_t E = 512, F = 256;  // Q4_K's blocks of 256 along both
    for (const cpu::CpuIsa isa : {cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512}) {
        if (!cpu::cpu_isa_usable(isa)) continue;
        for (const int threads : {1, 3, 4}) {
            cpu::ThreadPool pool(threads);
            cpu::Int8MatmulScratch alone_scratch, job_scratch;
            for (const std::vector<int64_t>& ms : {std::vector<int64_t>{1, 1, 1, 1, 1, 1}, {2, 1, 3},
                                                   std::vector<int64_t>{5}, std::vector<int64_t>(16, 1)}) {
                const int64_t n = static_cast<int64_t>(ms.size());
                int64_t m_all = 0;
                for (const int64_t m : ms) m_all += m;
                std::vector<bgtest::HostMat> gu_w, down_w;
                std::vector<cpu::Int8Expert> experts;
                for (int64_t i = 0; i < n; ++i) {
                    const GgmlType t = i % 3 == 0 ? GgmlType::MXFP4 : i % 3 == 1 ? GgmlType::Q8_0 : GgmlType::Q4_K;
                    gu_w.push_back(bgtest::random_mat(t, 2 * F, E, 0, rng));
                    down_w.push_back(bgtest::random_mat(i % 2 ? GgmlType::MXFP4 : GgmlType::Q8_0, E, F, 0, rng));
                }
                for (int64_t i = 0; i < n; ++i) {
                    const MatView gate_up{gu_w[i].bytes.data(), gu_w[i].type, E, 2 * F, gu_w[i].stride};
                    experts.push_back({gate_up.slice_rows(0, F), gate_up.slice_rows(F, F),
                                       MatView{down_w[i].bytes.data(), down_w[i].type, F, E, down_w[i].stride}, ms[i]});
                }
                const int64_t ldx = E + 3;
                const std::vector<float> x = bgtest::uniform(rng, m_all * ldx, -1.0f, 1.0f);
                const float limit = 7.0f;
                std::vector<float> gu(static_cast<size_t>(m_all * 2 * F)), h(static_cast<size_t>(m_all * F), std::nanf(""));
                std::vector<float> y(static_cast<size_t>(m_all * E), std::nanf(""));
                cpu::experts_ffn_int8(pool, job_scratch, experts.data(), n, x.data(), ldx, limit, SwigluClamp::kDeepSeek,
                                      gu.data(), h.data(), y.data(), isa);
                for (int64_t i = 0, t = 0; i < n; t += ms[i++]) {
                    const int64_t m = ms[i];
                    std::vector<float> gu1(static_cast<size_t>(m * 2 * F)), h1(static_cast<size_t>(m * F));
                    std::vector<float> y1(static_cast<size_t>(m * E), std::nanf(""));
                    cpu::expert_ffn_int8(pool, alone_scratch, {experts[i].gate, experts[i].up, experts[i].down, m},
                                         x.data() + t * ldx, ldx, limit, SwigluClamp::kDeepSeek, gu1.data(), h1.data(),
                                         y1.data(), isa);
                    ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + t * E, y1.size() * sizeof(float)))
                        << cpu::cpu_isa_name(isa) << " threads " << threads << " expert " << i << " of " << n;
                    ASSERT_EQ(0, std::memcmp(h1.data(), h.data() + t * F, h1.size() * sizeof(float)))
                        << cpu::cpu_isa_name(isa) << " threads " << threads << " expert " << i << " of " << n;
                }
            }
        }
    }
}

// Parts of experts in one job (a split expert's CPU rows, ExpertMats::hidden_rows: gate's and up's
// first rows, down's first columns, so gate and up do not lie back to back and each expert has
// its own width): each part's y and h are bit for bit what it gives alone, beside whole experts,
// the parts' h packed one after another; and the two parts of an expert sum to its whole y
// within float rounding (each hidden unit's SwiGLU is its own).
TEST(Int8Expert, PartsOfExpertsInOneJobEachEqualItselfAloneAndSumToTheWhole) {
    auto rng = bgtest::fresh_rng();
    constexpr int64_t E = 512, F = 256;
    for (const cpu::CpuIsa isa : {cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512}) {
        if (!cpu::cpu_isa_usable(isa)) continue;
        for (const int threads : {1, 3}) {
            cpu::ThreadPool pool(threads);
            cpu::Int8MatmulScratch alone_scratch, job_scratch;
            std::vector<bgtest::HostMat> gu_w, down_w;
            std::vector<ExpertMats> whole;
            for (const GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::MXFP4}) {
                gu_w.push_back(bgtest::random_mat(t, 2 * F, E, 0, rng));
                down_w.push_back(bgtest::random_mat(t, E, F, 0, rng));
            }
            for (size_t i = 0; i < gu_w.size(); ++i) {
                const MatView gate_up{gu_w[i].bytes.data(), gu_w[i].type, E, 2 * F, gu_w[i].stride};
                whole.push_back({gate_up.slice_rows(0, F), gate_up.slice_rows(F, F),
                                 MatView{down_w[i].bytes.data(), down_w[i].type, F, E, down_w[i].stride}});
            }
            // Expert 0 split at 96 rows (both parts in the job), expert 1 whole, expert 2's first 160.
            const std::vector<ExpertMats> parts = {whole[0].hidden_rows(0, 96), whole[1], whole[2].hidden_rows(0, 160),
                                                   whole[0].hidden_rows(96, F - 96)};
            const std::vector<int64_t> ms = {1, 2, 1, 1};
            const int64_t n = static_cast<int64_t>(parts.size());
            std::vector<cpu::Int8Expert> experts;
            int64_t m_all = 0, hidden_all = 0;
            for (int64_t i = 0; i < n; ++i) {
                experts.push_back({parts[i].gate, parts[i].up, parts[i].down, ms[i]});
                m_all += ms[i];
                hidden_all += ms[i] * parts[i].gate.rows;
            }
            // Expert 0's parts see the same token (rows 0 and 4 of x alike).
            const int64_t ldx = E + 3;
            std::vector<float> x = bgtest::uniform(rng, m_all * ldx, -1.0f, 1.0f);
            std::copy(x.begin(), x.begin() + E, x.begin() + 4 * ldx);
            const float limit = 7.0f;
            std::vector<float> gu(static_cast<size_t>(2 * hidden_all)), h(static_cast<size_t>(hidden_all), std::nanf(""));
            std::vector<float> y(static_cast<size_t>(m_all * E), std::nanf(""));
            cpu::experts_ffn_int8(pool, job_scratch, experts.data(), n, x.data(), ldx, limit, SwigluClamp::kDeepSeek,
                                  gu.data(), h.data(), y.data(), isa);
            for (int64_t i = 0, t = 0, u = 0; i < n; t += ms[i], u += ms[i] * parts[i].gate.rows, ++i) {
                const int64_t m = ms[i], Fi = parts[i].gate.rows;
                std::vector<float> gu1(static_cast<size_t>(m * 2 * Fi)), h1(static_cast<size_t>(m * Fi));
                std::vector<float> y1(static_cast<size_t>(m * E), std::nanf(""));
                cpu::expert_ffn_int8(pool, alone_scratch, experts[i], x.data() + t * ldx, ldx, limit, SwigluClamp::kDeepSeek,
                                     gu1.data(), h1.data(), y1.data(), isa);
                ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + t * E, y1.size() * sizeof(float)))
                    << cpu::cpu_isa_name(isa) << " threads " << threads << " part " << i;
                ASSERT_EQ(0, std::memcmp(h1.data(), h.data() + u, h1.size() * sizeof(float)))
                    << cpu::cpu_isa_name(isa) << " threads " << threads << " part " << i;
            }
            // Expert 0 whole against its two parts (rows 0 and 4 of y) summed.
            std::vector<float> gu0(static_cast<size_t>(2 * F)), h0(static_cast<size_t>(F)), y0(static_cast<size_t>(E));
            cpu::expert_ffn_int8(pool, alone_scratch, {whole[0].gate, whole[0].up, whole[0].down, 1}, x.data(), ldx, limit,
                                 SwigluClamp::kDeepSeek, gu0.data(), h0.data(), y0.data(), isa);
            double worst = 0, scale = 0;
            for (int64_t c = 0; c < E; ++c) scale = std::max(scale, static_cast<double>(std::fabs(y0[c])));
            for (int64_t c = 0; c < E; ++c)
                worst = std::max(worst, std::fabs(static_cast<double>(y[c]) + y[4 * E + c] - y0[c]) / scale);
            EXPECT_LT(worst, 1e-5) << cpu::cpu_isa_name(isa);
        }
    }
}

// The CPU Ops' expert batch (a decode layer's CPU experts in one call): every call's output rows,
// gathered tokens and scattered rows, bit for bit what expert_ffn writes for it alone, whichever
// go together: integer-path experts in slot layout (runs cut where the scratch or the job's 16
// experts are full), a BF16 one and one whose up rows do not follow its gate rows (each alone);
// rows no call writes keep their values.
TEST(CpuOps, ExpertBatchGivesEachCallsRowsAsAloneBitForBit) {
    auto rng = bgtest::fresh_rng();
    constexpr int64_t E = 256, F = 128, T = 12, kRows = 64;
    OpsLimits lim;
    lim.max_tok = 4;
    lim.expert_max_tok = 4;
    lim.expert_batch_tok = 9;
    lim.n_embd = E;
    lim.n_ff = F;
    for (const GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::BF16}) lim.matmul.add_expert(t, t, t, E, F);
    cpu::ThreadPool pool(3);
    std::unique_ptr<Ops> batch_ops = cpu::make_cpu_ops(pool), alone_ops = cpu::make_cpu_ops(pool);
    batch_ops->reserve(lim);
    alone_ops->reserve(lim);
    const std::vector<int64_t> ms{1, 2, 1, 4, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1};
    const int64_t n = static_cast<int64_t>(ms.size());
    std::vector<bgtest::HostMat> gu_w, down_w, apart_up;
    for (int64_t i = 0; i < n; ++i) {
        const GgmlType ty = i == 5 ? GgmlType::BF16 : i % 2 ? GgmlType::Q8_0 : GgmlType::MXFP4;
        gu_w.push_back(bgtest::random_mat(ty, 2 * F, E, 0, rng));
        down_w.push_back(bgtest::random_mat(ty, E, F, 0, rng));
    }
    apart_up.push_back(bgtest::random_mat(GgmlType::MXFP4, F, E, 0, rng));
    std::vector<ExpertCall> calls(static_cast<size_t>(n));
    std::vector<int32_t> rows, out_rows(static_cast<size_t>(kRows));
    std::iota(out_rows.begin(), out_rows.end(), 0);
    std::shuffle(out_rows.begin(), out_rows.end(), rng);
    std::uniform_int_distribution<int32_t> tok(0, T - 1);
    int64_t used = 0;
    for (int64_t i = 0; i < n; ++i) used += ms[i];
    rows.resize(static_cast<size_t>(used));
    for (auto& r : rows) r = tok(rng);
    for (int64_t i = 0, at = 0; i < n; at += ms[i++]) {
        const bgtest::HostMat& g = gu_w[i];
        const MatView gate{g.bytes.data(), g.type, E, F, g.stride};
        MatView up{g.bytes.data() + F * g.stride, g.type, E, F, g.stride};
        if (i == 8) up = MatView{apart_up[0].bytes.data(), apart_up[0].type, E, F, apart_up[0].stride};
        const MatView down{down_w[i].bytes.data(), down_w[i].type, F, E, down_w[i].stride};
        calls[i] = {{gate, up, down}, rows.data() + at, ms[i], out_rows.data() + at};
    }
    const std::vector<float> x = bgtest::uniform(rng, T * (E + 1), -1.0f, 1.0f);
    const std::vector<float> out0 = bgtest::uniform(rng, kRows * E, -1.0f, 1.0f);
    std::vector<float> got = out0, want = out0;
    batch_ops->expert_ffn_batch(calls.data(), n, x.data(), E + 1, 6.0f, SwigluClamp::kDeepSeek, got.data());
    for (const ExpertCall& c : calls)
        alone_ops->expert_ffn(c.mats, x.data(), E + 1, c.rows, c.m, 6.0f, SwigluClamp::kDeepSeek, want.data(), c.out_rows);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
    // Every call wrote its rows (the untouched ones still hold out0).
    int64_t changed = 0;
    for (int64_t r = 0; r < kRows; ++r) changed += std::memcmp(&got[r * E], &out0[r * E], E * sizeof(float)) != 0;
    EXPECT_EQ(changed, used);
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
