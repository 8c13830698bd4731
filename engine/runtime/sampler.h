// Picks the next token from logits. Temperature 0 is greedy (the highest logit, the lowest id
// among equals), the benchmark default. Otherwise, in llama.cpp's default order: top-k, top-p
// and min-p filter the candidates on the untempered distribution, then one is drawn from the
// survivors' softmax at the temperature, with a generator seeded by `seed` (same seed, same
// logits: same tokens).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/argmax.h"
#include "util/rng.h"

namespace bg {

struct SamplingConfig {
    double temp = 0.0;     // <= 0: greedy
    int64_t top_k = 40;    // <= 0: no limit
    double top_p = 0.95;   // >= 1: no limit
    double min_p = 0.05;   // <= 0: no limit
    uint64_t seed = 1;
};

struct Candidate {
    int32_t id;
    float logit;
};

class Sampler {
public:
    // Throws bg::Error for a value outside its range (top_p and min_p in [0, 1], temp >= 0).
    explicit Sampler(const SamplingConfig& cfg);

    // A decode step's draw: no allocation once the first call has sized the work buffers.
    int32_t sample(const float* logits, int64_t n);
    bool greedy() const { return cfg_.temp <= 0.0; }

    // The candidates top-k, top-p and min-p keep, highest logit first (ties: lower id first).
    std::vector<Candidate> filter(const float* logits, int64_t n);

private:
    // filter()'s work, into kept_ (and the survivors' relative probabilities into p_).
    void filter_into(const float* logits, int64_t n);

    SamplingConfig cfg_;
    Rng rng_;
    std::vector<Candidate> kept_;  // [top_k or n] the survivors, best first
    std::vector<double> p_;        // [kept_.size()] exp(logit - best logit)
};

// Index of the highest value, the lowest index among equals; NaNs are never chosen (0 when every
// value is NaN): cpu::argmax without a ban.
inline int32_t argmax(const float* x, int64_t n) { return cpu::argmax(x, n); }

}  // namespace bg
