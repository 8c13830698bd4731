// CPU ops against the float64 references in ops_reference.h, on fresh random inputs (the seed
// of each test is printed so a failure can be replayed by hand), plus hand-worked cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "backend/host_word.h"
#include "cpu/bf16_expert.h"
#include "cpu/cpu_ops.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "ops_reference.h"
#include "random_inputs.h"
#include "tensor/ggml_types.h"

using namespace bg;
using namespace bg::cpu;

namespace {

using bgtest::fresh_rng;
using bgtest::uniform;

}  // namespace

// ---------------------------------------------------------------------------------------------
// ThreadPool

TEST(ThreadPool, CoversRangeOnceAndHonoursMinChunk) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        for (int64_t n : {0, 1, 2, 7, 13, 100, 1001}) {
            for (int64_t min_chunk : {1, 3, 4, 50, 2000}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::atomic<int> chunks{0}, short_chunks{0};
                pool.parallel_for(
                    n,
                    [&](int64_t b, int64_t e) {
                        chunks++;
                        if (e - b < std::min(min_chunk, n)) short_chunks++;
                        for (int64_t i = b; i < e; ++i) hits[i]++;
                    },
                    min_chunk);
                for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << i;
                EXPECT_EQ(short_chunks.load(), 0) << "n=" << n << " min_chunk=" << min_chunk;
                EXPECT_LE(chunks.load(), threads);
                if (n > 0 && n >= threads * min_chunk) {
                    EXPECT_EQ(chunks.load(), threads);
                }
            }
        }
    }
}

TEST(ThreadPool, ManyCallsAndDefaultSize) {
    ThreadPool pool(3);
    std::vector<int64_t> acc(64, 0);
    for (int rep = 0; rep < 20000; ++rep) {
        pool.parallel_for(64, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) acc[i] += i;
        });
    }
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(acc[i], 20000 * i);
    ThreadPool def;
    EXPECT_GE(def.size(), 1);
}

// ---------------------------------------------------------------------------------------------
// matmul

namespace {

struct QuantMat {
    std::vector<uint8_t> bytes;   // [rows][row_stride]
    std::vector<float> deq;       // [rows][cols], what the kernel actually multiplies by
    MatView view;
};

// Random weights quantised into `t`; rows padded by `pad` bytes to exercise row_stride.
// The row kernels this machine runs; the others are named as not checked here.
std::vector<CpuIsa> usable_isas() {
    std::vector<CpuIsa> out;
    for (const CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (cpu_isa_usable(isa))
            out.push_back(isa);
        else
            std::printf("  %s: not usable on this machine, not checked here\n", cpu_isa_name(isa));
    }
    return out;
}

QuantMat make_mat(std::mt19937& rng, GgmlType t, int64_t rows, int64_t cols, uint64_t pad) {
    QuantMat m;
    const uint64_t rb = row_bytes(t, cols);
    const uint64_t stride = rb + pad;
    m.bytes.assign(rows * stride, 0xAB);
    m.deq.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        const auto w = uniform(rng, cols, -1.0f, 1.0f);
        quantize_row(t, w.data(), m.bytes.data() + r * stride, cols);
        dequantize_row(t, m.bytes.data() + r * stride, m.deq.data() + r * cols, cols);
    }
    m.view = MatView{m.bytes.data(), t, cols, rows, stride};
    return m;
}

}  // namespace

// Tolerance: float accumulation over `cols` products against the exact sum of the same
// (dequantised) products: |y - ref| <= 1e-5 * sum_i |w_i x_i| + 1e-6.
TEST(Ops, MatmulAllTypes) {
    std::mt19937 rng = fresh_rng();
    ThreadPool pool1(1), pool3(3);
    struct Shape { int64_t rows, cols; };
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::MXFP4}) {
        const bool blocked = t == GgmlType::Q8_0 || t == GgmlType::MXFP4;
        // Small shapes run as one chunk; the wide ones split over the pool.
        const Shape shapes[] = {{37, blocked ? 160 : 67}, {1001, blocked ? 544 : 515}, {5, 32}};
        for (const Shape& sh : shapes) {
            const QuantMat m = make_mat(rng, t, sh.rows, sh.cols, sh.rows == 5 ? 8 : 0);
            for (int64_t n_tok : {1, 3, 16}) {
                const int64_t ldx = sh.cols + 3, ldy = sh.rows + 2;
                const auto x = uniform(rng, n_tok * ldx, -2.0f, 2.0f);
                const auto want = ref::matmul(m.deq, sh.rows, sh.cols, x.data(), ldx, n_tok);
                for (ThreadPool* pool : {&pool1, &pool3}) {
                    std::vector<float> y(static_cast<size_t>(n_tok * ldy), -777.0f);
                    matmul(*pool, m.view, x.data(), ldx, n_tok, y.data(), ldy);
                    for (int64_t tk = 0; tk < n_tok; ++tk) {
                        for (int64_t r = 0; r < sh.rows; ++r) {
                            double mag = 0;
                            for (int64_t i = 0; i < sh.cols; ++i)
                                mag += std::fabs(static_cast<double>(m.deq[r * sh.cols + i]) * x[tk * ldx + i]);
                            ASSERT_NEAR(y[tk * ldy + r], want[tk * sh.rows + r], 1e-5 * mag + 1e-6)
                                << type_name(t) << " rows=" << sh.rows << " n_tok=" << n_tok
                                << " threads=" << pool->size() << " t=" << tk << " r=" << r;
                        }
                        // Padding between output rows is left alone.
                        for (int64_t r = sh.rows; r < ldy; ++r) ASSERT_EQ(y[tk * ldy + r], -777.0f);
                    }
                }
            }
        }
    }
}

// The BF16 rows' kernels (cpu/bf16_rows.h) give the float path's y bit for bit: each row
// dequantised, then the sixteen-lane dot product of the other types (written out here), on every
// kernel this machine runs (the others skip, visibly), for widths around 16, padded rows, several
// tokens, and weights with infinities and NaNs among them.
TEST(Ops, MatmulBf16KernelsGiveTheFloatPathsYBitForBit) {
    std::mt19937 rng = fresh_rng();
    ThreadPool pool(3);
    auto lanes_dot = [](const float* a, const float* b, int64_t n) {
        float acc[16] = {};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
        float tail = 0.0f;
        for (; i < n; ++i) tail += a[i] * b[i];
        for (int w = 8; w > 0; w /= 2)
            for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
        return acc[0] + tail;
    };
    const std::vector<CpuIsa> isas = usable_isas();
    for (const CpuIsa isa : isas) {
        for (int64_t cols : {1, 15, 16, 17, 31, 100, 5120})
            for (int64_t n_tok : {1, 3})
                for (bool specials : {false, true}) {
                    const int64_t rows = 37;
                    QuantMat m = make_mat(rng, GgmlType::BF16, rows, cols, 6);
                    if (specials) {
                        // +inf, -inf and a NaN in some rows (their y is then inf or NaN alike).
                        const uint16_t special[] = {0x7F80, 0xFF80, 0x7FC1};
                        for (int k = 0; k < 3; ++k) {
                            const int64_t r = 5 * k + 1, c = (7 * k) % cols;
                            std::memcpy(m.bytes.data() + r * m.view.row_stride + 2 * c, &special[k], 2);
                        }
                    }
                    const int64_t ldx = cols + 5, ldy = rows + 1;
                    const auto x = uniform(rng, n_tok * ldx, -2.0f, 2.0f);
                    std::vector<float> want(static_cast<size_t>(n_tok * ldy), -777.0f), got = want, row(cols);
                    for (int64_t r = 0; r < rows; ++r) {
                        dequantize_row(GgmlType::BF16, m.view.data + r * m.view.row_stride, row.data(), cols);
                        for (int64_t t = 0; t < n_tok; ++t) want[t * ldy + r] = lanes_dot(row.data(), x.data() + t * ldx, cols);
                    }
                    matmul(pool, m.view, x.data(), ldx, n_tok, got.data(), ldy, isa);
                    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                        << cpu_isa_name(isa) << " cols " << cols << " tokens " << n_tok << (specials ? " with inf/NaN" : "");
                }
    }
    EXPECT_FALSE(isas.empty());
}

// A routed BF16 expert as one pool job (cpu/bf16_expert.h) gives, bit for bit, what its three
// steps give one by one: the float matmul over the gate and up rows, the SwiGLU, the float matmul
// over the down rows; on every kernel this machine runs, teams of one to four, widths whose rows
// do not split into whole groups of four, several tokens; y starts as NaN, so a row no member
// wrote shows.
TEST(Ops, Bf16ExpertOneJobEqualsItsStepsBitForBit) {
    std::mt19937 rng = fresh_rng();
    const std::vector<CpuIsa> isas = usable_isas();
    for (const CpuIsa isa : isas) {
        for (const int threads : {1, 3, 4}) {
            ThreadPool pool(threads);
            for (const auto& [E, F] : {std::pair<int64_t, int64_t>{96, 160}, {45, 30}, {512, 258}})
                for (const int64_t m : {1, 3, 17}) {
                    const QuantMat gu_w = make_mat(rng, GgmlType::BF16, 2 * F, E, 6);
                    const QuantMat down_w = make_mat(rng, GgmlType::BF16, E, F, 6);
                    const int64_t ldx = E + 5;
                    const auto x = uniform(rng, m * ldx, -1.0f, 1.0f);
                    const float limit = 7.0f;
                    std::vector<float> gu(static_cast<size_t>(m * 2 * F)), h(static_cast<size_t>(m * F));
                    std::vector<float> y_steps(static_cast<size_t>(m * E));
                    matmul(pool, gu_w.view, x.data(), ldx, m, gu.data(), 2 * F, isa);
                    for (int64_t t = 0; t < m; ++t)
                        swiglu(gu.data() + t * 2 * F, gu.data() + t * 2 * F + F, F, limit, SwigluClamp::kDeepSeek,
                               h.data() + t * F);
                    matmul(pool, down_w.view, h.data(), F, m, y_steps.data(), E, isa);
                    std::vector<float> gu2(gu.size()), h2(h.size()), y_job(y_steps.size(), std::nanf(""));
                    expert_ffn_bf16(pool, gu_w.view, down_w.view, x.data(), ldx, m, limit, SwigluClamp::kDeepSeek,
                                    gu2.data(), h2.data(), y_job.data(), isa);
                    ASSERT_EQ(0, std::memcmp(y_steps.data(), y_job.data(), y_job.size() * sizeof(float)))
                        << cpu_isa_name(isa) << " threads " << threads << " E " << E << " F " << F << " m " << m;
                    ASSERT_EQ(0, std::memcmp(h.data(), h2.data(), h.size() * sizeof(float)));
                }
        }
    }
    EXPECT_FALSE(isas.empty());
}

TEST(Ops, MatmulSliceRows) {
    std::mt19937 rng = fresh_rng();
    ThreadPool pool(3);
    const QuantMat m = make_mat(rng, GgmlType::Q8_0, 50, 64, 2);
    const MatView s = m.view.slice_rows(10, 17);
    EXPECT_EQ(s.rows, 17);
    EXPECT_EQ(s.cols, 64);
    const auto x = uniform(rng, 64, -1.0f, 1.0f);
    std::vector<float> full(50), part(17);
    matmul(pool, m.view, x.data(), 64, 1, full.data(), 50);
    matmul(pool, s, x.data(), 64, 1, part.data(), 17);
    for (int r = 0; r < 17; ++r) EXPECT_EQ(part[r], full[10 + r]);
}

// ---------------------------------------------------------------------------------------------
// Elementwise and small ops

// rmsnorm: relative 1e-6 per element (float sum of squares over 1000 terms).
TEST(Ops, RmsNorm) {
    std::mt19937 rng = fresh_rng();
    const int64_t n = 1000;
    const auto x = uniform(rng, n, -3.0f, 3.0f);
    const auto w = uniform(rng, n, 0.5f, 1.5f);
    const float eps = 1e-6f;
    for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
        const auto want = ref::rmsnorm(x.data(), wp, n, eps);
        std::vector<float> y(n);
        rmsnorm(x.data(), wp, n, eps, y.data());
        for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-7);
        std::vector<float> z = x;  // in place
        rmsnorm(z.data(), wp, n, eps, z.data());
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], y[i]);
    }
}

// Scalars: softplus and silu to relative 1e-6; swiglu to 1e-6 relative + 1e-7 absolute.
TEST(Ops, SoftplusSiluSwiglu) {
    std::mt19937 rng = fresh_rng();
    const auto xs = uniform(rng, 2000, -40.0f, 40.0f);
    for (float x : xs) {
        EXPECT_NEAR(softplus(x), ref::softplus(x), 1e-6 * ref::softplus(x) + 1e-30) << x;
        EXPECT_NEAR(silu(x), ref::silu(x), 1e-6 * std::fabs(ref::silu(x)) + 1e-30) << x;
    }
    // Far tails: finite and right.
    EXPECT_EQ(softplus(1000.0f), 1000.0f);
    EXPECT_EQ(softplus(-1000.0f), 0.0f);
    EXPECT_NEAR(softplus(-80.0f), std::exp(-80.0), 1e-40);
    EXPECT_NEAR(softplus(0.0f), std::log(2.0), 1e-7);
    EXPECT_FALSE(std::isnan(silu(-1000.0f)));
    EXPECT_EQ(silu(-1000.0f), 0.0f);

    const int64_t n = 3000;
    const auto g = uniform(rng, n, -12.0f, 12.0f);
    const auto u = uniform(rng, n, -12.0f, 12.0f);
    std::vector<float> out(n);
    for (float limit : {7.0f, 0.0f, -1.0f}) {
        for (int form : {0, 1}) {
            swiglu(g.data(), u.data(), n, limit, form == 0 ? SwigluClamp::kDeepSeek : SwigluClamp::kLlamaCpp,
                   out.data());
            for (int64_t i = 0; i < n; ++i) {
                const double want = ref::swiglu(g[i], u[i], limit, form);
                ASSERT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-7)
                    << "limit=" << limit << " form=" << form << " g=" << g[i] << " u=" << u[i];
            }
        }
    }
    // The two clamp forms really differ: gate 10 -> DeepSeek silu(7) ~ 6.99, llama.cpp min(9.9995, 7) = 7.
    const float gg = 10.0f, uu = 1.0f;
    float a, b;
    swiglu(&gg, &uu, 1, 7.0f, SwigluClamp::kDeepSeek, &a);
    swiglu(&gg, &uu, 1, 7.0f, SwigluClamp::kLlamaCpp, &b);
    EXPECT_NEAR(a, 7.0 / (1 + std::exp(-7.0)), 1e-6);
    EXPECT_EQ(b, 7.0f);
}

// softmax: 1e-6 absolute per entry; sums to 1.
TEST(Ops, Softmax) {
    std::mt19937 rng = fresh_rng();
    for (int64_t n : {1, 5, 300}) {
        auto x = uniform(rng, n, -30.0f, 30.0f);
        const auto want = ref::softmax(std::vector<double>(x.begin(), x.end()));
        softmax(x.data(), n);
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
            EXPECT_NEAR(x[i], want[i], 1e-6);
            s += x[i];
        }
        EXPECT_NEAR(s, 1.0, 1e-5);
    }
}

// ---------------------------------------------------------------------------------------------
// rope

namespace {

ref::Rope to_ref(const RopeParams& p) {
    return ref::Rope{p.n_dims, p.freq_base, p.yarn, p.factor, p.n_ctx_orig, p.beta_fast, p.beta_slow};
}

}  // namespace

// Tolerance: 2e-5 absolute on values in [-1, 1] (float rotation of double-accurate cos/sin;
// the reference's angles differ from the kernel's only by double rounding).
TEST(Ops, RopePlainMatchesReference) {
    std::mt19937 rng = fresh_rng();
    std::uniform_int_distribution<int64_t> posd(0, 200000);
    RopeParams p;
    p.n_dims = 64;
    p.freq_base = 10000.0f;
    for (int rep = 0; rep < 50; ++rep) {
        const int64_t pos = rep == 0 ? 0 : (rep == 1 ? 1 : posd(rng));
        auto x = uniform(rng, p.n_dims, -1.0f, 1.0f);
        const auto want = ref::rope(x.data(), pos, to_ref(p), false);
        rope(x.data(), pos, p, false);
        for (int64_t i = 0; i < p.n_dims; ++i) ASSERT_NEAR(x[i], want[i], 2e-5) << "pos=" << pos << " i=" << i;
    }
    // Position 1, pair 0 rotates by exactly 1 radian; pair i by base^(-2i/64).
    std::vector<float> x(64, 0.0f);
    for (int i = 0; i < 32; ++i) x[2 * i] = 1.0f;
    rope(x.data(), 1, p, false);
    EXPECT_NEAR(x[0], std::cos(1.0), 1e-7);
    EXPECT_NEAR(x[1], std::sin(1.0), 1e-7);
    EXPECT_NEAR(x[2 * 16], std::cos(std::pow(10000.0, -0.5)), 1e-7);
    EXPECT_NEAR(x[2 * 16 + 1], std::sin(std::pow(10000.0, -0.5)), 1e-7);
}

TEST(Ops, RopeYarn) {
    std::mt19937 rng = fresh_rng();
    std::uniform_int_distribution<int64_t> posd(1000, 1000000);
    RopeParams plain;
    plain.n_dims = 64;
    plain.freq_base = 10000.0f;
    RopeParams yarn = plain;
    yarn.yarn = true;
    yarn.factor = 16.0f;
    yarn.n_ctx_orig = 65536;
    yarn.beta_fast = 32.0f;
    yarn.beta_slow = 1.0f;
    // With these numbers corr_dim(32) = 64 ln(65536 / 64 pi) / (2 ln 10000) = 20.1 -> low 20 and
    // corr_dim(1) = 32.1 -> high 33: pairs 0..20 keep the plain angle, later pairs mix in the
    // interpolated one.
    RopeParams yarn2 = yarn;
    // Base 1e6: corr_dim(32) = 13.4 -> low 13, corr_dim(1) = 21.4 -> high 22, so the last pairs
    // are purely interpolated.
    yarn2.freq_base = 1e6f;
    for (const RopeParams* yp : {&yarn, &yarn2}) {
        RopeParams same_plain = *yp;
        same_plain.yarn = false;
        same_plain.factor = 1.0f;
        for (int rep = 0; rep < 30; ++rep) {
            const int64_t pos = posd(rng);
            const auto x0 = uniform(rng, 64, -1.0f, 1.0f);
            auto x = x0;
            const auto want = ref::rope(x.data(), pos, to_ref(*yp), false);
            rope(x.data(), pos, *yp, false);
            for (int i = 0; i < 64; ++i) ASSERT_NEAR(x[i], want[i], 2e-5) << "pos=" << pos << " i=" << i;
            auto xp = x0;
            rope(xp.data(), pos, same_plain, false);
            double diff = 0;
            for (int i = 0; i < 64; ++i) diff = std::max(diff, static_cast<double>(std::fabs(xp[i] - x[i])));
            EXPECT_GT(diff, 1e-3) << "YaRN must change the low-frequency pairs";
            // Pair 0 lies below `low`: identical angle with or without YaRN.
            EXPECT_EQ(xp[0], x[0]);
            EXPECT_EQ(xp[1], x[1]);
        }
    }
    // yarn2: the last pair is fully interpolated: angle = plain angle / 16.
    const ref::Rope r2 = to_ref(yarn2);
    ref::Rope r2plain = r2;
    r2plain.yarn = false;
    r2plain.factor = 1.0;
    EXPECT_NEAR(ref::rope_theta(r2, 12345, 31), ref::rope_theta(r2plain, 12345, 31) / 16, 1e-9);
    std::vector<float> e(64, 0.0f);
    e[62] = 1.0f;
    rope(e.data(), 12345, yarn2, false);
    const double th = 12345 * std::pow(1e6, -62.0 / 64) / 16;
    EXPECT_NEAR(e[62], std::cos(th), 1e-7);
    EXPECT_NEAR(e[63], std::sin(th), 1e-7);
}

// Linear scaling (rope.scaling.type linear): every pair's angle is the plain one / factor, no
// ramp; factor 1 is the plain rope bit for bit.
TEST(Ops, RopeLinearDividesEveryAngleByTheFactor) {
    std::mt19937 rng = fresh_rng();
    std::uniform_int_distribution<int64_t> posd(1, 1000000);
    std::uniform_real_distribution<float> factord(1.5f, 40.0f);
    RopeParams p;
    p.n_dims = 64;
    p.freq_base = 160000.0f;
    for (int rep = 0; rep < 40; ++rep) {
        p.factor = factord(rng);
        const int64_t pos = posd(rng);
        const auto x0 = uniform(rng, 64, -1.0f, 1.0f);
        auto x = x0;
        rope(x.data(), pos, p, false);
        const auto want = ref::rope(x0.data(), pos, to_ref(p), false);
        for (int i = 0; i < 64; ++i) ASSERT_NEAR(x[i], want[i], 2e-5) << "pos=" << pos << " i=" << i;
        ref::Rope plain = to_ref(p);
        plain.factor = 1.0;
        for (int64_t i = 0; i < 32; ++i)
            ASSERT_NEAR(ref::rope_theta(to_ref(p), pos, i), ref::rope_theta(plain, pos, i) / p.factor,
                        1e-9 * (1 + ref::rope_theta(plain, pos, i)));
    }
    // Pair 0 at position 1: exactly 1/factor radians.
    p.factor = 4.0f;
    std::vector<float> e(64, 0.0f);
    e[0] = 1.0f;
    rope(e.data(), 1, p, false);
    EXPECT_NEAR(e[0], std::cos(0.25), 1e-7);
    EXPECT_NEAR(e[1], std::sin(0.25), 1e-7);
}

// Forward then inverse returns the input to 1e-5.
TEST(Ops, RopeInverse) {
    std::mt19937 rng = fresh_rng();
    std::uniform_int_distribution<int64_t> posd(0, 1000000);
    for (bool y : {false, true}) {
        RopeParams p;
        p.n_dims = 64;
        p.yarn = y;
        p.factor = 16.0f;
        for (int rep = 0; rep < 50; ++rep) {
            const int64_t pos = posd(rng);
            const auto x0 = uniform(rng, 64, -2.0f, 2.0f);
            auto x = x0;
            rope(x.data(), pos, p, false);
            rope(x.data(), pos, p, true);
            for (int i = 0; i < 64; ++i) ASSERT_NEAR(x[i], x0[i], 1e-5);
            auto xi = x0;
            rope(xi.data(), pos, p, true);
            const auto want = ref::rope(x0.data(), pos, to_ref(p), true);
            for (int i = 0; i < 64; ++i) ASSERT_NEAR(xi[i], want[i], 4e-5);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mHC mix

// Tolerance 1e-5 against the float64 Sinkhorn; structure checks below.
TEST(Ops, HcMix) {
    std::mt19937 rng = fresh_rng();
    const float eps = 1e-6f;
    for (int rep = 0; rep < 200; ++rep) {
        const auto m = uniform(rng, 24, -2.0f, 2.0f);
        const auto base = uniform(rng, 24, -1.0f, 1.0f);
        // Odd reps: widely spread logits (c up to +-5); even reps: moderate ones (|c| < 1.5).
        const bool wide = rep % 2;
        const auto scale = uniform(rng, 3, wide ? 0.1f : 0.05f, wide ? 2.0f : 0.5f);
        for (int n_iter : {1, 3, 20}) {
            const HcMix h = hc_mix(m.data(), base.data(), scale.data(), n_iter, eps);
            const ref::HcMix r = ref::hc_mix(m.data(), base.data(), scale.data(), n_iter, eps);
            for (int i = 0; i < 4; ++i) {
                ASSERT_NEAR(h.pre[i], r.pre[i], 1e-6);
                ASSERT_NEAR(h.post[i], r.post[i], 2e-6);
                EXPECT_GT(h.pre[i], eps);
                EXPECT_LT(h.pre[i], 1.0f + 2 * eps);
                EXPECT_GT(h.post[i], 0.0f);
                EXPECT_LT(h.post[i], 2.0f);
                for (int s = 0; s < 4; ++s) ASSERT_NEAR(h.comb[i][s], r.comb[i][s], 1e-5) << n_iter;
            }
            // Each step ends with the dst normalisation, so a row sums to S / (S + eps) with S
            // its sum before the division: a hair below 1, and further below when the row
            // started out small. How far depends on the draw: with n_iter 1 and wide logits a
            // row can hold softmax values near e^-10 in every column, S ~ 2e-4, and then the sum
            // is 1 - eps / S ~ 0.995. So the sum is checked against the float64 reference's sum
            // of the same row, with a floor that holds for every draw (S >= 4 e^-10 here), and
            // tightly where S is near 1 (20 rounds of moderate logits). After 20 rounds the
            // columns have converged as well, to 1e-3 for moderate logits (strongly skewed ones
            // converge more slowly, in the reference too).
            for (int d = 0; d < 4; ++d) {
                float row = 0;
                double want_row = 0;
                for (int s = 0; s < 4; ++s) {
                    row += h.comb[d][s];
                    want_row += r.comb[d][s];
                }
                EXPECT_NEAR(row, want_row, 4e-6) << "row " << d << " n_iter " << n_iter;
                EXPECT_LE(row, 1.0f + 1e-6f);
                EXPECT_GT(row, (n_iter == 20 && !wide) ? 1.0f - 1e-5f : 0.99f);
            }
            if (n_iter == 20 && !wide) {
                for (int s = 0; s < 4; ++s) {
                    float col = 0;
                    for (int d = 0; d < 4; ++d) col += h.comb[d][s];
                    EXPECT_NEAR(col, 1.0f, 1e-3);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Router

// Weights to relative 1e-6; ids exact, except where two of the k + 1 best float64 scores lie
// within float rounding (1e-6 relative) of each other: there the float router may rank them
// either way (seed 3788298236 gave one such pair). Such draws are counted and must stay rare.
TEST(Ops, RouterMatchesReference) {
    std::mt19937 rng = fresh_rng();
    const int64_t n = 256;
    int near_ties = 0;
    for (int rep = 0; rep < 100; ++rep) {
        const int k = rep % 2 ? 6 : 8;
        const float scale = 2.5f;
        const auto logits = uniform(rng, n, -6.0f, 6.0f);
        const auto bias = uniform(rng, n, -0.5f, 0.5f);
        for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
            std::vector<int32_t> ids(k);
            std::vector<float> w(k), p(n);
            router_exact(logits.data(), b, n, k, RouteWeighting{true, scale}, ids.data(), w.data(), p.data());
            const ref::Route r = ref::router(logits.data(), b, n, k, scale);
            for (int64_t e = 0; e < n; ++e) ASSERT_NEAR(p[e], r.p[e], 1e-6 * r.p[e]);
            if (r.near_tie(k, 1e-6)) {
                ++near_ties;
                continue;
            }
            double sum = 0;
            for (int j = 0; j < k; ++j) {
                ASSERT_EQ(ids[j], r.ids[j]) << "rank " << j;
                ASSERT_NEAR(w[j], r.weights[j], 1e-6 * r.weights[j]);
                sum += w[j];
            }
            EXPECT_NEAR(sum, scale, 1e-5);
        }
    }
    EXPECT_LE(near_ties, 10) << "of 200 draws";
}

// expert_weights_norm false: the chosen p, times the scale, are the weights, undivided.
TEST(Ops, RouterWithoutNormKeepsTheChosenP) {
    std::mt19937 rng = fresh_rng();
    const int64_t n = 96;
    for (int rep = 0; rep < 50; ++rep) {
        const int k = 6;
        const float scale = rep % 2 ? 1.0f : 1.5f;
        const auto logits = uniform(rng, n, -6.0f, 6.0f);
        const auto bias = uniform(rng, n, -0.5f, 0.5f);
        std::vector<int32_t> ids(k), ids_norm(k);
        std::vector<float> w(k), w_norm(k);
        router_exact(logits.data(), bias.data(), n, k, RouteWeighting{false, scale}, ids.data(), w.data(), nullptr);
        router_exact(logits.data(), bias.data(), n, k, RouteWeighting{true, scale}, ids_norm.data(), w_norm.data(),
                     nullptr);
        const ref::Route r = ref::router(logits.data(), bias.data(), n, k, scale, false);
        double sum_p = 0;
        for (int j = 0; j < k; ++j) {
            ASSERT_EQ(ids[j], r.ids[j]);
            ASSERT_EQ(ids[j], ids_norm[j]) << "the weighting never changes the choice";
            ASSERT_NEAR(w[j], r.weights[j], 1e-6 * r.weights[j]);
            ASSERT_NEAR(w[j], std::sqrt(ref::softplus(logits[ids[j]])) * scale, 1e-6 * w[j]);
            sum_p += r.p[ids[j]];
        }
        // Normalised weights differ exactly by the chosen sum.
        for (int j = 0; j < k; ++j) ASSERT_NEAR(w_norm[j] * sum_p, w[j], 1e-5 * w[j]);
    }
}

TEST(Ops, RouterTiesAndFloor) {
    std::mt19937 rng = fresh_rng();
    const int64_t n = 64;
    auto logits = uniform(rng, n, -3.0f, 0.0f);
    std::vector<float> bias(n, 0.0f);
    // Experts 40, 5 and 23 share the highest score exactly; 11 and 60 share the next.
    for (int e : {40, 5, 23}) logits[e] = 4.0f;
    for (int e : {60, 11}) logits[e] = 3.0f;
    std::vector<int32_t> ids(4);
    std::vector<float> w(4);
    router_exact(logits.data(), bias.data(), n, 4, RouteWeighting{}, ids.data(), w.data(), nullptr);
    EXPECT_EQ(ids, (std::vector<int32_t>{5, 23, 40, 11}));
    // A bias can make a tie too: expert 7 with a lower logit catches up exactly.
    const float p4 = std::sqrt(softplus(4.0f));
    logits[7] = 0.0f;
    bias[7] = p4 - std::sqrt(softplus(0.0f));
    if (std::sqrt(softplus(0.0f)) + bias[7] == p4) {
        router_exact(logits.data(), bias.data(), n, 4, RouteWeighting{}, ids.data(), w.data(), nullptr);
        EXPECT_EQ(ids, (std::vector<int32_t>{5, 7, 23, 40}));
    }
    // Tiny probabilities: the divisor floor 6.1035e-5 takes over, weights sum below scale.
    std::vector<float> tiny(n, -40.0f);
    for (int e = 0; e < n; ++e) tiny[e] -= static_cast<float>(e) * 0.01f;
    std::vector<float> wt(4);
    router_exact(tiny.data(), nullptr, n, 4, RouteWeighting{true, 2.0f}, ids.data(), wt.data(), nullptr);
    EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2, 3}));
    const ref::Route r = ref::router(tiny.data(), nullptr, n, 4, 2.0);
    double s = 0;
    for (int j = 0; j < 4; ++j) {
        EXPECT_NEAR(wt[j], r.weights[j], 1e-6 * r.weights[j]);
        s += wt[j];
    }
    EXPECT_LT(s, 0.01);
}

// ---------------------------------------------------------------------------------------------
// Engram

// Gate to 1e-5 absolute.
TEST(Ops, EngramGate) {
    std::mt19937 rng = fresh_rng();
    const float eps = 1e-6f;
    for (int64_t n : {7, 64, 1024}) {
        for (int rep = 0; rep < 50; ++rep) {
            const auto key = uniform(rng, n, -2.0f, 2.0f);
            const auto h = uniform(rng, n, -2.0f, 2.0f);
            const auto wk = uniform(rng, n, 0.2f, 1.5f);
            const auto wq = uniform(rng, n, 0.2f, 1.5f);
            const float g = engram_gate(key.data(), h.data(), wk.data(), wq.data(), n, eps);
            ASSERT_NEAR(g, ref::engram_gate(key.data(), h.data(), wk.data(), wq.data(), n, eps), 1e-5);
        }
    }
    // Aligned vs opposed key and h: s = +-mean(w^2)-ish, gate above / below one half.
    std::vector<float> a(16), na(16), w(16, 1.0f);
    for (int i = 0; i < 16; ++i) {
        a[i] = static_cast<float>(i % 5) - 1.5f;
        na[i] = -a[i];
    }
    EXPECT_GT(engram_gate(a.data(), a.data(), w.data(), w.data(), 16, eps), 0.5f);
    EXPECT_LT(engram_gate(a.data(), na.data(), w.data(), w.data(), 16, eps), 0.5f);
}

// ---------------------------------------------------------------------------------------------
// Attention and top-k

// Output to 1e-5 relative to max |row value|.
TEST(Ops, AttentionHeadWithSink) {
    std::mt19937 rng = fresh_rng();
    for (int64_t d : {64, 128, 33}) {
        for (int64_t n_rows : {1, 7, 300}) {
            for (float scale_mul : {1.0f, 40.0f}) {  // 40x: huge logits, tests the max shift
                const auto q = uniform(rng, d, -1.0f, 1.0f);
                const auto kv = uniform(rng, n_rows * d, -1.0f, 1.0f);
                std::vector<const float*> rows(n_rows);
                // Rows out of memory order, as a gather would give them.
                for (int64_t j = 0; j < n_rows; ++j) rows[j] = kv.data() + ((j * 5) % n_rows) * d;
                const float scale = scale_mul / std::sqrt(static_cast<float>(d));
                const float sink = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng) * scale_mul;
                std::vector<float> scratch(n_rows), out(d);
                attention_head(q.data(), rows.data(), n_rows, d, scale, sink, scratch.data(), out.data());
                const auto want = ref::attention_head(q.data(), rows.data(), n_rows, d, scale, sink);
                for (int64_t i = 0; i < d; ++i)
                    ASSERT_NEAR(out[i], want[i], scale_mul > 1 ? 1e-4 : 1e-5)
                        << "d=" << d << " n=" << n_rows << " i=" << i;
            }
        }
    }
    // A huge sink takes all the mass: output ~0. No rows: output exactly 0.
    const float q[2] = {1, 0}, r0[2] = {1, 1};
    const float* rows[1] = {r0};
    float scratch[1], out[2];
    attention_head(q, rows, 1, 2, 1.0f, 100.0f, scratch, out);
    EXPECT_NEAR(out[0], 0.0f, 1e-30);
    attention_head(q, rows, 0, 2, 1.0f, 0.0f, scratch, out);
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 0.0f);
    // Sink at -inf-ish: plain softmax over one row gives that row.
    attention_head(q, rows, 1, 2, 1.0f, -1e30f, scratch, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 1.0f);
}

TEST(Ops, TopKTies) {
    // x = {1, 3, 3, 2, 3, 0}: the three 3s in index order, then the 2.
    const float x[6] = {1, 3, 3, 2, 3, 0};
    int32_t out[6];
    top_k(x, 6, 4, out);
    EXPECT_EQ(std::vector<int32_t>(out, out + 4), (std::vector<int32_t>{1, 2, 4, 3}));
    top_k(x, 6, 6, out);
    EXPECT_EQ(std::vector<int32_t>(out, out + 6), (std::vector<int32_t>{1, 2, 4, 3, 0, 5}));
    top_k(x, 6, 1, out);
    EXPECT_EQ(out[0], 1);

    std::mt19937 rng = fresh_rng();
    std::uniform_int_distribution<int> small(-5, 5);  // few distinct values: many ties
    for (int rep = 0; rep < 200; ++rep) {
        const int64_t n = 1 + rep * 13 % 3000;
        std::vector<float> v(n);
        for (auto& e : v) e = rep % 2 ? static_cast<float>(small(rng)) * 0.5f
                                      : std::uniform_real_distribution<float>(-1, 1)(rng);
        const int64_t k = 1 + (rep * 7) % n;
        std::vector<int32_t> got(k);
        top_k(v.data(), n, k, got.data());
        ASSERT_EQ(got, ref::top_k(v, k)) << "n=" << n << " k=" << k;
    }
}

// The host word is a wrapping sequence: reached at its value and past it (by less than 2^31),
// across the wrap too.
TEST(HostWord, ReachedIsASequenceComparisonThatWraps) {
    EXPECT_TRUE(bg::host_word_reached(7, 7));
    EXPECT_TRUE(bg::host_word_reached(8, 7));
    EXPECT_FALSE(bg::host_word_reached(6, 7));
    EXPECT_TRUE(bg::host_word_reached(1, 0xFFFFFFFFu));
    EXPECT_FALSE(bg::host_word_reached(0xFFFFFFFFu, 1));
    EXPECT_FALSE(bg::host_word_reached(0x80000007u, 7)) << "2^31 past is behind";
}

// Ops::group_by_expert's host copy: counts, gather and scatter one after another, each what the
// op wrote to its own buffer; none written without one.
TEST(Ops, CpuGroupByExpertWritesItsHostCopy) {
    ThreadPool pool(2);
    std::unique_ptr<bg::Ops> ops = bg::cpu::make_cpu_ops(pool);
    std::mt19937 rng = fresh_rng();
    const int64_t ne = 40, k = 6, n_tok = 3, n = n_tok * k, pos0 = 17;
    std::uniform_int_distribution<int32_t> expert(0, static_cast<int32_t>(ne - 1));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = expert(rng);
    std::vector<int32_t> counts(ne + 1), gather(n), scatter(n), copy(ne + 1 + 2 * n, -7);
    ops->group_by_expert(ids.data(), n, k, pos0, ne, counts.data(), gather.data(), scatter.data(), copy.data());
    std::vector<int32_t> want = counts;
    want.insert(want.end(), gather.begin(), gather.end());
    want.insert(want.end(), scatter.begin(), scatter.end());
    EXPECT_EQ(copy, want);
    EXPECT_EQ(counts[ne], 0);
    // The first grouped slot is the first of the lowest expert's (min_element: the first minimum).
    const int64_t first = std::min_element(ids.begin(), ids.end()) - ids.begin();
    EXPECT_EQ(gather[0], pos0 + first / k);
    EXPECT_EQ(scatter[0], pos0 * k + first);
    std::vector<int32_t> counts2(ne + 1);
    ops->group_by_expert(ids.data(), n, k, pos0, ne, counts2.data(), gather.data(), scatter.data(), nullptr);
    EXPECT_EQ(counts2, counts);
}

// The CPU's ops run as they are queued: Ops::wait_host_word returns at once for a word already
// reached, and otherwise once another thread publishes it (what it wrote before is seen after).
TEST(Ops, CpuWaitHostWordReturnsOnceAnotherThreadPublishesIt) {
    ThreadPool pool(2);
    std::unique_ptr<bg::Ops> ops = bg::cpu::make_cpu_ops(pool);
    uint32_t word = 0;
    int payload = 0;
    ops->wait_host_word(&word, 0);
    ops->wait_host_word(&word, 0xFFFFFFF0u);
    std::atomic<bool> published{false};
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        payload = 42;
        published.store(true);
        bg::publish_host_word(&word, 2);
    });
    ops->wait_host_word(&word, 2);
    EXPECT_TRUE(published.load());
    EXPECT_EQ(payload, 42);
    writer.join();
}
