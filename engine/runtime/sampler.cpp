#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "util/check.h"

namespace bg {

int32_t argmax(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingConfig& cfg) : cfg_(cfg), rng_(mix_seed(cfg.seed, 0x5A3B)) {
    if (!(cfg.temp >= 0.0) || !std::isfinite(cfg.temp)) fail("--temp must be a finite number >= 0, got %g", cfg.temp);
    if (!(cfg.top_p >= 0.0 && cfg.top_p <= 1.0)) fail("--top-p must be in [0, 1], got %g", cfg.top_p);
    if (!(cfg.min_p >= 0.0 && cfg.min_p <= 1.0)) fail("--min-p must be in [0, 1], got %g", cfg.min_p);
}

std::vector<Candidate> Sampler::filter(const float* logits, int64_t n) const {
    BG_CHECK(n > 0);
    std::vector<Candidate> c(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) c[i] = {static_cast<int32_t>(i), logits[i]};
    auto higher = [](const Candidate& a, const Candidate& b) { return a.logit != b.logit ? a.logit > b.logit : a.id < b.id; };
    if (cfg_.top_k > 0 && cfg_.top_k < n) {
        std::partial_sort(c.begin(), c.begin() + cfg_.top_k, c.end(), higher);
        c.resize(static_cast<size_t>(cfg_.top_k));
    } else {
        std::sort(c.begin(), c.end(), higher);
    }
    // Probabilities of the survivors at temperature 1, relative to the best (exp(0) = 1).
    std::vector<double> p(c.size());
    double sum = 0.0;
    for (size_t i = 0; i < c.size(); ++i) sum += p[i] = std::exp(static_cast<double>(c[i].logit) - c[0].logit);
    if (cfg_.top_p < 1.0) {
        // The fewest most likely tokens whose probabilities add up to at least top_p.
        double cum = 0.0;
        size_t keep = 0;
        while (keep < c.size()) {
            cum += p[keep++] / sum;
            if (cum >= cfg_.top_p) break;
        }
        c.resize(keep);
        p.resize(keep);
    }
    if (cfg_.min_p > 0.0) {
        // Probability at least min_p times the best one's (p[0] == 1).
        size_t keep = 1;
        while (keep < c.size() && p[keep] >= cfg_.min_p) ++keep;
        c.resize(keep);
    }
    return c;
}

int32_t Sampler::sample(const float* logits, int64_t n) {
    if (greedy()) return argmax(logits, n);
    const std::vector<Candidate> c = filter(logits, n);
    std::vector<double> w(c.size());
    double sum = 0.0;
    for (size_t i = 0; i < c.size(); ++i) sum += w[i] = std::exp((static_cast<double>(c[i].logit) - c[0].logit) / cfg_.temp);
    double u = rng_.uniform() * sum;
    size_t last = 0;  // the last candidate with any weight (a logit of -inf has none)
    for (size_t i = 0; i < c.size(); ++i) {
        if (w[i] > 0) last = i;
        if (u < w[i]) return c[i].id;
        u -= w[i];
    }
    return c[last].id;  // rounding left u at the very end
}

}  // namespace bg
