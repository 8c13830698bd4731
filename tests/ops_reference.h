// Float64 reference implementations of the CPU ops, written straight from the formulas in
// engine/cpu/ops.h with no attention to speed, so the optimised kernels have something
// independent to be compared against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <numeric>
#include <vector>

namespace ref {

// y[t][r] = sum_i W[r][i] * x[t][i]; W given as dequantised floats, [rows][cols].
inline std::vector<double> matmul(const std::vector<float>& W, int64_t rows, int64_t cols,
                                  const float* x, int64_t ldx, int64_t n_tok) {
    std::vector<double> y(static_cast<size_t>(rows * n_tok));
    for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            double s = 0;
            for (int64_t i = 0; i < cols; ++i)
                s += static_cast<double>(W[r * cols + i]) * x[t * ldx + i];
            y[t * rows + r] = s;
        }
    return y;
}

inline std::vector<double> rmsnorm(const float* x, const float* w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double s = 1.0 / std::sqrt(ss / n + eps);
    std::vector<double> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * (w ? w[i] : 1.0);
    return y;
}

struct Rope {
    int64_t n_dims;
    double freq_base;
    bool yarn;
    double factor;
    int64_t n_ctx_orig;
    double beta_fast, beta_slow;
};

// Angle of pair i at position pos.
inline double rope_theta(const Rope& p, int64_t pos, int64_t i) {
    const double extrap = pos * std::pow(p.freq_base, -2.0 * i / p.n_dims);
    if (!p.yarn) return extrap / p.factor;  // linear scaling (factor 1: none)
    const double interp = extrap / p.factor;
    auto corr_dim = [&](double beta) {
        return p.n_dims * std::log(p.n_ctx_orig / (beta * 2 * std::numbers::pi)) /
               (2 * std::log(p.freq_base));
    };
    const double low = std::max(0.0, std::floor(corr_dim(p.beta_fast)));
    const double high = std::min(static_cast<double>(p.n_dims - 1), std::ceil(corr_dim(p.beta_slow)));
    const double y = (i - low) / std::max(0.001, high - low);
    const double mix = 1 - std::clamp(y, 0.0, 1.0);
    return interp * (1 - mix) + extrap * mix;
}

inline std::vector<double> rope(const float* x, int64_t pos, const Rope& p, bool inverse) {
    std::vector<double> y(static_cast<size_t>(p.n_dims));
    for (int64_t i = 0; i < p.n_dims / 2; ++i) {
        const double th = rope_theta(p, pos, i) * (inverse ? -1 : 1);
        y[2 * i] = x[2 * i] * std::cos(th) - x[2 * i + 1] * std::sin(th);
        y[2 * i + 1] = x[2 * i] * std::sin(th) + x[2 * i + 1] * std::cos(th);
    }
    return y;
}

inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
inline double softplus(double x) { return x > 30 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
inline double silu(double x) { return x * sigmoid(x); }

// form 0 = DeepSeek (clamp the gate input), 1 = llama.cpp (clamp the silu output).
inline double swiglu(double g, double u, double limit, int form) {
    if (limit <= 1e-6) return silu(g) * u;  // llama.cpp clamps only above 1e-6
    const double uc = std::clamp(u, -limit, limit);
    if (form == 0) return silu(std::min(g, limit)) * uc;
    return std::min(silu(g), limit) * uc;
}

inline std::vector<double> softmax(const std::vector<double>& x) {
    const double mx = *std::max_element(x.begin(), x.end());
    std::vector<double> y(x.size());
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += y[i] = std::exp(x[i] - mx);
    for (auto& v : y) v /= s;
    return y;
}

struct HcMix {
    double pre[4], post[4], comb[4][4];
};

inline HcMix hc_mix(const float* m, const float* base, const float* scale, int n_iter, double eps) {
    HcMix r;
    for (int i = 0; i < 4; ++i) {
        r.pre[i] = sigmoid(static_cast<double>(scale[0]) * m[i] + base[i]) + eps;
        r.post[i] = 2 * sigmoid(static_cast<double>(scale[1]) * m[4 + i] + base[4 + i]);
    }
    double c[4][4];
    for (int d = 0; d < 4; ++d)
        for (int s = 0; s < 4; ++s)
            c[d][s] = static_cast<double>(scale[2]) * m[8 + d + 4 * s] + base[8 + d + 4 * s];
    for (int s = 0; s < 4; ++s) {
        std::vector<double> col = {c[0][s], c[1][s], c[2][s], c[3][s]};
        col = softmax(col);
        for (int d = 0; d < 4; ++d) c[d][s] = col[d] + eps;
    }
    auto rows = [&] {
        for (int d = 0; d < 4; ++d) {
            double t = eps;
            for (int s = 0; s < 4; ++s) t += c[d][s];
            for (int s = 0; s < 4; ++s) c[d][s] /= t;
        }
    };
    auto cols = [&] {
        for (int s = 0; s < 4; ++s) {
            double t = eps;
            for (int d = 0; d < 4; ++d) t += c[d][s];
            for (int d = 0; d < 4; ++d) c[d][s] /= t;
        }
    };
    rows();
    for (int it = 0; it < n_iter - 1; ++it) {
        cols();
        rows();
    }
    for (int d = 0; d < 4; ++d)
        for (int s = 0; s < 4; ++s) r.comb[d][s] = c[d][s];
    return r;
}

// Indices of the k largest, descending, ties to the lower index: a stable sort of everything.
template <typename T>
inline std::vector<int32_t> top_k(const std::vector<T>& x, int64_t k) {
    std::vector<int32_t> idx(x.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
    idx.resize(static_cast<size_t>(k));
    return idx;
}

struct Route {
    std::vector<int32_t> ids;
    std::vector<double> weights, p;
    std::vector<double> score;  // what the top-k ranks: p + bias
    // Whether two of the k + 1 best scores are closer than rel (relative): a float engine may
    // then rank them either way, its rounding being the only thing that separates them.
    bool near_tie(int k, double rel) const {
        std::vector<double> s = score;
        std::sort(s.begin(), s.end(), std::greater<double>());
        for (int j = 0; j < k && j + 1 < static_cast<int>(s.size()); ++j)
            if (s[j] - s[j + 1] <= rel * std::max(1.0, std::abs(s[j]))) return true;
        return false;
    }
};

// norm: divide by the chosen sum (expert_weights_norm); scale applied as given.
inline Route router(const float* logits, const float* bias, int64_t n, int k, double scale, bool norm = true) {
    Route r;
    std::vector<double>& score = r.score;
    score.resize(static_cast<size_t>(n));
    r.p.resize(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) {
        r.p[e] = std::sqrt(softplus(logits[e]));
        score[e] = r.p[e] + (bias ? bias[e] : 0.0);
    }
    r.ids = top_k(score, k);
    double sum = 0;
    for (int32_t id : r.ids) sum += r.p[id];
    for (int32_t id : r.ids) r.weights.push_back((norm ? r.p[id] / std::max(sum, 6.1035e-5) : r.p[id]) * scale);
    return r;
}

// Products taken in 128 bits and reduced mod 2^64 explicitly.
inline std::vector<uint64_t> engram_hash(const uint64_t* c, const uint64_t* mult, const uint64_t* primes,
                                         const uint64_t* offsets, int n_head) {
    auto mul = [](uint64_t a, uint64_t b) {
        const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
        return static_cast<uint64_t>(p % (static_cast<unsigned __int128>(1) << 64));
    };
    std::vector<uint64_t> rows;
    uint64_t h = mul(c[0], mult[0]);
    for (int k = 1; k <= 3; ++k) {
        h = h ^ mul(c[k], mult[k]);
        for (int j = 0; j < n_head; ++j) {
            const int i = (k - 1) * n_head + j;
            rows.push_back(h % primes[i] + offsets[i]);
        }
    }
    return rows;
}

inline double engram_gate(const float* key, const float* h, const float* wk, const float* wq, int64_t n,
                          double eps) {
    const auto kn = rmsnorm(key, wk, n, eps);
    const auto hn = rmsnorm(h, wq, n, eps);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += kn[i] * hn[i];
    s /= std::sqrt(static_cast<double>(n));
    const double sgn = s > 0 ? 1 : (s < 0 ? -1 : 0);
    return sigmoid(sgn * std::sqrt(std::max(std::fabs(s), 1e-6)));
}

inline std::vector<double> attention_head(const float* q, const float* const* rows, int64_t n_rows,
                                          int64_t d, double scale, double sink) {
    // Softmax over n_rows logits plus the sink, done as a log-sum-exp.
    std::vector<double> logit(static_cast<size_t>(n_rows));
    double mx = sink;
    for (int64_t j = 0; j < n_rows; ++j) {
        double s = 0;
        for (int64_t i = 0; i < d; ++i) s += static_cast<double>(q[i]) * rows[j][i];
        logit[j] = scale * s;
        mx = std::max(mx, logit[j]);
    }
    double z = std::exp(sink - mx);
    for (double l : logit) z += std::exp(l - mx);
    std::vector<double> out(static_cast<size_t>(d), 0.0);
    for (int64_t j = 0; j < n_rows; ++j) {
        const double w = std::exp(logit[j] - mx) / z;
        for (int64_t i = 0; i < d; ++i) out[i] += w * rows[j][i];
    }
    return out;
}

}  // namespace ref
