#include "model/forward_layout.h"

#include <algorithm>

#include "util/timeline.h"

namespace bg::dsv41 {

namespace {

constexpr int64_t kHc = 4;  // residual copies

// An allocation of 0 bytes still takes 1 (cudaMalloc of 0 is not portable).
uint64_t sized(int64_t count, uint64_t size) { return std::max<uint64_t>(1, static_cast<uint64_t>(count) * size); }

}  // namespace

ForwardLayout ForwardLayout::of(const HParams& hp, const std::vector<LayerRoles>& roles, const ForwardConfig& cfg,
                                const std::function<GgmlType(const std::string&)>& type_of) {
    // Work buffers hold one launch (mu tokens: one or more units); the embedding's, one unit (ub).
    const int64_t L = hp.n_layer, E = hp.n_embd, hd = hp.head_dim, mu = cfg.launch_tokens(), ub = cfg.max_ubatch,
                  ctx = cfg.n_ctx;
    const int64_t k = hp.n_expert_used, ne = hp.n_expert, nff = hp.n_ff_exp, chunk = cfg.moe_chunk;
    const int64_t nsh = std::max<int64_t>(1, hp.n_ff_exp * hp.n_expert_shared);
    ForwardLayout f;
    for (auto* v : {&f.kv_cache, &f.comp_in, &f.comp_score, &f.comp_latent, &f.comp_rows, &f.idx_keys, &f.sel, &f.sel_n})
        v->assign(L, 0);
    int64_t kv_src = -1;
    for (int64_t l = 0; l < L; ++l) {
        const LayerRoles& r = roles[static_cast<size_t>(l)];
        if (r.kv_source) kv_src = l;
        f.kv_cache[l] = ctx * hd;
        if (r.kv_source) {
            const int64_t blocks = ctx / hp.compress_ratios[l] + 1;
            f.comp_in[l] = ctx * hd;
            if (r.gated) f.comp_score[l] = ctx * hd;
            f.comp_latent[l] = blocks * hd;
            f.comp_rows[l] = blocks * hd;
        }
        if (r.key_owner) f.idx_keys[l] = (ctx / hp.compress_ratios[kv_src] + 1) * hp.idx_head_dim;
        if (r.index_source) {
            f.sel[l] = ctx * hp.idx_top_k;
            f.sel_n[l] = ctx;
        }
    }
    f.resident_masks = cfg.resident ? L : 0;
    f.hot_masks = cfg.hot ? L : 0;
    f.resident_mask = ne;
    f.H = ctx * kHc * E;
    f.pre = ctx * kHc;
    f.xf = ctx * E;
    f.mixf = ctx * kMixWidth;
    f.ids = ctx * k;
    f.wts = ctx * k;
    f.eo = ctx * k * E;
    f.iota = ctx;
    f.hflat = mu * kHc * E;
    f.mixm = mu * 24;
    f.mixa = mu * kMixWidth;
    f.x = mu * E;
    f.y = mu * E;
    f.qa = mu * hp.q_lora_rank;
    f.q = mu * hp.q_dim();
    f.kvb = mu * hd;
    f.att = mu * hp.q_dim();
    f.oa = mu * hp.o_groups * hp.o_lora_rank;
    f.iq = mu * hp.idx_n_head * hp.idx_head_dim;
    f.iw = mu * hp.idx_n_head;
    f.iscore = mu * ctx;
    f.rlogits = mu * ne;
    f.pooled = (mu + 1) * hd;  // blocks completing in one launch
    f.emb = ub * E;
    const int64_t nb = hp.engram_layers.empty() ? 0 : hp.engram_buckets();
    f.erow = mu * std::max<int64_t>(1, nb * hp.engram_dim);
    f.ekv = mu * (kHc + 1) * E;
    f.sg = f.su = f.sh = mu * nsh;
    f.logits = hp.n_vocab;
    f.bpos = mu + 1;
    f.groups = ne + 1 + 2 * ctx * k;
    f.greedy = f.greedy_host = 1;  // a decode step's greedy token (Ops::argmax)
    f.tokens = ctx;
    f.out_host = std::max(hp.n_vocab, E);
    f.emb_host = ub * E;
    f.onehot = ub * kHc;
    f.erows = mu * std::max<int64_t>(1, nb);
    f.groups_host = ne + 1;
    f.by_expert_start = ne + 1;
    f.used_experts = ne;
    f.used_tokens = ne;
    // Between two syncs (a layer's counts copy and the next): one busy pair per expert, two per
    // launch (the shared expert, then the next layer's attention; at most one launch per unit),
    // one for a one-launch call's shared expert (queued before its routed experts), and a few more.
    f.ops.busy_pairs = ne + 2 * ((ctx + ub - 1) / ub) + 6;
    f.ops.timeline_capacity = timeline_capacity(L, ne);
    f.ops.max_tok = mu;
    f.ops.n_head = hp.n_head;
    f.ops.head_dim = hp.head_dim;
    f.ops.max_att_rows = hp.sliding_window + hp.idx_top_k;
    f.ops.n_expert = ne;
    f.ops.expert_max_tok = chunk;
    f.ops.n_embd = E;
    f.ops.n_ff = nff;
    f.ops.matmul.mode = cfg.matmul;
    // Every matrix the forward multiplies by (the token embedding is gathered on the host), dense
    // ones from the 64-byte aligned image, experts from 4 KiB aligned slots.
    for (const TensorSpec& s : tensor_specs(hp, roles)) {
        if (s.cls == TensorClass::kMatrix && s.name != "token_embd.weight")
            f.ops.matmul.add_matrix(type_of(s.name), s.ne[0], s.ne[1], 0);
    }
    for (int64_t l = 0; l < L; ++l) {
        const bool fused = f.ops.matmul.add_expert(type_of(layer_tensor_name(l, "ffn_gate_exps", "weight")),
                                                   type_of(layer_tensor_name(l, "ffn_up_exps", "weight")),
                                                   type_of(layer_tensor_name(l, "ffn_down_exps", "weight")), E, nff);
        if (!fused) f.ops.experts_unfused = true;
    }
    if (cfg.host_expert_positions > 0) {
        const int64_t P = cfg.host_expert_positions, slots = P * k;
        f.xf_host = P * E;
        f.groups_host += 2 * slots;
        f.host_pack = f.host_dest = slots;
        f.eo_host = slots * E;
        f.host_done = 1;
        // Routed experts only: P tokens at most per expert (a token uses an expert once).
        f.host_ops.max_tok = P;
        f.host_ops.expert_max_tok = P;
        f.host_ops.expert_batch_tok = slots;  // a call's CPU experts in one job
        f.host_ops.n_embd = E;
        f.host_ops.n_ff = nff;
        f.host_ops.matmul = f.ops.matmul;
    }
    return f;
}

ForwardBytes ForwardLayout::bytes(bool memory_is_host, uint64_t device_image_bytes, uint64_t own_device_bytes,
                                  uint64_t own_host_bytes) const {
    ForwardBytes b;
    for (const auto* v : {&kv_cache, &comp_in, &comp_score, &comp_latent, &comp_rows, &idx_keys, &sel, &sel_n})
        for (int64_t c : *v)
            if (c > 0) b.device_caches += sized(c, 4);
    b.device_work += static_cast<uint64_t>(resident_masks + hot_masks) * sized(resident_mask, 1);
    for (int64_t c : {H, pre, xf, mixf, ids, wts, eo, iota, hflat, mixm, mixa, x, y, qa, q, kvb, att, oa, iq, iw, iscore,
                      rlogits, pooled, emb, erow, ekv, sg, su, sh, logits, bpos, groups, greedy})
        b.device_work += sized(c, 4);
    for (int64_t c : {tokens, out_host, emb_host, onehot, groups_host, by_expert_start, used_experts,
                      used_tokens, greedy_host})
        b.host += sized(c, 4);
    b.host += sized(erows, 8);
    if (xf_host > 0) {
        for (int64_t c : {xf_host, host_pack, host_dest, eo_host, host_done}) b.host += sized(c, 4);
    }
    b.host += own_host_bytes;
    b.device_matmul = own_device_bytes;
    if (memory_is_host) {
        b.host += b.device_caches + b.device_work + b.device_matmul;
        b.device_caches = b.device_work = b.device_matmul = 0;
    } else {
        b.device_dense = sized(static_cast<int64_t>(device_image_bytes), 1);
    }
    return b;
}

uint64_t gpu_ops_host_bytes(const OpsLimits& lim) { return lim.timeline_capacity * sizeof(Interval); }

}  // namespace bg::dsv41
