#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "util/check.h"

namespace bg {

Sampler::Sampler(const SamplingConfig& cfg) : cfg_(cfg), rng_(mix_seed(cfg.seed, 0x5A3B)) {
    if (!(cfg.temp >= 0.0) || !std::isfinite(cfg.temp)) fail("--temp must be a finite number >= 0, got %g", cfg.temp);
    if (!(cfg.top_p >= 0.0 && cfg.top_p <= 1.0)) fail("--top-p must be in [0, 1], got %g", cfg.top_p);
    if (!(cfg.min_p >= 0.0 && cfg.min_p <= 1.0)) fail("--min-p must be in [0, 1], got %g", cfg.min_p);
}

namespace {

// Higher logit first, then lower id: a strict total order on candidates of distinct ids.
bool higher(const Candidate& a, const Candidate& b) { return a.logit != b.logit ? a.logit > b.logit : a.id < b.id; }

}  // namespace

void Sampler::filter_into(const float* logits, int64_t n) {
    BG_CHECK(n > 0);
    kept_.clear();
    if (cfg_.top_k > 0 && cfg_.top_k < n) {
        // The k best in one pass over the logits, kept as a heap whose front is the worst of
        // them, so most logits cost one comparison with it (the vocabulary is never copied).
        // Ids rise with the scan, so once k are kept a logit must exceed the worst kept one's to
        // enter; sixteen logits at a time are checked against it first.
        const size_t k = static_cast<size_t>(cfg_.top_k);
        kept_.reserve(k);
        auto offer = [&](int64_t i) {
            const Candidate c{static_cast<int32_t>(i), logits[i]};
            if (kept_.size() < k) {
                kept_.push_back(c);
                std::push_heap(kept_.begin(), kept_.end(), higher);
            } else if (higher(c, kept_.front())) {
                std::pop_heap(kept_.begin(), kept_.end(), higher);
                kept_.back() = c;
                std::push_heap(kept_.begin(), kept_.end(), higher);
            }
        };
        int64_t i = 0;
        for (; i < n && kept_.size() < k; ++i) offer(i);
#if defined(__SSE2__)
        for (; i + 16 <= n; i += 16) {
            const __m128 worst = _mm_set1_ps(kept_.front().logit);
            int above = 0;
            for (int q = 0; q < 4; ++q) above |= _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(logits + i + 4 * q), worst));
            if (above)
                for (int64_t j = i; j < i + 16; ++j) offer(j);
        }
#endif
        for (; i < n; ++i) offer(i);
        std::sort_heap(kept_.begin(), kept_.end(), higher);
    } else {
        kept_.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) kept_[i] = {static_cast<int32_t>(i), logits[i]};
        std::sort(kept_.begin(), kept_.end(), higher);
    }
    // Probabilities of the survivors at temperature 1, relative to the best (exp(0) = 1).
    p_.resize(kept_.size());
    double sum = 0.0;
    for (size_t i = 0; i < kept_.size(); ++i) sum += p_[i] = std::exp(static_cast<double>(kept_[i].logit) - kept_[0].logit);
    if (cfg_.top_p < 1.0) {
        // The fewest most likely tokens whose probabilities add up to at least top_p.
        double cum = 0.0;
        size_t keep = 0;
        while (keep < kept_.size()) {
            cum += p_[keep++] / sum;
            if (cum >= cfg_.top_p) break;
        }
        kept_.resize(keep);
        p_.resize(keep);
    }
    if (cfg_.min_p > 0.0) {
        // Probability at least min_p times the best one's (p[0] == 1).
        size_t keep = 1;
        while (keep < kept_.size() && p_[keep] >= cfg_.min_p) ++keep;
        kept_.resize(keep);
        p_.resize(keep);
    }
}

std::vector<Candidate> Sampler::filter(const float* logits, int64_t n) {
    filter_into(logits, n);
    return kept_;
}

int32_t Sampler::sample(const float* logits, int64_t n) {
    if (greedy()) return argmax(logits, n);
    filter_into(logits, n);
    // The survivors' weights at the temperature, in p_ (their temperature-1 values are done with).
    double sum = 0.0;
    for (size_t i = 0; i < kept_.size(); ++i)
        sum += p_[i] = std::exp((static_cast<double>(kept_[i].logit) - kept_[0].logit) / cfg_.temp);
    double u = rng_.uniform() * sum;
    size_t last = 0;  // the last candidate with any weight (a logit of -inf has none)
    for (size_t i = 0; i < kept_.size(); ++i) {
        if (p_[i] > 0) last = i;
        if (u < p_[i]) return kept_[i].id;
        u -= p_[i];
    }
    return kept_[last].id;  // rounding left u at the very end
}

}  // namespace bg
