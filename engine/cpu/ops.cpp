#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "cpu/bf16_rows.h"
#include "util/check.h"

namespace bg::cpu {

namespace {

// Sixteen independent partial sums: the lanes do not depend on each other, so -O3 turns the
// inner loop into SIMD without needing -ffast-math to reassociate a single running sum.
constexpr int kLanes = 16;

inline float dot(const float* a, const float* b, int64_t n) {
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
    float tail = 0.0f;
    for (; i < n; ++i) tail += a[i] * b[i];
    // Pairwise fold keeps the rounding error of the final reduction small.
    for (int w = kLanes / 2; w > 0; w /= 2)
        for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    return acc[0] + tail;
}

inline float sum_squares(const float* x, int64_t n) { return dot(x, x, n); }

// Per-thread row scratch, grown to the widest row seen and then reused: no allocation on the
// steady state. Each pool thread (and the caller) has its own.
float* row_scratch(int64_t n) {
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
    return buf.data();
}

template <typename T>
T* grow_scratch(std::vector<T>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
}

struct MatmulJob {
    const MatView* W;
    const float* x;
    int64_t ldx, n_tok;
    float* y;
    int64_t ldy;
    CpuIsa isa;
};

void matmul_rows(const MatmulJob& j, int64_t r0, int64_t r1) {
    const MatView& W = *j.W;
    if (W.type == GgmlType::BF16) {
        bf16_rows(j.isa, W, j.x, j.ldx, j.n_tok, j.y, j.ldy, r0, r1);
        return;
    }
    const int64_t cols = W.cols;
    float* scratch = W.type == GgmlType::F32 ? nullptr : row_scratch(cols);  // [cols]
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* src = W.data + static_cast<uint64_t>(r) * W.row_stride;
        const float* w;
        if (scratch == nullptr) {
            w = reinterpret_cast<const float*>(src);
        } else {
            dequantize_row(W.type, src, scratch, cols);
            w = scratch;
        }
        for (int64_t t = 0; t < j.n_tok; ++t) j.y[t * j.ldy + r] = dot(w, j.x + t * j.ldx, cols);
    }
}

}  // namespace


void matmul(ThreadPool& pool, const MatView& W, const float* x, int64_t ldx, int64_t n_tok,
            float* y, int64_t ldy, CpuIsa isa) {
    BG_CHECK(W.data != nullptr || W.rows == 0);
    BG_CHECK(W.row_stride >= row_bytes(W.type, W.cols));
    BG_CHECK(n_tok <= 1 || (ldx >= W.cols && ldy >= W.rows));
    if (W.rows == 0 || n_tok <= 0) return;
    const MatmulJob job{&W, x, ldx, n_tok, y, ldy, isa};
    // The work goes out in groups of the rows a kernel takes together (BF16's four; one else).
    const int64_t group = W.type == GgmlType::BF16 ? kBf16RowsTogether : 1;
    const MatmulJob* jp = &job;
    const auto fn = [jp, group](int64_t g0, int64_t g1) {
        matmul_rows(*jp, g0 * group, std::min(g1 * group, jp->W->rows));
    };
    // About 64K multiply-adds per chunk at least: below that a wake-up costs more than it saves.
    const int64_t work_per_group = std::max<int64_t>(1, W.cols * n_tok * group);
    const int64_t min_chunk = std::max<int64_t>(1, (int64_t{1} << 16) / work_per_group);
    pool.parallel_for((W.rows + group - 1) / group, fn, min_chunk);
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
    const float ms = sum_squares(x, n) / static_cast<float>(n);
    const float s = 1.0f / std::sqrt(ms + eps);
    if (w) {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * w[i];
    } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
    }
}

void rope(float* x, int64_t pos, const RopeParams& p, bool inverse) {
    BG_CHECK(p.n_dims > 0 && p.n_dims % 2 == 0);
    const int64_t n_pairs = p.n_dims / 2;
    float low = 0.0f, high = 0.0f;
    if (p.yarn) {
        // In float like ggml, so the ramp's integer end points land where ggml's do.
        const auto corr_dim = [&](float beta) {
            return static_cast<float>(p.n_dims) *
                   std::log(static_cast<float>(p.n_ctx_orig) / (beta * 2.0f * std::numbers::pi_v<float>)) /
                   (2.0f * std::log(p.freq_base));
        };
        low = std::max(0.0f, std::floor(corr_dim(p.beta_fast)));
        high = std::min(static_cast<float>(p.n_dims - 1), std::ceil(corr_dim(p.beta_slow)));
    }
    // Angles in double: at long positions (pos ~ 1e6) a float angle would lose whole radians'
    // worth of fractional precision.
    for (int64_t i = 0; i < n_pairs; ++i) {
        const double theta_extrap =
            static_cast<double>(pos) *
            std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / p.n_dims);
        double theta = theta_extrap / p.factor;
        if (p.yarn) {
            const double theta_interp = theta_extrap / p.factor;
            const float yv = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
            const double mix = 1.0 - std::min(1.0f, std::max(0.0f, yv));
            theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
        }
        const float c = static_cast<float>(std::cos(theta));
        const float s = static_cast<float>(inverse ? -std::sin(theta) : std::sin(theta));
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

float softplus(float x) {
    // max(x, 0) + log(1 + e^-|x|): the exponent is never positive, so nothing overflows, and
    // log1p keeps precision when e^-|x| is tiny.
    return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
}

float silu(float x) { return x * sigmoid(x); }

void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form,
            float* out) {
    if (limit <= kSwigluNoClamp) {
        for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float u = std::min(limit, std::max(-limit, up[i]));
        if (form == SwigluClamp::kDeepSeek) {
            out[i] = silu(std::min(gate[i], limit)) * u;
        } else {
            out[i] = std::min(silu(gate[i]), limit) * u;
        }
    }
}

void softmax(float* x, int64_t n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

HcMix hc_mix(const float m[24], const float base[24], const float scale[3], int n_iter, float eps) {
    BG_CHECK(n_iter >= 1);
    HcMix r;
    for (int i = 0; i < 4; ++i) {
        r.pre[i] = sigmoid(scale[0] * m[i] + base[i]) + eps;
        r.post[i] = 2.0f * sigmoid(scale[1] * m[4 + i] + base[4 + i]);
    }
    float (&c)[4][4] = r.comb;  // c[dst][src]
    for (int dst = 0; dst < 4; ++dst)
        for (int src = 0; src < 4; ++src)
            c[dst][src] = scale[2] * m[8 + dst + 4 * src] + base[8 + dst + 4 * src];

    const auto norm_src_over_dst = [&] {  // each column (fixed src) sums to ~1
        for (int src = 0; src < 4; ++src) {
            const float s = c[0][src] + c[1][src] + c[2][src] + c[3][src] + eps;
            for (int dst = 0; dst < 4; ++dst) c[dst][src] /= s;
        }
    };
    const auto norm_dst_over_src = [&] {  // each row (fixed dst) sums to ~1
        for (int dst = 0; dst < 4; ++dst) {
            const float s = c[dst][0] + c[dst][1] + c[dst][2] + c[dst][3] + eps;
            for (int src = 0; src < 4; ++src) c[dst][src] /= s;
        }
    };

    for (int src = 0; src < 4; ++src) {
        float mx = c[0][src];
        for (int dst = 1; dst < 4; ++dst) mx = std::max(mx, c[dst][src]);
        float sum = 0.0f;
        for (int dst = 0; dst < 4; ++dst) {
            c[dst][src] = std::exp(c[dst][src] - mx);
            sum += c[dst][src];
        }
        for (int dst = 0; dst < 4; ++dst) c[dst][src] = c[dst][src] / sum + eps;
    }
    norm_dst_over_src();
    for (int it = 1; it < n_iter; ++it) {
        norm_src_over_dst();
        norm_dst_over_src();
    }
    return r;
}

void router_exact(const float* logits, const float* bias, int64_t n_expert, int k, RouteWeighting wt,
                  int32_t* ids, float* weights, float* p_out) {
    BG_CHECK(k >= 1 && k <= n_expert);
    thread_local std::vector<float> p_buf, score_buf;
    float* p = grow_scratch(p_buf, n_expert);          // [n_expert]
    float* score = grow_scratch(score_buf, n_expert);  // [n_expert]
    for (int64_t e = 0; e < n_expert; ++e) {
        p[e] = std::sqrt(softplus(logits[e]));
        score[e] = p[e] + (bias ? bias[e] : 0.0f);
    }
    top_k(score, n_expert, k, ids);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += p[ids[j]];
    // The divisor's floor is the smallest normal f16, so a degenerate router cannot blow up.
    const float f = wt.factor(sum);
    for (int j = 0; j < k; ++j) weights[j] = p[ids[j]] * f;
    if (p_out) std::copy(p, p + n_expert, p_out);
}

float engram_gate(const float* key, const float* h, const float* wk, const float* wq, int64_t n,
                  float eps) {
    const float rk = 1.0f / std::sqrt(sum_squares(key, n) / static_cast<float>(n) + eps);
    const float rh = 1.0f / std::sqrt(sum_squares(h, n) / static_cast<float>(n) + eps);
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l)
            acc[l] += (key[i + l] * wk[i + l]) * (h[i + l] * wq[i + l]);
    float raw = 0.0f;
    for (; i < n; ++i) raw += (key[i] * wk[i]) * (h[i] * wq[i]);
    for (int l = 0; l < kLanes; ++l) raw += acc[l];
    const float s = raw * rk * rh / std::sqrt(static_cast<float>(n));
    const float sgn = s > 0.0f ? 1.0f : (s < 0.0f ? -1.0f : 0.0f);
    return sigmoid(sgn * std::sqrt(std::max(std::fabs(s), 1e-6f)));
}

void attention_head(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                    float scale, float sink, float* scratch, float* out) {
    // scratch: [n_rows] logits, then weights.
    float mx = sink;  // the sink takes part in the max so exp(sink - mx) cannot overflow either
    for (int64_t j = 0; j < n_rows; ++j) {
        scratch[j] = scale * dot(q, rows[j], d);
        mx = std::max(mx, scratch[j]);
    }
    float denom = std::exp(sink - mx);
    for (int64_t j = 0; j < n_rows; ++j) {
        scratch[j] = std::exp(scratch[j] - mx);
        denom += scratch[j];
    }
    const float inv = 1.0f / denom;
    std::fill(out, out + d, 0.0f);
    for (int64_t j = 0; j < n_rows; ++j) {
        const float wj = scratch[j] * inv;
        const float* r = rows[j];
        for (int64_t i = 0; i < d; ++i) out[i] += wj * r[i];
    }
}

void top_k(const float* x, int64_t n, int64_t k, int32_t* out) {
    BG_CHECK(k >= 0 && k <= n);
    if (k == 0) return;
    thread_local std::vector<int32_t> idx_buf;
    int32_t* idx = grow_scratch(idx_buf, n);  // [n] candidate indices
    std::iota(idx, idx + n, 0);
    // A strict total order (value, then index) makes the result unique whatever the algorithm.
    const auto before = [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    std::partial_sort(idx, idx + k, idx + n, before);
    std::copy(idx, idx + k, out);
}

}  // namespace bg::cpu
