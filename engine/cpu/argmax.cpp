#include "cpu/argmax.h"

#include <cmath>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace bg::cpu {

namespace {

bool banned(const TokenBan& ban, int64_t i) {
    for (int b = 0; b < ban.n; ++b)
        if (ban.ids[b] == i) return true;
    return false;
}

// The rule in one pass: a later equal value does not replace the lead, NaN never compares, and
// -inf counts (a banned id, as -inf, is the choice only where all else is -inf or NaN). The ban
// is looked at only where a value would take the lead.
int32_t argmax_one_pass(const float* x, int64_t n, const TokenBan& ban) {
    float m = -INFINITY;
    int64_t at = -1;
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i];
        if (!(v > m || (v == m && at < 0))) continue;
        if (banned(ban, i)) v = -INFINITY;
        if (v > m || (v == m && at < 0)) m = v, at = i;
    }
    return static_cast<int32_t>(at < 0 ? 0 : at);
}

}  // namespace

int32_t argmax(const float* x, int64_t n, const TokenBan& ban) {
    // Two passes: the largest value (a comparison that is false for NaN skips it), then the first
    // unbanned index holding it. One pass with the index beside the running best is a chain of
    // dependent compares and branches: 73-120 us for a 129,280-entry vocabulary on one core of
    // the development machine, the host's work between two decode steps.
    float m = -INFINITY;
    int64_t i = 0;
#if defined(__SSE2__)
    // Sixteen running maxima: maxps(v, m) is v > m ? v : m, as the plain loop below.
    __m128 best[4] = {_mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY)};
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; ++k) best[k] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * k), best[k]);
    alignas(16) float lanes[16];
    for (int k = 0; k < 4; ++k) _mm_store_ps(lanes + 4 * k, best[k]);
    for (float v : lanes) m = v > m ? v : m;
#endif
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    // Where the largest is -inf (or all is NaN), a banned id may be the first -inf: the one-pass
    // rule decides, as it does where every index holding the largest is banned.
    if (m == -INFINITY) return argmax_one_pass(x, n, ban);
    i = 0;
#if defined(__SSE2__)
    const __m128 want = _mm_set1_ps(m);
    for (; i + 16 <= n; i += 16) {
        int hit = 0;
        for (int k = 0; k < 4; ++k) hit |= _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i + 4 * k), want)) << (4 * k);
        while (hit) {
            const int64_t at = i + __builtin_ctz(static_cast<unsigned>(hit));
            if (!banned(ban, at)) return static_cast<int32_t>(at);
            hit &= hit - 1;
        }
    }
#endif
    for (; i < n; ++i)
        if (x[i] == m && !banned(ban, i)) return static_cast<int32_t>(i);
    return argmax_one_pass(x, n, ban);  // every index holding the largest is banned
}

}  // namespace bg::cpu
