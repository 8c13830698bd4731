// Routing policies: which k experts a token uses, as a pure function of the router's scores
// and the fixed resident set (never of the tier an expert sits in), hot-pool alone also of the
// hot set. The exact ranking orders experts by p + bias, descending, ties by the lower id.
//   exact          top-k of p + bias over all experts (the model's own rule)
//   pinned-top1    rank 1 is the exact argmax over all experts; ranks 2..k are the next experts
//                  of the exact ranking that are resident, in score order
//   resident-only  top-k of p + bias among the resident experts
//   hot-pool       ours, an interpretation of the seed's "rank 1 is evaluated over the full
//                  twenty slots, ranks 2-5 only within the resident pool", read as: rank 1 among
//                  the S resident experts, ranks 2..k among the H hot ones (in VRAM now; the hot
//                  set is a subset of the resident set and promotion changes it, so this policy
//                  depends on the tier, SPEC's one exception). Exactly:
//                    rank 1      = the best resident expert (resident-only's rank 1);
//                    ranks 2..   = the hot experts other than rank 1, best first;
//                    then, while fewer than k are chosen (H < k-1, or H = k-1 with rank 1 itself
//                    hot), the best resident experts not yet chosen, as resident-only would.
//                  So with k = 6 and H = 5, a token whose rank 1 is a host expert uses it and all
//                  five hot experts; one whose rank 1 is hot uses the five hot experts and the
//                  best host-resident one. Every token still uses k experts, all resident (a
//                  warm pass reads nothing from disk), at most max(1, k - H) of them outside VRAM.
//                  With H = 0 it is resident-only.
// In every policy the weights are the chosen p weighted over the chosen set as the model does
// (bg::RouteWeighting: divided by max(sum p, 6.1035e-5) when expert_weights_norm, times the
// scale), with p = sqrt(softplus(logit)).
#pragma once

#include <cstdint>
#include <string>

#include "cpu/ops.h"

namespace bg {

// resident: [n_expert] 1/0 (ignored by kExact; may be null then); hot: [n_expert] 1/0, a subset of
// resident (read by kHotPool only; may be null otherwise). scratch: 2*n_expert floats, order:
// n_expert ints. Writes ids (k, in rank order: descending p + bias for every policy but
// hot-pool, whose rank-2 hot experts may rank below a filled host one) and weights.
void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident, const uint8_t* hot,
           int64_t n_expert, int k, bg::RouteWeighting wt, int32_t* ids, float* weights, float* scratch,
           int32_t* order);

// Ops::group_by_expert: a stable counting sort of the slots by expert id.
void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert, int32_t* counts,
                     int32_t* gather, int32_t* scatter);

}  // namespace bg
