// Routing policies: which k experts a token uses, as a pure function of the router's scores
// and the fixed resident set (never of the tier an expert sits in).
//   exact          top-k of p + bias over all experts (the model's own rule)
//   pinned-top1    rank 1 is the exact argmax over all experts; ranks 2..k are the next experts
//                  of the exact ranking that are resident, in score order
//   resident-only  top-k of p + bias among the resident experts
// In every policy the weights are the chosen p weighted over the chosen set as the model does
// (bg::RouteWeighting: divided by max(sum p, 6.1035e-5) when expert_weights_norm, times the
// scale), with p = sqrt(softplus(logit)).
#pragma once

#include <cstdint>
#include <string>

#include "cpu/ops.h"

namespace bg {

// resident: [n_expert] 1/0 (ignored by kExact; may be null then). scratch: 2*n_expert floats,
// order: n_expert ints. Writes ids (k, in descending order of p + bias) and weights.
void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident,
           int64_t n_expert, int k, bg::RouteWeighting wt, int32_t* ids, float* weights, float* scratch,
           int32_t* order);

// Ops::group_by_expert: a stable counting sort of the slots by expert id.
void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert, int32_t* counts,
                     int32_t* gather, int32_t* scatter);

}  // namespace bg
