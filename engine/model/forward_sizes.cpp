#include "model/forward_sizes.h"

#include <algorithm>

#include "model/dsv41_forward.h"
#include "runtime/timeline.h"

namespace bg::dsv41 {

namespace {

constexpr int64_t kHc = 4;        // residual copies
constexpr int64_t kMixWidth = 24; // mHC mix projections per token

// Sequence caches both forwards keep for n_ctx positions, in bytes (floats and int32s).
uint64_t cache_bytes(const HParams& hp, const std::vector<LayerRoles>& roles, int64_t ctx, bool device) {
    uint64_t b = 0;
    // A device allocation of 0 bytes still takes 1 (cudaMalloc of 0 is not portable).
    auto add = [&](int64_t count, uint64_t size) { b += device ? std::max<uint64_t>(1, count * size) : count * size; };
    const int64_t hd = hp.head_dim;
    int64_t kv_src = -1;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        const LayerRoles& r = roles[static_cast<size_t>(l)];
        if (r.kv_source) kv_src = l;
        add(ctx * hd, 4);
        if (r.kv_source) {
            const int64_t blocks = ctx / hp.compress_ratios[l] + 1;
            add(ctx * hd, 4);
            if (r.gated) add(ctx * hd, 4);
            add(blocks * hd, 4);
            add(blocks * hd, 4);
        }
        if (r.key_owner) add((ctx / hp.compress_ratios[kv_src] + 1) * hp.idx_head_dim, 4);
        if (r.index_source) {
            add(ctx * hp.idx_top_k, 4);
            add(ctx, 4);
        }
    }
    return b;
}

}  // namespace

ForwardBytes cpu_forward_bytes(const HParams& hp, const std::vector<LayerRoles>& roles, const ForwardConfig& cfg) {
    const int64_t E = hp.n_embd, hd = hp.head_dim, mu = cfg.max_ubatch, ctx = cfg.n_ctx, k = hp.n_expert_used;
    const int64_t ne = hp.n_expert, nff = hp.n_ff_exp, nsh = hp.n_ff_exp * hp.n_expert_shared, chunk = cfg.moe_chunk;
    const int64_t max_rows = hp.sliding_window + hp.idx_top_k;
    ForwardBytes f;
    uint64_t& b = f.host;
    b += ctx * 4 + cache_bytes(hp, roles, ctx, false);                  // tokens, caches
    b += 4 * (mu * kHc * E * 2 + mu * 24 + mu * E * 2);                  // hflat, R, mixm, x, y
    b += 2 * mu * sizeof(cpu::HcMix);                                     // the two sub-layers' mixes
    b += 4 * (mu * hp.q_lora_rank + 2 * mu * hp.q_dim() + mu * hd + mu * hp.o_groups * hp.o_lora_rank + hd);
    b += 4 * (mu * hp.idx_n_head * hp.idx_head_dim + mu * hp.idx_n_head + mu * ctx);  // indexer
    b += mu * max_rows * sizeof(const float*) + mu * sizeof(int64_t) + 4 * mu * hp.n_head * max_rows;  // attention rows
    b += 4 * (mu * ne + 2 * ne) + 4 * ne;                                 // router logits, scratch, order
    b += 4 * (ne + ne + 1 + ne + ne) + 8 * ctx * k;                       // grouping by expert
    b += 4 * (chunk * E + 3 * chunk * nff + std::max(chunk, mu) * E + 3 * mu * nsh);  // experts, shared expert
    if (!hp.engram_layers.empty())
        b += 8 * mu * hp.engram_buckets() + 4 * (mu * hp.engram_buckets() * hp.engram_dim + mu * (kHc + 1) * E);
    b += 4 * E;  // tmp
    return f;
}

ForwardBytes gpu_forward_bytes(const HParams& hp, const std::vector<LayerRoles>& roles, const ForwardConfig& cfg,
                               uint64_t device_image_bytes, bool has_plan) {
    const int64_t E = hp.n_embd, hd = hp.head_dim, mu = cfg.max_ubatch, ctx = cfg.n_ctx, k = hp.n_expert_used;
    const int64_t ne = hp.n_expert, nff = hp.n_ff_exp, nsh = hp.n_ff_exp * hp.n_expert_shared, chunk = cfg.moe_chunk;
    const int64_t S = (ctx + mu - 1) / mu + 1;  // units alive at once
    ForwardBytes f;
    f.device_dense = std::max<uint64_t>(1, device_image_bytes);
    f.device_matmul = kGpuMatmulScratchBytes;
    f.device_caches = cache_bytes(hp, roles, ctx, true);
    uint64_t& w = f.device_work;
    auto add = [&](int64_t count, uint64_t size) { w += std::max<uint64_t>(1, count * size); };
    if (has_plan)
        for (int64_t l = 0; l < hp.n_layer; ++l) add(ne, 1);  // resident masks
    for (int64_t c : {S * mu * kHc * E, S * mu * kHc, S * mu * E, S * mu * kMixWidth}) add(c, 4);  // H, pre, xf, mixf
    add(S * mu * k, 4);      // ids
    add(S * mu * k, 4);      // weights
    add(S * mu * k * E, 4);  // expert outputs
    add(S * mu, 4);          // positions
    for (int64_t c : {mu * kHc * E, mu * 24, mu * kMixWidth, mu * E, mu * E, mu * hp.q_lora_rank, mu * hp.q_dim(),
                      mu * hd, mu * hp.q_dim(), mu * hp.o_groups * hp.o_lora_rank,
                      mu * hp.idx_n_head * hp.idx_head_dim, mu * hp.idx_n_head, mu * ctx, mu * ne, (mu + 1) * hd})
        add(c, 4);
    add(mu + 1, 4);  // block positions
    add(mu, 4);      // token rows
    add(mu * E, 4);  // embedding rows from the host
    const int64_t nb = hp.engram_layers.empty() ? 0 : hp.engram_buckets();
    add(mu * std::max<int64_t>(1, nb * hp.engram_dim), 4);
    add(mu * (kHc + 1) * E, 4);
    for (int64_t c : {chunk * E, chunk * nff, chunk * nff, chunk * nff, chunk * E}) add(c, 4);
    for (int i = 0; i < 3; ++i) add(mu * std::max<int64_t>(1, nsh), 4);
    add(hp.n_vocab, 4);  // logits
    add(ctx * k, 4);     // gather rows
    add(ctx * k, 4);     // scatter rows
    // Host: tokens, pinned routing rows, pinned output row, pinned embedding rows, grouping,
    // the kernel timeline.
    f.host = ctx * 4 + 2 * ctx * k * 4 + std::max(hp.n_vocab, E) * 4 + mu * E * 4 + ctx * k * 8 +
             timeline_capacity(hp.n_layer, hp.n_expert) * sizeof(Interval);
    return f;
}

}  // namespace bg::dsv41
