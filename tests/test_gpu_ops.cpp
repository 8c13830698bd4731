// Every CUDA op of engine/cuda/ops.cuh against the CPU code it mirrors (engine/cpu/ops.h,
// bg::route, or the loop of Forward that it replaces), on fresh random inputs; each test prints
// its seed. Tolerances are stated per op: float results are held to a bound on their rounding
// error (relative to the magnitude of the terms summed where the GPU sums in another order),
// ids, indices, top-k lists and routing choices must be equal. Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "argmax_cases.h"
#include "device_buffer.h"
#include "random_inputs.h"
#include "random_weights.h"
#include "cuda/check.cuh"
#include "cuda/dequant.cuh"
#include "cuda/ops.cuh"
#include "cpu/routing.h"
#include "tensor/ggml_types.h"

using namespace bg;

namespace {

using bgtest::fresh_rng;
using bgtest::uniform;

std::vector<float> normal(std::mt19937& rng, int64_t n, float sigma) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(rng);
    return v;
}

using bgtest::Dev;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

class GpuTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        BG_CUDA_CHECK(cudaStreamCreate(&stream_));
        rng_ = fresh_rng();
    }
    void TearDown() override {
        if (stream_) cudaStreamDestroy(stream_);
    }
    void sync() { BG_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

    cudaStream_t stream_ = nullptr;
    std::mt19937 rng_;
};

// ---------------------------------------------------------------------------------------------
// matmul: tolerance 2e-6 of sum_i |W[r][i] x[t][i]| per output. Both sides sum in float with
// errors of a few ulps of that sum; TF32 (10-bit mantissas) would miss it by an order of
// magnitude, so this also proves cuBLAS runs in full FP32.

struct MatCase {
    int64_t rows, cols;
    uint64_t pad;        // bytes between rows beyond the dense row (odd: unaligned F32 rows)
    uint64_t scratch;    // MatmulContext scratch bytes
    int64_t slice0 = 0;  // multiply rows [slice0, slice0 + slice_n) of the matrix (slice_n 0: all)
    int64_t slice_n = 0;
};

class GpuMatmul : public GpuTest, public ::testing::WithParamInterface<GgmlType> {};

TEST_P(GpuMatmul, MatchesCpuAtEveryBatchSize) {
    const GgmlType type = GetParam();
    cpu::ThreadPool pool(2);
    const MatCase cases[] = {
        {300, 256, 0, cuda::MatmulContext::kDefaultScratchBytes},
        // 1 MB of F32 weights through a 64 KiB scratch: 20-row chunks, the last one 13 rows.
        {333, 800, 0, 64 * 1024},
        // Padded rows (F32 rows then 2-byte aligned: the dequantising path), 21-row chunks.
        {97, 96, 6, 8 * 1024},
        {1, 32, 0, 4 * 1024},
        // A slice of rows, as the grouped output projection takes (data pointer moved).
        {160, 128, 0, 16 * 1024, 37, 101},
    };
    std::vector<MatCase> all(std::begin(cases), std::end(cases));
    if (type_traits(type).block_elems == 256) {
        // The 256-weight types: rows of whole 256-blocks, the same chunkings and an odd row pad
        // (blocks at odd addresses: every load a byte load).
        all = {{300, 256, 0, cuda::MatmulContext::kDefaultScratchBytes},
               {333, 768, 0, 64 * 1024},
               {97, 512, 5, 8 * 1024},
               {1, 256, 0, 4 * 1024},
               {160, 256, 0, 16 * 1024, 37, 101}};
    }
    if (type_traits(type).block_elems == 1) {
        // Rows of 50 (not a multiple of 4: the one-element-per-thread dequantiser), 10-row
        // chunks, and F32 rows 2-byte aligned.
        all.push_back({45, 50, 2, 2 * 1024});
        // A decode router's shape (384 x 5120 F32: for up to 4 tokens the GEMV kernel).
        all.push_back({384, 5120, 0, cuda::MatmulContext::kDefaultScratchBytes});
    }
    for (const MatCase& mc : all) {
        const uint64_t stride = row_bytes(type, mc.cols) + mc.pad;
        std::vector<uint8_t> wq(stride * mc.rows, 0);
        std::vector<float> wd(static_cast<size_t>(mc.rows * mc.cols));  // dequantised, [rows][cols]
        for (int64_t r = 0; r < mc.rows; ++r) {
            const std::vector<float> row = normal(rng_, mc.cols, 1.0f);
            quantize_row(type, row.data(), wq.data() + r * stride, mc.cols);
            dequantize_row(type, wq.data() + r * stride, &wd[r * mc.cols], mc.cols);
        }
        Dev<uint8_t> d_w(wq);
        bg::MatView hv{wq.data(), type, mc.cols, mc.rows, stride};
        cuda::DeviceMat dv{d_w.get(), type, mc.cols, mc.rows, stride};
        int64_t r_first = 0;
        if (mc.slice_n > 0) {
            hv = hv.slice_rows(mc.slice0, mc.slice_n);
            dv = dv.slice_rows(mc.slice0, mc.slice_n);
            r_first = mc.slice0;
        }
        cuda::MatmulContext ctx(mc.scratch);
        for (int64_t n_tok : {1, 2, 3, 4, 5, 16, 64}) {
            const int64_t ldx = mc.cols + 5, ldy = hv.rows + 3;
            const std::vector<float> x = uniform(rng_, n_tok * ldx, -1.0f, 1.0f);
            const float sentinel = 12345.0f;
            std::vector<float> want(static_cast<size_t>(n_tok * ldy), sentinel);
            cpu::matmul(pool, hv, x.data(), ldx, n_tok, want.data(), ldy);
            Dev<float> d_x(x);
            Dev<float> d_y(std::vector<float>(want.size(), sentinel));
            cuda::matmul(ctx, dv, d_x.get(), ldx, n_tok, d_y.get(), ldy, stream_);
            sync();
            const std::vector<float> got = d_y.download();
            double worst = 0;
            for (int64_t t = 0; t < n_tok; ++t) {
                for (int64_t r = 0; r < hv.rows; ++r) {
                    double abs_sum = 0;
                    for (int64_t i = 0; i < mc.cols; ++i)
                        abs_sum += std::fabs(static_cast<double>(wd[(r_first + r) * mc.cols + i]) * x[t * ldx + i]);
                    const double err = std::fabs(static_cast<double>(got[t * ldy + r]) - want[t * ldy + r]);
                    worst = std::max(worst, err / (abs_sum + 1e-30));
                    ASSERT_LE(err, 2e-6 * abs_sum + 1e-30)
                        << type_name(type) << " rows " << mc.rows << " cols " << mc.cols << " n_tok " << n_tok
                        << " t " << t << " r " << r << ": cpu " << want[t * ldy + r] << " gpu " << got[t * ldy + r];
                }
                for (int64_t r = hv.rows; r < ldy; ++r) ASSERT_EQ(got[t * ldy + r], sentinel) << "wrote past the rows";
            }
            std::printf("  %s %lldx%lld n_tok %lld: worst error / abs sum %.2e\n", type_name(type),
                        (long long)hv.rows, (long long)mc.cols, (long long)n_tok, worst);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuMatmul,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                           GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// Arbitrary finite encodings of one row, not only what quantize_row writes: denormals, every
// E2M1 code (-0 included) and every E8M0 scale (255 overflows to inf on both sides).
void random_row_bits(GgmlType type, int64_t cols, std::mt19937& rng, uint8_t* out) {
    std::uniform_int_distribution<uint32_t> bits;
    const auto finite16 = [&](uint16_t exp_mask) {
        uint16_t h;
        do h = static_cast<uint16_t>(bits(rng));
        while ((h & exp_mask) == exp_mask);
        return h;
    };
    const uint64_t n = row_bytes(type, cols);
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(bits(rng));
    switch (type) {
        case GgmlType::F32:
            for (int64_t i = 0; i < cols; ++i) {
                uint32_t u;
                do u = bits(rng);
                while ((u & 0x7F800000u) == 0x7F800000u);
                std::memcpy(out + 4 * i, &u, 4);
            }
            break;
        case GgmlType::F16:
        case GgmlType::BF16:
            for (int64_t i = 0; i < cols; ++i) {
                const uint16_t h = finite16(type == GgmlType::F16 ? 0x7C00 : 0x7F80);
                std::memcpy(out + 2 * i, &h, 2);
            }
            break;
        case GgmlType::Q8_0:
            for (int64_t b = 0; b < cols / 32; ++b) {
                const uint16_t d = finite16(0x7C00);
                std::memcpy(out + 34 * b, &d, 2);
            }
            break;
        case GgmlType::MXFP4: break;  // every byte pattern is a valid block
        default: {
            // The 256-weight types: every code and sub-scale pattern, finite FP16 super-scales.
            int off_d = -1, off_dmin = -1;
            bgtest::super_scale_offsets(type, &off_d, &off_dmin);
            for (int64_t b = 0; b < cols / 256; ++b)
                for (int off : {off_d, off_dmin}) {
                    if (off < 0) continue;
                    const uint16_t d = finite16(0x7C00);
                    std::memcpy(out + b * type_traits(type).block_bytes + off, &d, 2);
                }
            break;
        }
    }
}

// Embedding rows are decoded exactly: bit equality with dequantize_row, in all 4 copies.
class GpuEmbed : public GpuTest, public ::testing::WithParamInterface<GgmlType> {};

TEST_P(GpuEmbed, GathersExactRowsIntoFourCopies) {
    const GgmlType type = GetParam();
    const int64_t rows = 50, cols = type_traits(type).block_elems == 256 ? 512 : 96;
    for (uint64_t pad : {uint64_t{0}, uint64_t{6}}) {
        const uint64_t stride = row_bytes(type, cols) + pad;
        std::vector<uint8_t> emb(stride * rows, 0);
        for (int64_t r = 0; r < rows; ++r) {
            if (r % 2) {
                random_row_bits(type, cols, rng_, emb.data() + r * stride);
                continue;
            }
            const std::vector<float> row = normal(rng_, cols, 2.0f);
            quantize_row(type, row.data(), emb.data() + r * stride, cols);
        }
        std::uniform_int_distribution<int32_t> pick(0, rows - 1);
        std::vector<int32_t> tokens = {0, 1, static_cast<int32_t>(rows - 1)};
        for (int i = 0; i < 20; ++i) tokens.push_back(pick(rng_));
        tokens.push_back(-1);  // outside: must come out NaN
        const int64_t n = static_cast<int64_t>(tokens.size());
        Dev<uint8_t> d_emb(emb);
        Dev<int32_t> d_tok(tokens);
        Dev<float> d_h(static_cast<size_t>(n * 4 * cols));
        cuda::embed_tokens(cuda::DeviceMat{d_emb.get(), type, cols, rows, stride}, d_tok.get(), n, d_h.get(), stream_);
        sync();
        const std::vector<float> h = d_h.download();
        std::vector<float> want(static_cast<size_t>(cols));
        for (int64_t t = 0; t < n; ++t) {
            if (tokens[t] < 0) {
                for (int64_t i = 0; i < 4 * cols; ++i) ASSERT_TRUE(std::isnan(h[t * 4 * cols + i]));
                continue;
            }
            dequantize_row(type, emb.data() + tokens[t] * stride, want.data(), cols);
            for (int c = 0; c < 4; ++c)
                for (int64_t e = 0; e < cols; ++e)
                    ASSERT_TRUE(same_bits(h[(t * 4 + c) * cols + e], want[e]))
                        << type_name(type) << " token " << tokens[t] << " copy " << c << " elem " << e;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuEmbed,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                           GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// ---------------------------------------------------------------------------------------------
// Elementwise and per-row ops

TEST_F(GpuTest, FillPositionsExact) {
    Dev<int32_t> d(100);
    cuda::fill_positions(d.get(), 100, 37, 3, stream_);
    sync();
    const std::vector<int32_t> p = d.download();
    for (int i = 0; i < 100; ++i) ASSERT_EQ(p[i], 37 + 3 * i);
}

// argmax (a decode step's greedy token on the device): the host's choice over the logits with the
// banned ids set to -inf, exactly, in every case that decides (ties, NaN, -inf, bans, -0 beside
// +0, lengths around a block and a grid's reach), one word used by every call in turn (each
// leaves it 0 for the next).
TEST_F(GpuTest, ArgmaxIsTheHostsGreedyChoice) {
    Dev<unsigned long long> word(std::vector<unsigned long long>{0});
    std::vector<bgtest::ArgmaxCase> cases = bgtest::argmax_cases(rng_);
    {
        bgtest::ArgmaxCase c{"-0 before +0 at the max", std::vector<float>(5000, -1.0f), {}};
        c.x[1234] = -0.0f;
        c.x[4000] = 0.0f;
        cases.push_back(c);
    }
    for (const bgtest::ArgmaxCase& c : cases) {
        Dev<float> d_x(c.x);
        Dev<int32_t> d_out(1);
        cuda::argmax(d_x.get(), static_cast<int64_t>(c.x.size()), c.ban, word.get(), d_out.get(), stream_);
        sync();
        EXPECT_EQ(d_out.download()[0], bgtest::host_greedy(c)) << c.what;
        EXPECT_EQ(word.download()[0], 0u) << c.what << ": the word is left 0";
    }
}

// rmsnorm: each output within 1e-6 of itself (relative): the only difference is the order of the
// sum of squares, a relative error of a few ulps in the scale.
TEST_F(GpuTest, RmsNormMatchesCpu) {
    const int64_t n_rows = 6;
    for (int64_t n : {1, 5, 1000, 4098, 5120, 20480}) {
        for (bool weighted : {false, true}) {
            for (float eps : {1e-6f, 1e-20f}) {
                for (bool in_place : {false, true}) {
                    const std::vector<float> x = normal(rng_, n_rows * n, 3.0f);
                    const std::vector<float> w = uniform(rng_, n, 0.5f, 1.5f);
                    std::vector<float> want(x.size());
                    for (int64_t r = 0; r < n_rows; ++r)
                        cpu::rmsnorm(&x[r * n], weighted ? w.data() : nullptr, n, eps, &want[r * n]);
                    Dev<float> d_x(x), d_w(w), d_y(x.size());
                    float* y = in_place ? d_x.get() : d_y.get();
                    cuda::rmsnorm(d_x.get(), weighted ? d_w.get() : nullptr, n, n_rows, eps, y, stream_);
                    sync();
                    const std::vector<float> got = in_place ? d_x.download() : d_y.download();
                    for (size_t i = 0; i < got.size(); ++i)
                        ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6f * std::fabs(want[i]))
                            << "n " << n << " weighted " << weighted << " i " << i << ": cpu " << want[i] << " gpu "
                            << got[i];
                }
            }
        }
    }
}

// rope: the angle is computed in double on both sides, so each rotated pair is within
// 1e-6 * (|x0| + |x1|) (in practice equal); untouched values are bit-equal.
TEST_F(GpuTest, RopeMatchesCpu) {
    bg::RopeParams plain;
    plain.n_dims = 64;
    plain.freq_base = 10000.0f;
    bg::RopeParams yarn;
    yarn.n_dims = 32;
    yarn.freq_base = 160000.0f;
    yarn.yarn = true;
    yarn.factor = 16.0f;
    yarn.n_ctx_orig = 65536;
    yarn.beta_fast = 32.0f;
    yarn.beta_slow = 1.0f;
    struct Case {
        bg::RopeParams p;
        int64_t head_dim;
    };
    bg::RopeParams linear = plain;  // rope.scaling.type linear: every angle / factor
    linear.freq_base = 160000.0f;
    linear.factor = 16.0f;
    const Case cases[] = {{plain, 64}, {yarn, 96}, {yarn, 32}, {linear, 64}};
    const int64_t n_tok = 9, n_heads = 3;
    std::uniform_int_distribution<int32_t> pick(0, 1000000);
    for (const Case& c : cases) {
        for (bool inverse : {false, true}) {
            const int64_t stride = n_heads * c.head_dim + 7;
            std::vector<int32_t> pos = {0, 1, 65535, 1000000};
            while (static_cast<int64_t>(pos.size()) < n_tok) pos.push_back(pick(rng_));
            const std::vector<float> x = uniform(rng_, n_tok * stride, -2.0f, 2.0f);
            std::vector<float> want = x;
            for (int64_t t = 0; t < n_tok; ++t)
                for (int64_t h = 0; h < n_heads; ++h)
                    cpu::rope(&want[t * stride + h * c.head_dim + c.head_dim - c.p.n_dims], pos[t], c.p, inverse);
            Dev<float> d_x(x);
            Dev<int32_t> d_pos(pos);
            cuda::rope(d_x.get(), stride, n_tok, d_pos.get(), n_heads, c.head_dim, c.p, inverse, stream_);
            sync();
            const std::vector<float> got = d_x.download();
            for (int64_t t = 0; t < n_tok; ++t) {
                for (int64_t i = 0; i < stride; ++i) {
                    const size_t at = static_cast<size_t>(t * stride + i);
                    const int64_t in_head = i % c.head_dim;
                    const bool rotated = i < n_heads * c.head_dim && in_head >= c.head_dim - c.p.n_dims;
                    if (!rotated) {
                        ASSERT_TRUE(same_bits(got[at], x[at])) << "unrotated value changed at " << i;
                        continue;
                    }
                    const size_t pair = at - ((in_head - (c.head_dim - c.p.n_dims)) & 1);
                    const float mag = std::fabs(x[pair]) + std::fabs(x[pair + 1]);
                    ASSERT_LE(std::fabs(got[at] - want[at]), 1e-6f * mag)
                        << "yarn " << c.p.yarn << " inverse " << inverse << " pos " << pos[t] << " i " << i
                        << ": cpu " << want[at] << " gpu " << got[at];
                }
            }
        }
    }
}

// SwiGLU: within 2e-6 relative (expf differs from glibc's by at most 2 ulps), both clamp forms
// and the unclamped one, also with the output over the gate.
TEST_F(GpuTest, SwigluMatchesCpu) {
    const int64_t n = 100003;
    for (bg::SwigluClamp form : {bg::SwigluClamp::kDeepSeek, bg::SwigluClamp::kLlamaCpp}) {
        for (float limit : {10.0f, 0.0f, -1.0f}) {
            for (bool in_place : {false, true}) {
                const std::vector<float> g = uniform(rng_, n, -30.0f, 30.0f);
                const std::vector<float> u = uniform(rng_, n, -30.0f, 30.0f);
                std::vector<float> want(static_cast<size_t>(n));
                cpu::swiglu(g.data(), u.data(), n, limit, form, want.data());
                Dev<float> d_g(g), d_u(u), d_o(static_cast<size_t>(n));
                float* out = in_place ? d_g.get() : d_o.get();
                cuda::swiglu(d_g.get(), d_u.get(), n, limit, form, out, stream_);
                sync();
                const std::vector<float> got = in_place ? d_g.download() : d_o.download();
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_LE(std::fabs(got[i] - want[i]), 2e-6f * std::fabs(want[i]))
                        << "limit " << limit << " i " << i << " gate " << g[i] << " up " << u[i] << ": cpu " << want[i]
                        << " gpu " << got[i];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mHC and Engram

// hc_mix: all 24 outputs within 2e-6 (they lie in [0, 2]); only exp differs by ulps, and the
// Sinkhorn rounds do not amplify it.
TEST_F(GpuTest, HcMixMatchesCpu) {
    const int64_t n = 37;
    for (int n_iter : {20, 1}) {
        const std::vector<float> m = normal(rng_, n * 24, 2.0f);
        const std::vector<float> base = uniform(rng_, 24, -1.0f, 1.0f);
        const std::vector<float> scale = uniform(rng_, 3, 0.5f, 2.0f);
        const float eps = 1e-6f;
        Dev<float> d_m(m), d_base(base), d_scale(scale), d_mix(static_cast<size_t>(n * bg::kMixWidth));
        cuda::hc_mix(d_m.get(), d_base.get(), d_scale.get(), n, n_iter, eps, d_mix.get(), stream_);
        sync();
        const std::vector<float> got = d_mix.download();
        for (int64_t t = 0; t < n; ++t) {
            const bg::HcMix want = cpu::hc_mix(&m[t * 24], base.data(), scale.data(), n_iter, eps);
            float w24[24];
            std::memcpy(w24, &want, sizeof(w24));
            for (int i = 0; i < 24; ++i)
                ASSERT_NEAR(got[t * bg::kMixWidth + i], w24[i], 2e-6f) << "n_iter " << n_iter << " token " << t << " value " << i;
        }
    }
}

// Collapse and expand sum 4 terms in the CPU's order with the same roundings: within 1e-6 of
// the sum of the terms' magnitudes (in practice bit-equal).
TEST_F(GpuTest, HcCollapseAndExpandMatchForward) {
    const int64_t n = 5, E = 1000;
    const std::vector<float> H = normal(rng_, n * 4 * E, 1.0f);
    const std::vector<float> mix = uniform(rng_, n * bg::kMixWidth, 0.05f, 1.5f);
    Dev<float> d_H(H), d_mix(mix);
    for (int64_t pre_stride : {int64_t{4}, int64_t{bg::kMixWidth}}) {
        // pre from a [n][4] array or straight from the mix array
        std::vector<float> pre_buf = pre_stride == 4 ? uniform(rng_, n * 4, 0.0f, 1.0f) : mix;
        Dev<float> d_pre(pre_buf), d_x(static_cast<size_t>(n * E));
        cuda::hc_collapse(d_H.get(), d_pre.get(), pre_stride, n, E, d_x.get(), stream_);
        sync();
        const std::vector<float> got = d_x.download();
        for (int64_t t = 0; t < n; ++t)
            for (int64_t e = 0; e < E; ++e) {
                float s = 0.0f, mag = 0.0f;
                for (int c = 0; c < 4; ++c) {
                    s += pre_buf[t * pre_stride + c] * H[(t * 4 + c) * E + e];
                    mag += std::fabs(pre_buf[t * pre_stride + c] * H[(t * 4 + c) * E + e]);
                }
                ASSERT_LE(std::fabs(got[t * E + e] - s), 1e-6f * mag) << "collapse t " << t << " e " << e;
            }
    }
    const std::vector<float> y = normal(rng_, n * E, 1.0f);
    std::vector<float> want(H.size()), mag(H.size());
    for (int64_t t = 0; t < n; ++t) {
        const float* mx = &mix[t * bg::kMixWidth];
        for (int d = 0; d < 4; ++d)
            for (int64_t e = 0; e < E; ++e) {
                float s = mx[bg::kMixPost + d] * y[t * E + e];
                float a = std::fabs(s);
                for (int c = 0; c < 4; ++c) {
                    s += mx[bg::kMixComb + 4 * d + c] * H[(t * 4 + c) * E + e];
                    a += std::fabs(mx[bg::kMixComb + 4 * d + c] * H[(t * 4 + c) * E + e]);
                }
                want[(t * 4 + d) * E + e] = s;
                mag[(t * 4 + d) * E + e] = a;
            }
    }
    Dev<float> d_y(y);
    for (bool in_place : {false, true}) {
        Dev<float> d_R(H), d_out(H.size());
        float* out = in_place ? d_R.get() : d_out.get();
        cuda::hc_expand(d_mix.get(), d_y.get(), d_R.get(), n, E, out, stream_);
        sync();
        const std::vector<float> got = in_place ? d_R.download() : d_out.download();
        for (size_t i = 0; i < got.size(); ++i)
            ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6f * mag[i]) << "expand in_place " << in_place << " i " << i;
    }
}

// Engram: gates within 1e-5 (they are sigmoids of square roots of reductions over n_embd); the
// updated copies within 1e-5 * |V| + 1e-6 * |H|.
TEST_F(GpuTest, EngramGateMatchesCpu) {
    for (int64_t E : {1024, 100}) {
        const int64_t n = 3;
        const float eps = 1e-6f;
        const std::vector<float> kv = normal(rng_, n * 5 * E, 1.0f);
        const std::vector<float> H = normal(rng_, n * 4 * E, 2.0f);
        const std::vector<float> wk = uniform(rng_, 4 * E, 0.5f, 1.5f);
        const std::vector<float> wq = uniform(rng_, 4 * E, 0.5f, 1.5f);
        std::vector<float> want = H, want_g(static_cast<size_t>(n * 4));
        for (int64_t t = 0; t < n; ++t)
            for (int c = 0; c < 4; ++c) {
                float* h = &want[(t * 4 + c) * E];
                const float g = cpu::engram_gate(&kv[(t * 5 + c) * E], h, &wk[c * E], &wq[c * E], E, eps);
                want_g[t * 4 + c] = g;
                for (int64_t e = 0; e < E; ++e) h[e] += g * kv[(t * 5 + 4) * E + e];
            }
        Dev<float> d_kv(kv), d_H(H), d_wk(wk), d_wq(wq), d_g(static_cast<size_t>(n * 4));
        cuda::engram_gate_add(d_kv.get(), d_wk.get(), d_wq.get(), n, E, eps, d_H.get(), d_g.get(), stream_);
        sync();
        const std::vector<float> got = d_H.download(), got_g = d_g.download();
        for (int64_t i = 0; i < n * 4; ++i) ASSERT_NEAR(got_g[i], want_g[i], 1e-5f) << "gate " << i;
        for (int64_t t = 0; t < n; ++t)
            for (int c = 0; c < 4; ++c)
                for (int64_t e = 0; e < E; ++e) {
                    const size_t at = static_cast<size_t>((t * 4 + c) * E + e);
                    ASSERT_LE(std::fabs(got[at] - want[at]),
                              1e-5f * std::fabs(kv[(t * 5 + 4) * E + e]) + 1e-6f * std::fabs(H[at]))
                        << "E " << E << " t " << t << " c " << c << " e " << e;
                }
    }
}

// ---------------------------------------------------------------------------------------------
// Compressor pooling, attention, indexer

// Pooling: the plain sum is the CPU's sum in its order (within 1e-6 of the magnitudes); the
// softmax-weighted one within 2e-6 of the largest |kv| of the block (exp differs by ulps).
TEST_F(GpuTest, CompressPoolMatchesForward) {
    const int64_t n_ctx = 64, d = 128, b0 = 2, n_blocks = 5;
    struct Case {
        int64_t ratio;
        bool gated;
    };
    for (const Case c : {Case{2, true}, Case{4, true}, Case{1, false}, Case{3, false}}) {
        const std::vector<float> kv = normal(rng_, n_ctx * d, 1.0f);
        const std::vector<float> score = uniform(rng_, n_ctx * d, -5.0f, 5.0f);
        Dev<float> d_kv(kv), d_score(score), d_out(static_cast<size_t>(n_blocks * d));
        cuda::compress_pool(d_kv.get(), c.gated ? d_score.get() : nullptr, d, c.ratio, b0, n_blocks, d_out.get(), stream_);
        sync();
        const std::vector<float> got = d_out.download();
        for (int64_t j = 0; j < n_blocks; ++j) {
            const int64_t t0 = (b0 + j) * c.ratio;
            for (int64_t ch = 0; ch < d; ++ch) {
                float want, bound = 0.0f;
                if (!c.gated) {
                    float s = 0.0f;
                    for (int64_t t = t0; t < t0 + c.ratio; ++t) {
                        s += kv[t * d + ch];
                        bound += std::fabs(kv[t * d + ch]);
                    }
                    want = s;
                    bound *= 1e-6f;
                } else {
                    float mx = -INFINITY;
                    for (int64_t t = t0; t < t0 + c.ratio; ++t) mx = std::max(mx, score[t * d + ch]);
                    float den = 0.0f, num = 0.0f;
                    for (int64_t t = t0; t < t0 + c.ratio; ++t) {
                        const float e = std::exp(score[t * d + ch] - mx);
                        den += e;
                        num += e * kv[t * d + ch];
                        bound = std::max(bound, std::fabs(kv[t * d + ch]));
                    }
                    want = num / den;
                    bound *= 2e-6f;
                }
                ASSERT_LE(std::fabs(got[j * d + ch] - want), bound) << "ratio " << c.ratio << " block " << j << " ch " << ch;
            }
        }
    }
}

// Attention: each output within 1e-5 of the largest |row value| in its column (the output is a
// convex combination of rows; logits differ by rounding in the dot products' order).
TEST_F(GpuTest, AttentionMatchesCpu) {
    struct Case {
        int64_t d, n_head, window, n_ctx, blocks, top_k;
        std::vector<int32_t> pos;
    };
    std::vector<Case> cases = {
        {64, 4, 16, 200, 0, 0, {0, 1, 5, 15, 16, 17, 100, 199}},    // window only, partly filled windows
        {128, 3, 32, 400, 90, 40, {0, 3, 31, 32, 77, 200, 399}},     // window + selected compressed rows
        {512, 2, 128, 1500, 700, 512, {127, 128, 1000, 1499}},     // full-scale head, 640 rows
        {64, 1, 9000, 9100, 0, 0, {8999, 9050}},                   // > 48 KiB of shared memory
        {48, 8, 12, 100, 30, 6, {0, 2, 11, 12, 13, 40, 41, 99}},    // 8 heads (every grouping), d not a multiple of 32
        {512, 16, 128, 700, 200, 64, {63, 64, 200, 500, 699}},     // full-scale head, 16 heads
    };
    // Each grouping of heads a block where it divides the heads (0: the launcher's choice).
    const int groupings[] = {0, 1, 2, 4, 8};
    for (const Case& c : cases) {
        const int64_t n = static_cast<int64_t>(c.pos.size()), d = c.d, nh = c.n_head;
        const int64_t ldq = nh * d + 3, ldo = nh * d + 5;
        const std::vector<float> q = uniform(rng_, n * ldq, -3.0f, 3.0f);
        const std::vector<float> kv = uniform(rng_, c.n_ctx * d, -1.0f, 1.0f);
        const std::vector<float> comp = uniform(rng_, std::max<int64_t>(c.blocks, 1) * d, -1.0f, 1.0f);
        const std::vector<float> sinks = uniform(rng_, nh, -2.0f, 2.0f);
        std::vector<int32_t> sel(static_cast<size_t>(std::max<int64_t>(c.n_ctx * c.top_k, 1)), 0);
        std::vector<int32_t> sel_n(static_cast<size_t>(c.n_ctx), 0);
        if (c.blocks > 0) {
            std::vector<int32_t> all(static_cast<size_t>(c.blocks));
            std::iota(all.begin(), all.end(), 0);
            std::uniform_int_distribution<int64_t> cnt(0, c.top_k);
            for (size_t i = 0; i < c.pos.size(); ++i) {
                const int32_t p = c.pos[i];
                std::shuffle(all.begin(), all.end(), rng_);
                // the first query selects nothing, the second all top_k, the rest a random count
                const int64_t k = i == 0 ? 0 : (i == 1 ? c.top_k : cnt(rng_));
                sel_n[p] = static_cast<int32_t>(k);
                std::copy(all.begin(), all.begin() + k, sel.begin() + p * c.top_k);
            }
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        const float sentinel = -777.0f;
        std::vector<float> want(static_cast<size_t>(n * ldo), sentinel);
        std::vector<float> scratch(static_cast<size_t>(c.window + c.top_k + 1));
        std::vector<const float*> rows;
        for (int64_t t = 0; t < n; ++t) {
            const int64_t p = c.pos[t];
            rows.clear();
            for (int64_t j = std::max<int64_t>(0, p - c.window + 1); j <= p; ++j) rows.push_back(&kv[j * d]);
            if (c.blocks > 0)
                for (int32_t s = 0; s < sel_n[p]; ++s) rows.push_back(&comp[sel[p * c.top_k + s] * d]);
            for (int64_t h = 0; h < nh; ++h)
                cpu::attention_head(&q[t * ldq + h * d], rows.data(), static_cast<int64_t>(rows.size()), d, scale,
                                    sinks[h], scratch.data(), &want[t * ldo + h * d]);
        }
        Dev<float> d_q(q), d_kv(kv), d_comp(comp), d_sinks(sinks), d_out(std::vector<float>(want.size(), sentinel));
        Dev<int32_t> d_sel(sel), d_sel_n(sel_n), d_pos(c.pos);
        bg::AttentionArgs a;
        a.q = d_q.get();
        a.ldq = ldq;
        a.kv = d_kv.get();
        if (c.blocks > 0) {
            a.comp = d_comp.get();
            a.sel = d_sel.get();
            a.sel_n = d_sel_n.get();
            a.top_k = c.top_k;
        }
        a.sinks = d_sinks.get();
        a.pos = d_pos.get();
        a.n_tok = n;
        a.n_head = nh;
        a.d = d;
        a.window = c.window;
        a.scale = scale;
        a.out = d_out.get();
        a.ldo = ldo;
        // Decode's row split: partials for every split tried, filled with garbage first so a run
        // the merge reads but the split did not write shows.
        const int64_t slots = n * nh * 64;
        Dev<float> d_part(uniform(rng_, slots * (d + 2), -1e3f, 1e3f));
        cuda::AttentionPartials part{d_part.get(), slots, d};
        // 1: unsplit; 0: the launcher's choice with partials; then forced runs, some of them
        // (more runs than rows) empty.
        const int split_counts[] = {1, 0, 2, 5, 64};
        for (int g : groupings) {
            if (g > 0 && nh % g != 0) continue;
            for (int sp : split_counts) {
                d_out.upload(std::vector<float>(want.size(), sentinel));
                cuda::attention(a, stream_, g, sp == 1 ? nullptr : &part, sp);
                sync();
                const std::vector<float> got = d_out.download();
                // Rows are uniform in [-1, 1]: 1e-5 of the largest magnitude is 1e-5.
                for (int64_t t = 0; t < n; ++t) {
                    for (int64_t i = 0; i < nh * d; ++i)
                        ASSERT_NEAR(got[t * ldo + i], want[t * ldo + i], 1e-5f)
                            << "d " << d << " window " << c.window << " pos " << c.pos[t] << " head " << i / d << " i "
                            << i % d << " heads a block " << g << " splits " << sp;
                    for (int64_t i = nh * d; i < ldo; ++i) ASSERT_EQ(got[t * ldo + i], sentinel) << "wrote past the heads";
                }
            }
        }
    }
}

struct IndexerCase {
    int64_t n_head, head_dim, ratio, top_k, n_ctx;
    std::vector<int32_t> pos;  // distinct
};

// Runs the GPU indexer; returns scores [n][ld], sel [n_ctx][top_k], sel_n [n_ctx] (sel_n of
// positions outside the batch stays -7).
struct IndexerResult {
    std::vector<float> scores;
    std::vector<int32_t> sel, sel_n;
    int64_t ld = 0;
};
IndexerResult run_indexer(const IndexerCase& c, const std::vector<float>& q, const std::vector<float>& w,
                          const std::vector<float>& keys, cudaStream_t stream) {
    const int64_t n = static_cast<int64_t>(c.pos.size());
    IndexerResult r;
    r.ld = c.n_ctx / c.ratio + 1;
    Dev<float> d_q(q), d_w(w), d_keys(keys), d_scores(static_cast<size_t>(n * r.ld));
    Dev<int32_t> d_pos(c.pos), d_sel(std::vector<int32_t>(static_cast<size_t>(c.n_ctx * c.top_k), -7));
    Dev<int32_t> d_sel_n(std::vector<int32_t>(static_cast<size_t>(c.n_ctx), -7));
    bg::IndexerArgs a;
    a.q = d_q.get();
    a.w = d_w.get();
    a.keys = d_keys.get();
    a.pos = d_pos.get();
    a.n_tok = n;
    a.n_head = c.n_head;
    a.head_dim = c.head_dim;
    a.ratio = c.ratio;
    a.top_k = c.top_k;
    a.scores = d_scores.get();
    a.ld_scores = r.ld;
    a.sel = d_sel.get();
    a.sel_n = d_sel_n.get();
    cuda::indexer(a, stream);
    BG_CUDA_CHECK(cudaStreamSynchronize(stream));
    r.scores = d_scores.download();
    r.sel = d_sel.download();
    r.sel_n = d_sel_n.download();
    return r;
}

// The indexer op's score of row b for token t (w already holding the 1/sqrt scale), and the
// magnitude its rounding is relative to.
float cpu_index_score(const IndexerCase& c, const std::vector<float>& q, const std::vector<float>& w,
                      const std::vector<float>& keys, int64_t t, int64_t b, float* mag) {
    const int64_t nh = c.n_head, hd = c.head_dim;
    float s = 0.0f, m = 0.0f;
    for (int64_t h = 0; h < nh; ++h) {
        float d = 0.0f, a = 0.0f;
        for (int64_t ch = 0; ch < hd; ++ch) {
            d += q[(t * nh + h) * hd + ch] * keys[b * hd + ch];
            a += std::fabs(q[(t * nh + h) * hd + ch] * keys[b * hd + ch]);
        }
        s += w[t * nh + h] * std::max(d, 0.0f);
        m += std::fabs(w[t * nh + h]) * a;
    }
    *mag = m;
    return s;
}

// Index keys with exact ties built in: some rows zero (score exactly 0), some copies of earlier
// rows (equal scores).
std::vector<float> index_keys(std::mt19937& rng, int64_t blocks, int64_t hd) {
    std::vector<float> keys = normal(rng, blocks * hd, 1.0f);
    std::uniform_int_distribution<int> kind(0, 9);
    for (int64_t b = 1; b < blocks; ++b) {
        const int k = kind(rng);
        if (k == 0) std::fill(&keys[b * hd], &keys[(b + 1) * hd], 0.0f);
        if (k == 1) {
            std::uniform_int_distribution<int64_t> earlier(0, b - 1);
            std::copy_n(&keys[earlier(rng) * hd], hd, &keys[b * hd]);
        }
    }
    return keys;
}

// Indexer: scores within 2e-6 of sum_h |w_h| sum_c |q_hc k_c|; the selection must be exactly
// cpu::top_k of the GPU's own scores (same rows, same order), sel_n exactly min(visible, top_k),
// and positions outside the batch untouched.
TEST_F(GpuTest, IndexerMatchesCpuTopK) {
    const std::vector<IndexerCase> cases = {
        {4, 32, 1, 16, 120, {0, 3, 15, 16, 40, 99}},
        {8, 64, 2, 64, 700, {0, 1, 2, 129, 130, 300, 599, 699}},
        {8, 32, 4, 8, 300, {2, 3, 7, 37, 250}},
        {32, 128, 1, 512, 3100, {510, 511, 512, 1999, 3000}},  // full-scale heads and top-k
        // Decode's few tokens (a row a warp): one token past top_k rows, and two tokens.
        {32, 128, 1, 512, 3100, {2047}},
        {8, 32, 2, 16, 300, {5, 299}},
    };
    for (const IndexerCase& c : cases) {
        const int64_t n = static_cast<int64_t>(c.pos.size()), nh = c.n_head, hd = c.head_dim;
        const int64_t blocks = c.n_ctx / c.ratio + 1;
        const std::vector<float> q = normal(rng_, n * nh * hd, 1.0f);
        std::vector<float> w = normal(rng_, n * nh, 1.0f);
        for (float& v : w) v /= std::sqrt(static_cast<float>(nh * hd));
        const std::vector<float> keys = index_keys(rng_, blocks, hd);
        const IndexerResult r = run_indexer(c, q, w, keys, stream_);
        std::set<int32_t> in_batch(c.pos.begin(), c.pos.end());
        for (int64_t t = 0; t < n; ++t) {
            const int64_t p = c.pos[t], visible = (p + 1) / c.ratio, k = std::min(visible, c.top_k);
            const float* got = &r.scores[t * r.ld];
            for (int64_t b = 0; b < visible; ++b) {
                float mag;
                const float want = cpu_index_score(c, q, w, keys, t, b, &mag);
                ASSERT_LE(std::fabs(got[b] - want), 2e-6f * mag) << "pos " << p << " row " << b;
            }
            ASSERT_EQ(r.sel_n[p], k) << "pos " << p;
            std::vector<int32_t> want_sel(static_cast<size_t>(k));
            if (k > 0) cpu::top_k(got, visible, k, want_sel.data());
            for (int64_t i = 0; i < k; ++i)
                ASSERT_EQ(r.sel[p * c.top_k + i], want_sel[i]) << "pos " << p << " rank " << i << " of " << k;
        }
        for (int64_t p = 0; p < c.n_ctx; ++p)
            if (!in_batch.count(static_cast<int32_t>(p))) {
                ASSERT_EQ(r.sel_n[p], -7) << "wrote sel_n of position " << p;
            }
    }
}

// The top-k boundary inside a large group of exactly equal scores: all weights positive and
// half the rows zero, so scores are >= 0 with many exact zeros, and top_k set so the cut falls
// in the middle of the zeros: exactly the lowest-indexed zeros must be taken.
TEST_F(GpuTest, IndexerTiesAtTheBoundary) {
    const int64_t nh = 8, hd = 64, blocks = 2001;
    const std::vector<float> q = normal(rng_, nh * hd, 1.0f);
    const std::vector<float> w = uniform(rng_, nh, 0.1f, 1.0f);
    std::vector<float> keys = index_keys(rng_, blocks, hd);
    std::bernoulli_distribution zero(0.5);
    for (int64_t b = 0; b < blocks; ++b)
        if (zero(rng_)) std::fill(&keys[b * hd], &keys[(b + 1) * hd], 0.0f);
    IndexerCase c{nh, hd, 1, 0, blocks - 1, {static_cast<int32_t>(blocks - 2)}};  // sees blocks - 1 rows
    const int64_t visible = blocks - 1;
    int64_t n_pos = 0, n_zero = 0;
    for (int64_t b = 0; b < visible; ++b) {
        float mag;
        const float s = cpu_index_score(c, q, w, keys, 0, b, &mag);
        n_pos += s > 0.0f;
        n_zero += s == 0.0f;
    }
    ASSERT_GT(n_zero, 10);
    c.top_k = n_pos + n_zero / 2;
    const IndexerResult r = run_indexer(c, q, w, keys, stream_);
    // Classify on the GPU's scores (a dot within rounding of 0 may land on either side).
    int64_t g_pos = 0, g_zero = 0;
    for (int64_t b = 0; b < visible; ++b) {
        g_pos += r.scores[b] > 0.0f;
        g_zero += r.scores[b] == 0.0f;
    }
    ASSERT_EQ(g_pos + g_zero, visible);
    ASSERT_GT(c.top_k, g_pos);
    ASSERT_LT(c.top_k, g_pos + g_zero);
    const int64_t p = c.pos[0];
    ASSERT_EQ(r.sel_n[p], c.top_k);
    std::vector<int32_t> want(static_cast<size_t>(c.top_k));
    cpu::top_k(r.scores.data(), visible, c.top_k, want.data());
    for (int64_t i = 0; i < c.top_k; ++i) ASSERT_EQ(r.sel[p * c.top_k + i], want[i]) << "rank " << i;
    // Spelled out: the zeros taken are the first (top_k - g_pos) zero rows, in index order.
    std::vector<int32_t> zeros_taken(r.sel.begin() + p * c.top_k + g_pos, r.sel.begin() + (p + 1) * c.top_k);
    int64_t seen = 0;
    for (int64_t b = 0; b < visible && seen < static_cast<int64_t>(zeros_taken.size()); ++b)
        if (r.scores[b] == 0.0f) {
            ASSERT_EQ(zeros_taken[seen++], b);
        }
}

// ---------------------------------------------------------------------------------------------
// Router and MoE helpers

// Logits and biases (zero when !with_bias) where distinct selection keys p + bias are at least
// 1e-5 apart (relative), so the GPU's softplus, a few ulps off glibc's, cannot reorder them,
// while about a tenth of the experts copy another's logit and bias: exact ties, which must go
// to the lower id on both sides.
void router_inputs(std::mt19937& rng, int64_t n_tok, int64_t ne, bool with_bias, std::vector<float>& logits,
                   std::vector<float>& bias) {
    bias = with_bias ? uniform(rng, ne, -0.3f, 0.3f) : std::vector<float>(static_cast<size_t>(ne), 0.0f);
    logits = normal(rng, n_tok * ne, 2.0f);
    std::uniform_int_distribution<int64_t> any(0, ne - 1);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<int64_t> pick(static_cast<size_t>(ne), -1), src(static_cast<size_t>(ne), -1);
    for (int64_t e = 0; e < ne; ++e)
        if (any(rng) < ne / 10) pick[e] = any(rng);
    for (int64_t e = 0; e < ne; ++e)
        if (pick[e] >= 0 && pick[e] != e && pick[pick[e]] < 0) src[e] = pick[e];  // copies of originals only
    for (int64_t e = 0; e < ne; ++e)
        if (src[e] >= 0) bias[e] = bias[src[e]];
    for (int64_t t = 0; t < n_tok; ++t) {
        float* lg = &logits[t * ne];
        for (int round = 0;; ++round) {
            ASSERT_LT(round, 1000) << "could not separate router keys";
            for (int64_t e = 0; e < ne; ++e)
                if (src[e] >= 0) lg[e] = lg[src[e]];
            std::vector<std::pair<float, int64_t>> key(static_cast<size_t>(ne));
            for (int64_t e = 0; e < ne; ++e) key[e] = {std::sqrt(cpu::softplus(lg[e])) + bias[e], e};
            std::sort(key.begin(), key.end());
            bool ok = true;
            for (int64_t i = 1; i < ne; ++i) {
                const float a = key[i - 1].first, b = key[i].first;
                if (a != b && b - a < 1e-5f * std::max(1.0f, std::fabs(b))) {
                    const int64_t e = key[i].second;
                    lg[src[e] >= 0 ? src[e] : e] = nd(rng);  // a copy follows its original next round
                    ok = false;
                }
            }
            if (ok) break;
        }
    }
}

TEST_F(GpuTest, RouterMatchesRouteForEveryPolicy) {
    struct Case {
        int64_t ne;
        int k;
        float scale;
        int64_t n_resident;
        bool norm;  // expert_weights_norm
    };
    // Up to 512 experts the router walks them in registers (2-16 a lane); more go through shared
    // memory (600); more than 32 ranks (40 of 512) read their p again at the end.
    for (const Case c : {Case{384, 6, 1.5f, 20, true}, Case{70, 1, 1.0f, 9, true}, Case{45, 8, 2.5f, 8, true},
                         Case{384, 6, 1.5f, 20, false}, Case{600, 6, 1.5f, 20, true}, Case{512, 40, 1.0f, 60, true}}) {
        for (RoutingPolicy policy : {RoutingPolicy::kExact, RoutingPolicy::kPinnedTop1, RoutingPolicy::kResidentOnly,
                                     RoutingPolicy::kHotPool}) {
            // Hot-pool under every case of its definition: no hot expert, fewer than k - 1, exactly
            // k - 1 (the seed's 5 of 6: a hot rank 1 leaves one rank to a host expert), more.
            std::vector<int64_t> hot_sizes = {0};
            if (policy == RoutingPolicy::kHotPool)
                hot_sizes = {0, std::max(0, c.k - 3), c.k - 1, std::min<int64_t>(c.n_resident, c.k + 2)};
            for (const int64_t n_hot : hot_sizes)
            for (bool with_bias : {true, false}) {
                if (!with_bias && policy != RoutingPolicy::kExact) continue;  // bg::route needs the bias
                const int64_t n = 33, ne = c.ne;
                std::vector<float> logits, bias;
                router_inputs(rng_, n, ne, with_bias, logits, bias);
                if (HasFatalFailure()) return;
                std::vector<uint8_t> resident(static_cast<size_t>(ne), 0), hot(static_cast<size_t>(ne), 0);
                std::vector<int64_t> order(static_cast<size_t>(ne));
                std::iota(order.begin(), order.end(), 0);
                std::shuffle(order.begin(), order.end(), rng_);
                for (int64_t i = 0; i < c.n_resident; ++i) resident[order[i]] = 1;
                std::shuffle(order.begin(), order.begin() + c.n_resident, rng_);
                for (int64_t i = 0; i < n_hot; ++i) hot[order[i]] = 1;  // any of the resident ones

                std::vector<int32_t> want_ids(static_cast<size_t>(n * c.k));
                std::vector<float> want_w(static_cast<size_t>(n * c.k)), scratch(static_cast<size_t>(2 * ne));
                std::vector<int32_t> ord(static_cast<size_t>(ne));
                for (int64_t t = 0; t < n; ++t)
                    route(policy, &logits[t * ne], with_bias ? bias.data() : nullptr, resident.data(), hot.data(), ne, c.k,
                          bg::RouteWeighting{c.norm, c.scale}, &want_ids[t * c.k], &want_w[t * c.k], scratch.data(), ord.data());
                Dev<float> d_logits(logits), d_bias(bias), d_w(static_cast<size_t>(n * c.k));
                Dev<uint8_t> d_res(resident), d_hot(hot);
                Dev<int32_t> d_ids(static_cast<size_t>(n * c.k));
                cuda::route(policy, d_logits.get(), with_bias ? d_bias.get() : nullptr, d_res.get(), d_hot.get(), n, ne, c.k,
                            bg::RouteWeighting{c.norm, c.scale}, d_ids.get(), d_w.get(), stream_);
                sync();
                const std::vector<int32_t> ids = d_ids.download();
                const std::vector<float> w = d_w.download();
                for (int64_t i = 0; i < n * c.k; ++i) {
                    ASSERT_EQ(ids[i], want_ids[i]) << enum_name(policy) << " ne " << ne << " hot " << n_hot
                                                   << " token " << i / c.k << " rank " << i % c.k;
                    ASSERT_LE(std::fabs(w[i] - want_w[i]), 2e-6f * std::fabs(want_w[i]))
                        << enum_name(policy) << " hot " << n_hot << " token " << i / c.k << " rank " << i % c.k;
                }
            }
        }
    }
}

// Fewer resident experts than k: the GPU fills the missing ranks with -1 / 0 (bg::route aborts).
TEST_F(GpuTest, RouterShortResidentSetMarksMissingRanks) {
    const int64_t ne = 16;
    const int k = 4;
    std::vector<float> logits = normal(rng_, ne, 2.0f), bias(static_cast<size_t>(ne), 0.0f);
    std::vector<uint8_t> resident(static_cast<size_t>(ne), 0);
    resident[3] = resident[11] = 1;
    Dev<float> d_logits(logits), d_bias(bias), d_w(static_cast<size_t>(k));
    Dev<uint8_t> d_res(resident);
    Dev<int32_t> d_ids(static_cast<size_t>(k));
    cuda::route(RoutingPolicy::kResidentOnly, d_logits.get(), d_bias.get(), d_res.get(), nullptr, 1, ne, k, bg::RouteWeighting{}, d_ids.get(),
                d_w.get(), stream_);
    sync();
    const std::vector<int32_t> ids = d_ids.download();
    const std::vector<float> w = d_w.download();
    const float p3 = std::sqrt(cpu::softplus(logits[3])), p11 = std::sqrt(cpu::softplus(logits[11]));
    const std::set<int32_t> got{ids[0], ids[1]};
    EXPECT_EQ(got, (std::set<int32_t>{3, 11}));
    EXPECT_EQ(ids[0], p3 >= p11 ? 3 : 11);
    EXPECT_EQ(ids[2], -1);
    EXPECT_EQ(ids[3], -1);
    EXPECT_EQ(w[2], 0.0f);
    EXPECT_EQ(w[3], 0.0f);
    EXPECT_NEAR(w[0] + w[1], 1.0f, 1e-6f);
}

// Gather and scatter move floats: bit-equal. The weighted sum follows moe_half's order: within
// 1e-6 of the magnitudes summed (in practice bit-equal).
TEST_F(GpuTest, MoeGatherScatterWeightedSum) {
    const int64_t n = 10, width = 300, ldx = width + 4, m = 7;
    const std::vector<float> x = normal(rng_, n * ldx, 1.0f);
    std::uniform_int_distribution<int32_t> tok(0, n - 1);
    std::vector<int32_t> rows(static_cast<size_t>(m));
    for (auto& r : rows) r = tok(rng_);
    rows[1] = rows[0];  // a token routed twice in one chunk would not happen, but gather allows it
    Dev<float> d_x(x), d_g(static_cast<size_t>(m * width));
    Dev<int32_t> d_rows(rows);
    cuda::moe_gather(d_x.get(), ldx, d_rows.get(), m, width, d_g.get(), stream_);
    sync();
    const std::vector<float> g = d_g.download();
    for (int64_t j = 0; j < m; ++j)
        for (int64_t e = 0; e < width; ++e) ASSERT_TRUE(same_bits(g[j * width + e], x[rows[j] * ldx + e])) << j << " " << e;

    const int64_t slots = 30;
    std::vector<int32_t> perm(static_cast<size_t>(slots));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    const std::vector<int32_t> dst_rows(perm.begin(), perm.begin() + m);
    const std::vector<float> src = normal(rng_, m * width, 1.0f);
    const float sentinel = 4242.0f;
    Dev<float> d_src(src), d_dst(std::vector<float>(static_cast<size_t>(slots * width), sentinel));
    Dev<int32_t> d_dst_rows(dst_rows);
    cuda::moe_scatter(d_src.get(), d_dst_rows.get(), m, width, d_dst.get(), stream_);
    sync();
    const std::vector<float> dst = d_dst.download();
    std::vector<int64_t> from(static_cast<size_t>(slots), -1);
    for (int64_t j = 0; j < m; ++j) from[dst_rows[j]] = j;
    for (int64_t s = 0; s < slots; ++s)
        for (int64_t e = 0; e < width; ++e)
            ASSERT_TRUE(same_bits(dst[s * width + e], from[s] < 0 ? sentinel : src[from[s] * width + e])) << s << " " << e;
    // The join: rows [add0, add0 + n_add) added (the CPU's part of a split expert onto the
    // device's part, one rounding each), the others written over what was there.
    const std::vector<float> add = normal(rng_, m * width, 1.0f);
    Dev<float> d_add(add);
    const int64_t add0 = 2, n_add = 3;
    cuda::moe_scatter_join(d_add.get(), d_dst_rows.get(), m, add0, n_add, width, d_dst.get(), stream_);
    sync();
    const std::vector<float> joined = d_dst.download();
    for (int64_t s = 0; s < slots; ++s)
        for (int64_t e = 0; e < width; ++e) {
            const int64_t j = from[s];
            const float want = j < 0 ? sentinel
                               : j >= add0 && j < add0 + n_add ? src[j * width + e] + add[j * width + e]
                                                               : add[j * width + e];
            ASSERT_TRUE(same_bits(joined[s * width + e], want)) << s << " " << e;
        }

    const int64_t k = 6, nt = 5;
    const std::vector<float> eo = normal(rng_, nt * k * width, 1.0f);
    const std::vector<float> wts = uniform(rng_, nt * k, 0.05f, 0.5f);
    const std::vector<float> y0 = normal(rng_, nt * width, 1.0f);
    std::vector<float> want = y0, mag(y0.size());
    for (int64_t t = 0; t < nt; ++t)
        for (int64_t e = 0; e < width; ++e) {
            float acc = 0.0f, a = std::fabs(y0[t * width + e]);
            for (int64_t j = 0; j < k; ++j) {
                acc += wts[t * k + j] * eo[(t * k + j) * width + e];
                a += std::fabs(wts[t * k + j] * eo[(t * k + j) * width + e]);
            }
            want[t * width + e] += acc;
            mag[t * width + e] = a;
        }
    Dev<float> d_eo(eo), d_wts(wts), d_y(y0);
    cuda::moe_weighted_sum(d_eo.get(), d_wts.get(), nt, k, width, d_y.get(), stream_);
    sync();
    const std::vector<float> y = d_y.download();
    for (size_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i] - want[i]), 1e-6f * mag[i]) << i;
}

}  // namespace
