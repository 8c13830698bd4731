#include "cpu/routing.h"

#include <algorithm>
#include <cmath>

#include "cpu/ops.h"
#include "util/check.h"

namespace bg {

void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident, const uint8_t* hot,
           int64_t n_expert, int k, bg::RouteWeighting wt, int32_t* ids, float* weights, float* scratch,
           int32_t* order) {
    if (policy == RoutingPolicy::kExact) {
        cpu::router_exact(logits, bias, n_expert, k, wt, ids, weights, nullptr);
        return;
    }
    BG_CHECK(resident != nullptr && (policy != RoutingPolicy::kHotPool || hot != nullptr));
    float* p = scratch;               // [n_expert]
    float* key = scratch + n_expert;  // [n_expert] selection key p + bias
    for (int64_t e = 0; e < n_expert; ++e) {
        p[e] = std::sqrt(cpu::softplus(logits[e]));
        key[e] = p[e] + bias[e];
    }
    cpu::top_k(key, n_expert, n_expert, order);  // the exact ranking, ties by lower id
    int n = 0;
    if (policy == RoutingPolicy::kHotPool) {
        // Rank 1 the best resident, then the hot ones, then (hot ones used up) the best residents
        // left; header's definition.
        for (int64_t r = 0; r < n_expert && n == 0; ++r)
            if (resident[order[r]]) ids[n++] = order[r];
        for (int64_t r = 0; r < n_expert && n > 0 && n < k; ++r)
            if (hot[order[r]] && order[r] != ids[0]) ids[n++] = order[r];
        for (int64_t r = 0; r < n_expert && n > 0 && n < k; ++r)
            if (resident[order[r]] && !hot[order[r]] && order[r] != ids[0]) ids[n++] = order[r];
    } else {
        if (policy == RoutingPolicy::kPinnedTop1) ids[n++] = order[0];
        for (int64_t r = policy == RoutingPolicy::kPinnedTop1 ? 1 : 0; r < n_expert && n < k; ++r)
            if (resident[order[r]]) ids[n++] = order[r];
    }
    BG_CHECK_MSG(n == k, "fewer resident experts than experts per token");
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += p[ids[j]];
    const float f = wt.factor(sum);
    for (int j = 0; j < k; ++j) weights[j] = p[ids[j]] * f;
}

void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert, int32_t* counts,
                     int32_t* gather, int32_t* scatter) {
    BG_CHECK(k >= 1 && n_slots >= 0 && n_slots % k == 0 && n_expert >= 1);
    std::fill(counts, counts + n_expert + 1, 0);
    auto valid = [n_expert](int32_t e) { return e >= 0 && e < n_expert; };
    for (int64_t s = 0; s < n_slots; ++s) ++counts[valid(ids[s]) ? ids[s] : n_expert];
    // Where each expert's run starts, in counts itself (no scratch: this runs once a layer per
    // decode step); then each slot to the next place of its run, which leaves counts[e] where run
    // e ends, and differences of those ends give the counts back.
    for (int64_t e = 0, at = 0; e < n_expert; ++e) {
        const int32_t c = counts[e];
        counts[e] = static_cast<int32_t>(at);
        at += c;
    }
    for (int64_t s = 0; s < n_slots; ++s) {
        if (!valid(ids[s])) continue;
        const int64_t at = counts[ids[s]]++;
        gather[at] = static_cast<int32_t>(pos0 + s / k);
        scatter[at] = static_cast<int32_t>(pos0 * k + s);
    }
    for (int64_t e = n_expert - 1; e >= 1; --e) counts[e] -= counts[e - 1];
}

}  // namespace bg
