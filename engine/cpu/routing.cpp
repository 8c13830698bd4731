#include "cpu/routing.h"

#include <algorithm>
#include <cmath>

#include "cpu/ops.h"
#include "util/check.h"

namespace bg {

void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident,
           int64_t n_expert, int k, bg::RouteWeighting wt, int32_t* ids, float* weights, float* scratch,
           int32_t* order) {
    if (policy == RoutingPolicy::kExact) {
        cpu::router_exact(logits, bias, n_expert, k, wt, ids, weights, nullptr);
        return;
    }
    BG_CHECK(resident != nullptr);
    float* p = scratch;               // [n_expert]
    float* key = scratch + n_expert;  // [n_expert] selection key p + bias
    for (int64_t e = 0; e < n_expert; ++e) {
        p[e] = std::sqrt(cpu::softplus(logits[e]));
        key[e] = p[e] + bias[e];
    }
    cpu::top_k(key, n_expert, n_expert, order);  // the exact ranking, ties by lower id
    int n = 0;
    if (policy == RoutingPolicy::kPinnedTop1) ids[n++] = order[0];
    for (int64_t r = policy == RoutingPolicy::kPinnedTop1 ? 1 : 0; r < n_expert && n < k; ++r)
        if (resident[order[r]]) ids[n++] = order[r];
    BG_CHECK_MSG(n == k, "fewer resident experts than experts per token");
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += p[ids[j]];
    const float f = wt.factor(sum);
    for (int j = 0; j < k; ++j) weights[j] = p[ids[j]] * f;
}

}  // namespace bg
