// What the runner needs of an architecture's forward pass: units of positions, pushed through
// one layer at a time in whatever order the runner picks (token-major: a unit walks every layer;
// layer-major: every unit of the prompt passes layer l before layer l+1), then read out as
// logits. model/dsv41_forward.h implements it; a second architecture would implement it beside
// its own model file, and the runner (runtime/runner.h) would not change.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/types.h"

namespace bg {

// A unit of work: positions pos0..pos0+n-1, and its routing as the host reads it (only with a
// RoutingObserver attached: otherwise the routing stays on the device).
struct Ubatch {
    int64_t pos0 = 0;
    int64_t n = 0;
    std::vector<int32_t> ids;  // [n][k] routed experts, in rank order (observer only)
    std::vector<float> wts;    // [n][k] their weights (observer only)
};

// Observes routing decisions (metrics, profiling); called once per token per MoE layer.
class RoutingObserver {
public:
    virtual ~RoutingObserver() = default;
    virtual void on_route(int64_t layer, int64_t pos, const int32_t* ids, const float* weights, int k) = 0;
};

// How many of the first n_units units (at least one) go into one launch of at most max_tokens
// positions: whole units, in order.
inline int64_t units_in_launch(const Ubatch* const* units, int64_t n_units, int64_t max_tokens) {
    int64_t nu = 1, tokens = units[0]->n;
    while (nu < n_units && tokens + units[nu]->n <= max_tokens) tokens += units[nu++]->n;
    return nu;
}

class LayerForward {
public:
    virtual ~LayerForward() = default;
    // The most positions one unit may hold, and the context: positions 0..n_ctx()-1.
    virtual int64_t max_ubatch() const = 0;
    // The most positions one launch may hold: attention_half takes consecutive units up to this
    // many positions at once (at least max_ubatch()).
    virtual int64_t max_launch() const = 0;
    virtual int64_t n_ctx() const = 0;
    // Empties the sequence: the next token is at position 0.
    virtual void reset() = 0;
    // Starts a unit at positions pos0..pos0+n-1: records the tokens and embeds them.
    virtual void embed(Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) = 0;
    // Positions pos0..pos0+n-1 (one or more units, consecutive), holding tokens[0..n), will pass
    // every layer in order, layer by layer, units in position order: what they will read that
    // follows from their tokens alone (Engram rows) may start moving now, before or after their
    // embedding (the tokens are recorded here too).
    virtual void plan_reads(const int32_t* tokens, int64_t pos0, int64_t n) = 0;
    // Before layer l's attention halves for n_pos positions: the expert provider may start
    // moving what routing can pick (nothing, where the routing rule does not know it yet).
    virtual void prepare_moe(int64_t l, int64_t n_pos) = 0;
    // Everything of layer l up to and including the routing, for consecutive units together (at
    // most max_launch() positions): one launch of each dense matrix for all of them. Per token
    // the result does not depend on which units share the call.
    virtual void attention_half(int64_t l, Ubatch* const* units, int64_t n_units) = 0;
    // The MoE sub-layer of several units at once: every expert any of them routed to is brought
    // in once. Per token the result does not depend on which units share the call.
    virtual void moe_half(int64_t l, Ubatch* const* units, int64_t n_units) = 0;
    // One whole layer of one unit (token-major): prepare_moe, attention_half, moe_half on {u}.
    void layer(int64_t l, Ubatch& u) {
        prepare_moe(l, u.n);
        Ubatch* one = &u;
        attention_half(l, &one, 1);
        moe_half(l, &one, 1);
    }
    // After a pass's or a step's last layer (the runner calls it at the end of prefill and
    // decode): what the last moe_half left running or open on the host (the CPU's experts, the
    // experts' releases, the provider's layer) is over when it returns, as logits() and
    // greedy_token() also leave it.
    virtual void finish() = 0;
    // After the last layer: the logits [n_vocab] of token i of the unit, in host memory.
    virtual void logits(const Ubatch& u, int64_t i, float* out) = 0;
    // After the last layer: the greedy token of token i of the unit (the first index of the
    // largest logit, ban's ids excluded: what argmax over logits() gives with them set to -inf),
    // chosen where the logits are (Ops::argmax), so only the token comes to the host.
    virtual int32_t greedy_token(const Ubatch& u, int64_t i, const TokenBan& ban) = 0;
};

}  // namespace bg
