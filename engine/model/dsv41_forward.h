// The dsv41 forward pass on the CPU, one layer of one unit of work (ubatch) at a time, so the
// caller chooses the order: token-major (each ubatch walks all layers) or layer-major (every
// ubatch of the prompt goes through layer l before layer l+1). Both give the same numbers: each
// token's arithmetic does not depend on which other tokens share its ubatch.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/ops.h"
#include "model/dsv41_model.h"
#include "runtime/providers.h"
#include "runtime/residency.h"
#include "runtime/routing.h"
#include "runtime/timeline.h"

namespace bg::dsv41 {

struct ForwardConfig {
    int64_t n_ctx = 4096;       // longest sequence (prompt + generated tokens)
    int64_t max_ubatch = 16;    // most tokens in one unit of work
    cpu::SwigluClamp swiglu_form = cpu::SwigluClamp::kDeepSeek;
    RoutingPolicy routing = RoutingPolicy::kExact;
    const ResidencyPlan* plan = nullptr;  // needed by every policy but exact
    int64_t moe_chunk = 64;     // tokens per expert matmul
};

// Activations of one unit of work between layers.
struct Ubatch {
    int64_t pos0 = 0;
    int64_t n = 0;
    std::vector<float> H;    // [n][4][n_embd] residual copies
    std::vector<float> pre;  // [n][4] collapse weights of the next sub-layer (lag one sub-layer)
    int64_t device_slot = -1;  // which device-side unit buffers a GPU forward gave this unit
    // Between the attention and MoE halves of a layer:
    std::vector<float> xf;          // [n][n_embd] normalised MoE input
    std::vector<cpu::HcMix> mix_f;  // [n] the MoE sub-layer's mix
    std::vector<int32_t> ids;       // [n][k] routed experts, in rank order
    std::vector<float> wts;         // [n][k] their weights
    std::vector<float> eo;          // [n][k][n_embd] each routed expert's output
};

// Observes routing decisions (metrics, profiling); called once per token per MoE layer.
class RoutingObserver {
public:
    virtual ~RoutingObserver() = default;
    virtual void on_route(int64_t layer, int64_t pos, const int32_t* ids, const float* weights, int k) = 0;
};

// Rows of layer's Engram table that the token at `pos` hashes to (24 for dsv41), bucket-major;
// tokens[0..pos] is the sequence so far.
void engram_rows_for(const HParams& hp, int64_t layer, const int32_t* tokens, int64_t pos, uint64_t* rows);

// The forward pass as the runner drives it, whatever the backend computing it.
class ForwardPass {
public:
    virtual ~ForwardPass() = default;
    virtual const ForwardConfig& config() const = 0;
    virtual void set_observer(RoutingObserver* o) = 0;
    // Switches the routing policy (fidelity runs compare policies on one engine).
    virtual void set_routing(RoutingPolicy p) = 0;
    // Host memory held by caches and work buffers, for the host budget.
    virtual uint64_t buffer_bytes() const = 0;
    // Device memory held (dense weights, caches, work buffers), for the VRAM budget.
    virtual uint64_t device_bytes() const { return 0; }
    // Milliseconds the device spent running this pass's kernels so far, from events around the
    // kernel work (idle gaps while the host waits are excluded); < 0 where not measured (CPU).
    virtual double device_busy_ms() const { return -1.0; }
    // The same busy time as intervals on the host's steady clock, since the last
    // begin_timeline(), so it can be laid over the disk's; nullptr where not measured (CPU).
    virtual void begin_timeline() {}
    virtual const Timeline* device_timeline() const { return nullptr; }
    // Empties the sequence: the next token is at position 0.
    virtual void reset() = 0;

    // Starts a unit at positions pos0..pos0+n-1: records the tokens and embeds them.
    virtual void embed(Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) = 0;
    // Engram, the attention sub-layer, the MoE mix and routing. The routed experts are left in
    // u.ids / u.wts for moe_half.
    virtual void attention_half(int64_t l, Ubatch& u) = 0;
    // The MoE sub-layer of several units at once: every expert any of them routed to is
    // brought in once and applied to all of their tokens (layer-major prefill passes every
    // unit of the prompt). Per token the outputs are summed in rank order, so the result does
    // not depend on which units share the call or on the order experts arrive in.
    virtual void moe_half(int64_t l, Ubatch* const* units, int64_t n_units) = 0;
    // One whole layer of one unit (token-major): attention_half then moe_half on {u}.
    void layer(int64_t l, Ubatch& u) {
        attention_half(l, u);
        Ubatch* one = &u;
        moe_half(l, &one, 1);
    }
    // After the last layer: the final normalised hidden state [n_embd] and logits [n_vocab] of
    // token i of the unit, in host memory.
    virtual void final_hidden(const Ubatch& u, int64_t i, float* out) = 0;
    virtual void logits(const Ubatch& u, int64_t i, float* out) = 0;
    // Rows of the layer's Engram table the token at `pos` hashes to.
    virtual void engram_rows(int64_t layer, int64_t pos, uint64_t* rows) const = 0;
};

class Forward final : public ForwardPass {
public:
    Forward(const Model& m, cpu::ThreadPool& pool, ExpertProvider& experts, EngramProvider& engram,
            const ForwardConfig& cfg);

    const ForwardConfig& config() const override { return cfg_; }
    void set_observer(RoutingObserver* o) override { observer_ = o; }
    void set_routing(RoutingPolicy p) override;
    uint64_t buffer_bytes() const override;
    void reset() override;
    void embed(Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) override;
    void attention_half(int64_t l, Ubatch& u) override;
    void moe_half(int64_t l, Ubatch* const* units, int64_t n_units) override;
    void final_hidden(const Ubatch& u, int64_t i, float* out) override;
    void logits(const Ubatch& u, int64_t i, float* out) override;
    void engram_rows(int64_t layer, int64_t pos, uint64_t* rows) const override;

private:
    void mix(const cpu::MatView& fn, const float* base, const float* scale, const Ubatch& u, cpu::HcMix* out);
    void engram(int64_t l, Ubatch& u);
    void attention(int64_t l, const Ubatch& u, float* y);
    void compressor(int64_t l, const Ubatch& u);
    void index_keys(int64_t l, const Ubatch& u);
    void indexer(int64_t l, const Ubatch& u);
    void shared_expert(int64_t l, const Ubatch& u, float* y);
    cpu::RopeParams rope_for_layer(int64_t l) const;
    cpu::RopeParams rope_compressed() const;

    const Model& m_;
    const HParams& hp_;
    cpu::ThreadPool& pool_;
    ExpertProvider& experts_;
    EngramProvider& engram_;
    ForwardConfig cfg_;
    RoutingObserver* observer_ = nullptr;

    // Which earlier layer provides each role to layer l (-1: none).
    std::vector<int64_t> kv_src_of_, key_owner_of_, idx_src_of_;

    // Sequence state, sized for n_ctx at construction.
    std::vector<int32_t> tokens_;                  // [n_ctx]
    std::vector<std::vector<float>> kv_cache_;     // per layer [n_ctx][head_dim], normed + roped
    std::vector<std::vector<float>> comp_in_;      // per kv source [n_ctx][head_dim]
    std::vector<std::vector<float>> comp_score_;   // per gated kv source [n_ctx][head_dim]
    std::vector<std::vector<float>> comp_latent_;  // per kv source [blocks][head_dim], before rope
    std::vector<std::vector<float>> comp_rows_;    // per kv source [blocks][head_dim], roped
    std::vector<std::vector<float>> idx_keys_;     // per key owner [blocks][idx_head_dim]
    std::vector<std::vector<int32_t>> sel_;        // per index source [n_ctx][top_k]
    std::vector<std::vector<int32_t>> sel_n_;      // per index source [n_ctx]

    // Work buffers for one unit (max_ubatch tokens), allocated once.
    std::vector<float> hflat_;     // [mu][4*n_embd]
    std::vector<float> mixm_;      // [mu][24]
    std::vector<cpu::HcMix> mix_a_, mix_f_;  // [mu]
    std::vector<float> R_;         // [mu][4*n_embd]
    std::vector<float> x_;         // [mu][n_embd]
    std::vector<float> y_;         // [mu][n_embd]
    std::vector<float> qa_;        // [mu][q_lora] normalised low-rank query
    std::vector<float> q_;         // [mu][n_head*head_dim]
    std::vector<float> kvb_;       // [mu][head_dim]
    std::vector<float> att_;       // [mu][n_head*head_dim]
    std::vector<float> oa_;        // [mu][o_groups*o_lora]
    std::vector<float> pooled_;    // [head_dim]
    std::vector<float> iq_;        // [mu][idx_heads*idx_head_dim]
    std::vector<float> iw_;        // [mu][idx_heads]
    std::vector<float> iscore_;    // [mu][n_ctx]
    std::vector<const float*> rows_;  // [mu][window + top_k]
    std::vector<int64_t> n_rows_;     // [mu]
    std::vector<float> att_scratch_;  // [mu*n_head][window + top_k]
    std::vector<float> rlogits_;   // [mu][n_expert]
    std::vector<float> route_scratch_;  // [2*n_expert]
    std::vector<int32_t> route_order_;  // [n_expert]
    // Slots (unit, token, rank) grouped by expert for the MoE half: counting sort by expert id.
    std::vector<int32_t> by_expert_count_;  // [n_expert]
    std::vector<int32_t> by_expert_start_;  // [n_expert + 1]
    std::vector<int64_t> by_expert_slot_;   // [n_ctx*k]: (unit << 32) | (token*k + rank)
    std::vector<int32_t> used_experts_;     // [n_expert]
    std::vector<int32_t> used_tokens_;      // [n_expert] tokens routed to each used expert
    std::vector<float> xg_;        // [moe_chunk][n_embd]
    std::vector<float> g_, up_, h_;  // [moe_chunk][n_ff]
    std::vector<float> eo_;        // [max(moe_chunk, mu)][n_embd]
    std::vector<float> sg_, su_, sh_;  // [mu][n_ff*shared]
    std::vector<uint64_t> erows_;  // [mu][buckets]
    std::vector<float> erow_val_;  // [mu][buckets*dim]
    std::vector<float> ekv_;       // [mu][5*n_embd]
    std::vector<float> tmp_;       // [n_embd] (const methods use their own)
};

}  // namespace bg::dsv41
