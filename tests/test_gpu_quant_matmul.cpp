// The fused quantized kernels of engine/cuda/quant_matmul.cuh against float64 references on
// fresh random inputs (each test prints its seed): weights dequantised with the CPU's exact
// dequantize_row, sums in double. Metric: ||out - ref|| / ||ref|| over every output, held to
// the tolerance of the path (quant_matmul.cuh's numerical contract). Split activations (the
// default: x as hi + lo, two FP16/BF16 roundings, exact weights, FP32 sums):
//   MXFP4, Q8_0 weights (hi + lo FP16, ~2^-22 per activation):          5e-5   (expected ~1e-6..1e-5,
//                                                                               the FP32 sums)
//   BF16 weights (hi + lo BF16, ~2^-16 per activation):                 1e-4   (expected ~1e-5)
//   expert FFN, MXFP4/Q8_0 (x and h split):                              1e-4
//   expert FFN, BF16:                                                    3e-4
// One rounding (set_split_activations(false), the benchmarks' other variant; cases "_single"):
//   MXFP4, Q8_0 weights (FP16 activations):                             1e-3   (expected ~2e-4)
//   BF16 weights (BF16 activations):                                    6e-3   (expected ~1.5e-3)
//   expert FFN, MXFP4/Q8_0 (x and h rounded to FP16):                    2e-3   (expected ~4e-4)
//   expert FFN, BF16:                                                    1.2e-2 (expected ~3e-3)
// Outputs are poisoned (NaN) before each run; every output must be written, finite, and nothing
// outside the outputs (row padding, rows no token of the expert writes) may change. Each case
// runs twice on the same inputs and the two outputs must be bit-identical (the split-K sums are
// reduced in a fixed order; SPEC section 3 needs identical tokens whatever the tier state).
// Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "cuda/check.cuh"
#include "cuda/dequant.cuh"
#include "cuda/quant_matmul.cuh"
#include "device_buffer.h"
#include "device_mat.h"
#include "random_inputs.h"
#include "random_weights.h"
#include "tensor/ggml_types.h"

using namespace bg;

namespace {

using bgtest::fresh_rng;

using bgtest::Dev;
using bgtest::DevMat;
using bgtest::HostMat;
using bgtest::random_mat;
using bgtest::ref_matmul;
using bgtest::swiglu_ref;
using bgtest::Cmp;
using bgtest::compare;

constexpr float kTolQuant = 5e-5f;   // MXFP4, Q8_0
constexpr float kTolBf16 = 1e-4f;    // BF16
constexpr float kTolFfnQuant = 1e-4f;
constexpr float kTolFfnBf16 = 3e-4f;
constexpr float kTolQuantSingle = 1e-3f;
constexpr float kTolBf16Single = 6e-3f;
constexpr float kTolFfnQuantSingle = 2e-3f;
constexpr float kTolFfnBf16Single = 1.2e-2f;

float tol_matmul(GgmlType t, bool single) {
    if (single) return t == GgmlType::BF16 ? kTolBf16Single : kTolQuantSingle;
    return t == GgmlType::BF16 ? kTolBf16 : kTolQuant;
}
float tol_ffn(GgmlType t, bool single) {
    if (single) return t == GgmlType::BF16 ? kTolFfnBf16Single : kTolFfnQuantSingle;
    return t == GgmlType::BF16 ? kTolFfnBf16 : kTolFfnQuant;
}

// ---------------------------------------------------------------------------------------------
// quant_matmul

// Which MXFP4 decode this GPU runs (informational: both are tested where both are available).
TEST(QuantMatmulDecode, ReportsMxfp4Decode) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cuda::QuantMatmulWorkspace ws(32, 0);
    std::printf("  FP16 subnormals kept by the tensor cores: %s; MXFP4 decode: %s\n",
                ws.fp16_subnormals_in_mma() ? "yes" : "NO", ws.mxfp4_bit_decode() ? "bit placement" : "table");
    if (!ws.fp16_subnormals_in_mma())
        std::printf("  (the bit decode is off on this GPU; every MXFP4 case below runs the table decode)\n");
}

struct MatCase {
    GgmlType type;
    int64_t rows, cols, M;
    uint64_t pad = 0;  // extra bytes per row (row_stride = row bytes + pad)
    int offset = 0;    // byte offset of W.data from a 16-byte boundary
    int split = 0;     // 0: heuristic, n: forced split-K
    bool lut = false;  // MXFP4: force the table decode (default: the bit decode where the GPU allows)
    bool single = false;  // one activation rounding (split activations off)
    bool sm86 = false;    // sm_86's tile shapes (99 KB of shared memory), whatever the GPU
    int tiles = 0;        // QuantMatmulWorkspace::set_tile_variant (the benchmarks' alternatives)
};

std::string case_name(const MatCase& c) {
    std::ostringstream s;
    s << type_name(c.type) << "_r" << c.rows << "_c" << c.cols << "_M" << c.M;
    if (c.pad) s << "_pad" << c.pad;
    if (c.offset) s << "_off" << c.offset;
    if (c.split) s << "_split" << c.split;
    if (c.lut) s << "_lut";
    if (c.single) s << "_single";
    if (c.sm86) s << "_sm86tiles";
    if (c.tiles) s << "_tiles" << c.tiles;
    return s.str();
}

class QuantMatmul : public ::testing::TestWithParam<MatCase> {};

TEST_P(QuantMatmul, MatchesFloat64Reference) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: quant_matmul not tested";
    const MatCase c = GetParam();
    auto rng = fresh_rng();
    const HostMat W = random_mat(c.type, c.rows, c.cols, c.pad, rng);
    const int64_t ldx = c.cols + 3, ldy = c.rows + 5;  // strided activations and outputs
    const std::vector<float> x = bgtest::uniform(rng, c.M * ldx, -1.0f, 1.0f);
    DevMat dW(W, c.offset);
    Dev<float> dx(x);
    Dev<float> dy(static_cast<size_t>(c.M * ldy));
    cuda::QuantMatmulWorkspace ws(c.cols, 0);
    ws.force_split(c.split);
    if (c.lut) ws.set_mxfp4_bit_decode(false);
    if (c.single) ws.set_split_activations(false);
    if (c.sm86) ws.set_small_shared_memory(true);
    ws.set_tile_variant(c.tiles);
    const float tol = tol_matmul(c.type, c.single);
    const std::vector<double> ref = ref_matmul(W, x, ldx, c.M);

    // Twice: the second run shows a race, a workspace left dirty by the first, or a sum whose
    // order changed (the outputs must be bit-identical).
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
        BG_CUDA_CHECK(cudaMemset(dy.get(), 0xff, c.M * ldy * sizeof(float)));  // NaN
        cuda::quant_matmul(ws, dW.view, dx.get(), ldx, c.M, dy.get(), ldy, nullptr);
        BG_CUDA_CHECK(cudaGetLastError());
        BG_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> yall = dy.download();
        if (run == 0) {
            first = yall;
        } else {
            ASSERT_EQ(std::memcmp(first.data(), yall.data(), yall.size() * sizeof(float)), 0)
                << "run 1 differs from run 0 in some bit: the kernel is not deterministic";
        }
        std::vector<float> out(static_cast<size_t>(c.M * c.rows));
        for (int64_t t = 0; t < c.M; ++t) {
            for (int64_t r = 0; r < c.rows; ++r) out[t * c.rows + r] = yall[t * ldy + r];
            for (int64_t r = c.rows; r < ldy; ++r) {
                uint32_t bits;
                std::memcpy(&bits, &yall[t * ldy + r], 4);
                ASSERT_EQ(bits, 0xffffffffu) << "run " << run << ": wrote y[" << t << "][" << r
                                             << "], past the " << c.rows << " outputs of the row";
            }
        }
        const Cmp cmp = compare(out, ref);
        ASSERT_LT(cmp.bad, 0) << "run " << run << ": output [token " << cmp.bad / c.rows << "][row "
                              << cmp.bad % c.rows << "] not written or not finite (" << out[cmp.bad] << ")";
        EXPECT_LE(cmp.rel, tol)
            << "run " << run << ": ||out-ref||/||ref|| = " << cmp.rel << " over tolerance " << tol
            << " (||ref|| = " << cmp.ref_norm << ")";
        std::printf("  %s run %d: rel err %.3g (tolerance %.3g)\n", case_name(c).c_str(), run, cmp.rel, tol);
    }
}

std::vector<MatCase> matmul_cases() {
    std::vector<MatCase> v;
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::BF16}) {
        // Odd sizes: rows not a multiple of any tile, cols a few blocks, not a power of two.
        for (int64_t M : {1, 2, 3, 16, 17, 64, 100}) v.push_back({t, 77, 224, M});
        for (int64_t M : {1, 3, 16, 64}) v.push_back({t, 300, 1440, M});
        // Full-width shapes: an expert's gate/up (2304 x 5120) and down (5120 x 2304).
        for (int64_t M : {1, 3, 64}) v.push_back({t, 2304, 5120, M});
        for (int64_t M : {1, 16}) v.push_back({t, 5120, 2304, M});
        // Odd row strides and an unaligned base (byte-copy fallback); forced split-K 1 and 5.
        const uint64_t pad = t == GgmlType::BF16 ? 6 : 5;
        const int off = t == GgmlType::BF16 ? 2 : 3;
        for (int64_t M : {1, 3, 17, 64}) v.push_back({t, 150, 1440, M, pad, 0, 0});
        for (int64_t M : {2, 40}) v.push_back({t, 150, 1440, M, pad, off, 0});
        for (int64_t M : {1, 16, 64}) {
            v.push_back({t, 300, 1440, M, 0, 0, 1});
            v.push_back({t, 300, 1440, M, 0, 0, 5});
        }
    }
    // The MXFP4 table decode (the bit decode is the default where the GPU keeps FP16 subnormals).
    for (int64_t M : {1, 3, 17, 64}) v.push_back({GgmlType::MXFP4, 300, 1440, M, 0, 0, 0, true});
    v.push_back({GgmlType::MXFP4, 150, 1440, 2, 5, 3, 0, true});
    v.push_back({GgmlType::MXFP4, 2304, 5120, 1, 0, 0, 0, true});
    // One activation rounding (split activations off), every type, every tile shape, split-K.
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::BF16})
        for (int64_t M : {1, 9, 17, 40, 100}) v.push_back({t, 300, 1440, M, 0, 0, 0, false, true});
    v.push_back({GgmlType::Q8_0, 300, 1440, 64, 0, 0, 5, false, true});
    // The RTX 3060's tiles (two stages of the 256-row tiles: 17-64 tokens) on whatever GPU runs
    // the test, every type, split activations and one rounding.
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::BF16})
        for (int64_t M : {17, 40, 64})
            for (bool single : {false, true}) v.push_back({t, 300, 1440, M, 0, 0, 0, false, single, true});
    v.push_back({GgmlType::MXFP4, 2304, 5120, 64, 0, 0, 0, false, false, true});
    // The alternative tiles bench_gpu compares (1-16 tokens), every type; the default's choice by
    // rows at 9-16 tokens (4 stages under 4096 rows, 2 from there) is in the full-width cases.
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::BF16})
        for (int tiles = 1; tiles < cuda::QuantMatmulWorkspace::kTileVariants; ++tiles)
            for (int64_t M : {1, 6, 16}) {
                MatCase c{t, 300, 1440, M};
                c.tiles = tiles;
                v.push_back(c);
            }
    return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantMatmul, ::testing::ValuesIn(matmul_cases()),
                         [](const auto& info) { return case_name(info.param); });

// ---------------------------------------------------------------------------------------------
// expert_ffn

struct FfnCase {
    GgmlType type;
    int64_t n_embd, n_ff, M;
    float limit;
    bg::SwigluClamp form;
    bool gathered = true;  // tokens gathered from a larger x through rows[], outputs to out_rows[]
    int split = 0;
    bool lut = false;
    bool single = false;  // one activation rounding (split activations off)
    bool sm86 = false;    // sm_86's tile shapes, whatever the GPU
};

std::string ffn_name(const FfnCase& c) {
    std::ostringstream s;
    s << type_name(c.type) << "_E" << c.n_embd << "_F" << c.n_ff << "_M" << c.M << "_lim"
      << static_cast<int>(c.limit * 100) << (c.form == bg::SwigluClamp::kLlamaCpp ? "_llama" : "_deepseek")
      << (c.gathered ? "_gathered" : "_dense");
    if (c.split) s << "_split" << c.split;
    if (c.lut) s << "_lut";
    if (c.single) s << "_single";
    if (c.sm86) s << "_sm86tiles";
    return s.str();
}

class ExpertFfn : public ::testing::TestWithParam<FfnCase> {};

TEST_P(ExpertFfn, MatchesFloat64Reference) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: expert_ffn not tested";
    const FfnCase c = GetParam();
    auto rng = fresh_rng();
    const int64_t E = c.n_embd, F = c.n_ff;
    const HostMat gate = random_mat(c.type, F, E, 0, rng);
    const HostMat up = random_mat(c.type, F, E, 0, rng);
    const HostMat down = random_mat(c.type, E, F, 0, rng);
    const bgtest::ExpertTokens tk = bgtest::expert_tokens(E, c.M, c.gathered, rng);
    const int64_t T = tk.T, ldx = tk.ldx, ldy = tk.ldy;
    const std::vector<float>& x = tk.x;
    const std::vector<float>& y0 = tk.y0;
    const std::vector<int32_t>& rows = tk.rows;
    const std::vector<int32_t>& out_rows = tk.out_rows;

    // float64 reference of the rows written.
    std::vector<double> want_row(static_cast<size_t>(T * E), 0.0);
    std::vector<double> h(static_cast<size_t>(F));
    double max_pre = 0;
    for (int64_t j = 0; j < c.M; ++j) {
        const float* xt = x.data() + rows[j] * ldx;
        for (int64_t f = 0; f < F; ++f) {
            double g = 0, u = 0;
            const float* wg = gate.deq.data() + f * E;
            const float* wu = up.deq.data() + f * E;
            for (int64_t i = 0; i < E; ++i) {
                g += static_cast<double>(wg[i]) * xt[i];
                u += static_cast<double>(wu[i]) * xt[i];
            }
            max_pre = std::max({max_pre, std::fabs(g), std::fabs(u)});
            h[f] = swiglu_ref(g, u, c.limit, c.form);
        }
        for (int64_t e = 0; e < E; ++e) {
            const float* wd = down.deq.data() + e * F;
            double s = 0;
            for (int64_t f = 0; f < F; ++f) s += static_cast<double>(wd[f]) * h[f];
            want_row[out_rows[j] * E + e] = s;
        }
    }

    DevMat dg(gate, 0), du(up, 0), dd(down, 0);
    Dev<float> dx(x), dy(y0.size());
    Dev<int32_t> drows(rows), dout(out_rows);
    cuda::QuantMatmulWorkspace ws(std::max(E, F), F);
    ws.force_split(c.split);
    if (c.lut) ws.set_mxfp4_bit_decode(false);
    if (c.single) ws.set_split_activations(false);
    if (c.sm86) ws.set_small_shared_memory(true);
    const float tol = tol_ffn(c.type, c.single);
    const ExpertMats mats{dg.view, du.view, dd.view};
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
        dy.upload(y0);
        cuda::expert_ffn(ws, mats, dx.get(), ldx, c.gathered ? drows.get() : nullptr, c.M, c.limit, c.form, dy.get(),
                         ldy, c.gathered ? dout.get() : nullptr, nullptr);
        BG_CUDA_CHECK(cudaGetLastError());
        BG_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> y = dy.download();
        if (run == 0) {
            first = y;
        } else {
            ASSERT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0)
                << "run 1 differs from run 0 in some bit: the expert FFN is not deterministic";
        }
        std::vector<bool> written(static_cast<size_t>(T), false);
        for (int32_t r : out_rows) written[r] = true;
        std::vector<float> got;
        std::vector<double> want;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t e = 0; e < ldy; ++e) {
                const float v = y[t * ldy + e], v0 = y0[t * ldy + e];
                if (!written[t] || e >= E) {
                    ASSERT_EQ(std::memcmp(&v, &v0, 4), 0)
                        << "run " << run << ": y[" << t << "][" << e << "] changed (" << v0 << " -> " << v
                        << ") though " << (e >= E ? "past the row" : "no token of the expert writes that row");
                    continue;
                }
                got.push_back(v);
                want.push_back(want_row[t * E + e]);
            }
        const Cmp cmp = compare(got, want);
        ASSERT_LT(cmp.bad, 0) << "run " << run << ": a routed output is not finite";
        EXPECT_LE(cmp.rel, tol)
            << "run " << run << ": ||y-ref||/||ref|| = " << cmp.rel << " over tolerance " << tol
            << " (||ref|| = " << cmp.ref_norm << ", largest |gate|,|up| " << max_pre << ", limit " << c.limit << ")";
        std::printf("  %s run %d: rel err %.3g (tolerance %.3g; largest |gate|,|up| %.3g)\n", ffn_name(c).c_str(), run,
                    cmp.rel, tol, max_pre);
    }
}

std::vector<FfnCase> ffn_cases() {
    using bg::SwigluClamp;
    std::vector<FfnCase> v;
    // Full width (the real expert: 5120 x 2304, MXFP4), both clamp forms; limits 10 (the
    // model's) and 0.5 (clamps often on these inputs).
    for (int64_t M : {1, 3, 16, 64}) v.push_back({GgmlType::MXFP4, 5120, 2304, M, 10.0f, SwigluClamp::kDeepSeek});
    v.push_back({GgmlType::MXFP4, 5120, 2304, 2, 0.5f, SwigluClamp::kLlamaCpp});
    v.push_back({GgmlType::MXFP4, 5120, 2304, 17, 0.5f, SwigluClamp::kDeepSeek});
    v.push_back({GgmlType::MXFP4, 5120, 2304, 1, 10.0f, SwigluClamp::kDeepSeek, true, 0, true});
    v.push_back({GgmlType::MXFP4, 5120, 2304, 64, 10.0f, SwigluClamp::kDeepSeek, true, 0, true});
    // Odd sizes, every type, both forms, no clamp, dense token lists, forced splits, > 64 tokens.
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::BF16}) {
        for (int64_t M : {1, 2, 3, 16, 17, 64}) {
            v.push_back({t, 352, 224, M, 0.5f, SwigluClamp::kDeepSeek});
            v.push_back({t, 352, 224, M, 0.5f, SwigluClamp::kLlamaCpp});
        }
        v.push_back({t, 352, 224, 5, 0.0f, SwigluClamp::kDeepSeek});
        v.push_back({t, 352, 224, 9, 0.5f, SwigluClamp::kDeepSeek, false});
        v.push_back({t, 352, 224, 130, 0.5f, SwigluClamp::kLlamaCpp});
        for (int s : {1, 4}) {
            v.push_back({t, 1024, 768, 3, 0.5f, SwigluClamp::kDeepSeek, true, s});
            v.push_back({t, 1024, 768, 40, 0.5f, SwigluClamp::kDeepSeek, true, s});
        }
        v.push_back({t, 1024, 768, 64, 10.0f, SwigluClamp::kDeepSeek});
        for (int64_t M : {1, 5, 40, 70})
            v.push_back({t, 352, 224, M, 0.5f, SwigluClamp::kDeepSeek, true, 0, false, true});
        // The RTX 3060's tiles on whatever GPU runs the test.
        for (int64_t M : {20, 64})
            for (bool single : {false, true})
                v.push_back({t, 352, 224, M, 0.5f, SwigluClamp::kDeepSeek, true, 0, false, single, true});
    }
    v.push_back({GgmlType::MXFP4, 5120, 2304, 64, 10.0f, SwigluClamp::kDeepSeek, true, 0, false, false, true});
    return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, ExpertFfn, ::testing::ValuesIn(ffn_cases()),
                         [](const auto& info) { return ffn_name(info.param); });

}  // namespace
