// Logits for the greedy choice's tests (Ops::argmax against the host's runtime/sampler.h argmax):
// a vocabulary of random logits, and the cases where "the first index of the largest" has to
// decide (ties, NaN, -inf, banned ids, every value NaN, lengths around a GPU block's and grid's
// reach).
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/types.h"
#include "runtime/sampler.h"

namespace bgtest {

struct ArgmaxCase {
    std::string what;
    std::vector<float> x;
    bg::TokenBan ban;
};

inline std::vector<ArgmaxCase> argmax_cases(std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 3.0f);
    auto logits = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = nd(rng);
        return v;
    };
    std::uniform_int_distribution<int32_t> pick(0, 129279);
    std::vector<ArgmaxCase> cs;
    cs.push_back({"vocabulary", logits(129280), {}});
    {
        ArgmaxCase c{"two indices tie at the max", logits(129280), {}};
        const int32_t a = pick(rng) % 60000, b = 60000 + pick(rng) % 60000;
        c.x[a] = c.x[b] = 100.0f;
        cs.push_back(c);
    }
    {
        ArgmaxCase c{"NaN beside the max", logits(129280), {}};
        for (int i = 0; i < 500; ++i) c.x[static_cast<size_t>(pick(rng))] = NAN;
        c.x[0] = NAN;
        cs.push_back(c);
    }
    {
        ArgmaxCase c{"the max banned, and others", logits(129280), {}};
        const int32_t top = pick(rng);
        c.x[static_cast<size_t>(top)] = 1e30f;
        c.ban.ids[c.ban.n++] = top;
        c.ban.ids[c.ban.n++] = 1;
        c.ban.ids[c.ban.n++] = 129279;
        cs.push_back(c);
    }
    {
        ArgmaxCase c{"every value NaN", std::vector<float>(3000, NAN), {}};
        cs.push_back(c);
    }
    {
        ArgmaxCase c{"-inf and NaN only, one -inf banned", std::vector<float>(2000, NAN), {}};
        c.x[700] = c.x[1500] = -INFINITY;
        c.ban.ids[c.ban.n++] = 1800;  // a NaN banned counts as -inf: the first -inf is still 700
        cs.push_back(c);
    }
    for (int64_t n : {1, 5, 1023, 1024, 1025, 4097, 300000}) cs.push_back({"n " + std::to_string(n), logits(n), {}});
    return cs;
}

// The host's choice: banned ids set to -inf, then runtime/sampler.h's argmax.
inline int32_t host_greedy(const ArgmaxCase& c) {
    std::vector<float> x = c.x;
    for (int b = 0; b < c.ban.n; ++b) x[static_cast<size_t>(c.ban.ids[b])] = -INFINITY;
    return bg::argmax(x.data(), static_cast<int64_t>(x.size()));
}

}  // namespace bgtest
