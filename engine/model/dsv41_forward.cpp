#include "model/dsv41_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/forward_sizes.h"
#include "util/check.h"

namespace bg::dsv41 {

namespace {

constexpr int kHc = 4;  // residual copies (validated at load)

void dequant_row(const cpu::MatView& w, int64_t r, float* out) {
    dequantize_row(w.type, w.data + static_cast<uint64_t>(r) * w.row_stride, out, w.cols);
}

// x[e] = sum_c pre[c] * H[c][e]  (H: [4][E])
void collapse(const float* pre, const float* H, int64_t E, float* x) {
    for (int64_t e = 0; e < E; ++e) {
        float s = 0.0f;
        for (int c = 0; c < kHc; ++c) s += pre[c] * H[c * E + e];
        x[e] = s;
    }
}

// H[d][e] = post[d] * y[e] + sum_c comb[d][c] * R[c][e]  (H, R: [4][E]; H must not alias R)
void expand(const cpu::HcMix& mx, const float* y, const float* R, int64_t E, float* H) {
    for (int d = 0; d < kHc; ++d)
        for (int64_t e = 0; e < E; ++e) {
            float s = mx.post[d] * y[e];
            for (int c = 0; c < kHc; ++c) s += mx.comb[d][c] * R[c * E + e];
            H[d * E + e] = s;
        }
}

}  // namespace

Forward::Forward(const Model& m, cpu::ThreadPool& pool, ExpertProvider& experts, EngramProvider& engram,
                 const ForwardConfig& cfg)
    : m_(m), hp_(m.hp()), pool_(pool), experts_(experts), engram_(engram), cfg_(cfg) {
    BG_CHECK(hp_.hc_count == kHc);
    if (cfg_.n_ctx < 1 || cfg_.max_ubatch < 1 || cfg_.moe_chunk < 1) fail("forward: n_ctx, max_ubatch and moe_chunk must be >= 1");
    if (cfg_.routing != RoutingPolicy::kExact &&
        (!cfg_.plan || cfg_.plan->n_layer() != hp_.n_layer))
        fail("forward: routing '%s' needs a residency plan for all %lld layers", routing_policy_name(cfg_.routing),
             (long long)hp_.n_layer);
    const int64_t L = hp_.n_layer, E = hp_.n_embd, hd = hp_.head_dim, mu = cfg_.max_ubatch, ctx = cfg_.n_ctx;
    const auto& roles = m.roles();
    kv_src_of_.assign(L, -1);
    key_owner_of_.assign(L, -1);
    idx_src_of_.assign(L, -1);
    int64_t kv = -1, ko = -1, is = -1;
    for (int64_t l = 0; l < L; ++l) {
        if (roles[l].kv_source) kv = l;
        if (roles[l].key_owner) ko = l;
        if (roles[l].index_source) is = l;
        kv_src_of_[l] = kv;
        key_owner_of_[l] = ko;
        idx_src_of_[l] = is;
    }

    tokens_.assign(ctx, 0);
    kv_cache_.resize(L);
    comp_in_.resize(L);
    comp_score_.resize(L);
    comp_latent_.resize(L);
    comp_rows_.resize(L);
    idx_keys_.resize(L);
    sel_.resize(L);
    sel_n_.resize(L);
    for (int64_t l = 0; l < L; ++l) {
        kv_cache_[l].assign(ctx * hd, 0.0f);
        if (roles[l].kv_source) {
            const int64_t blocks = ctx / hp_.compress_ratios[l] + 1;
            comp_in_[l].assign(ctx * hd, 0.0f);
            if (roles[l].gated) comp_score_[l].assign(ctx * hd, 0.0f);
            comp_latent_[l].assign(blocks * hd, 0.0f);
            comp_rows_[l].assign(blocks * hd, 0.0f);
        }
        if (roles[l].key_owner) {
            const int64_t blocks = ctx / hp_.compress_ratios[kv_src_of_[l]] + 1;
            idx_keys_[l].assign(blocks * hp_.idx_head_dim, 0.0f);
        }
        if (roles[l].index_source) {
            sel_[l].assign(ctx * hp_.idx_top_k, 0);
            sel_n_[l].assign(ctx, 0);
        }
    }

    const int64_t k = hp_.n_expert_used, nff = hp_.n_ff_exp, nsh = hp_.n_ff_exp * hp_.n_expert_shared;
    const int64_t max_rows = hp_.sliding_window + hp_.idx_top_k;
    hflat_.assign(mu * kHc * E, 0.0f);
    mixm_.assign(mu * 24, 0.0f);
    mix_a_.resize(mu);
    mix_f_.resize(mu);
    R_.assign(mu * kHc * E, 0.0f);
    x_.assign(mu * E, 0.0f);
    y_.assign(mu * E, 0.0f);
    qa_.assign(mu * hp_.q_lora_rank, 0.0f);
    q_.assign(mu * hp_.q_dim(), 0.0f);
    kvb_.assign(mu * hd, 0.0f);
    att_.assign(mu * hp_.q_dim(), 0.0f);
    oa_.assign(mu * hp_.o_groups * hp_.o_lora_rank, 0.0f);
    pooled_.assign(hd, 0.0f);
    iq_.assign(mu * hp_.idx_n_head * hp_.idx_head_dim, 0.0f);
    iw_.assign(mu * hp_.idx_n_head, 0.0f);
    iscore_.assign(mu * ctx, 0.0f);
    rows_.assign(mu * max_rows, nullptr);
    n_rows_.assign(mu, 0);
    att_scratch_.assign(mu * hp_.n_head * max_rows, 0.0f);
    rlogits_.assign(mu * hp_.n_expert, 0.0f);
    route_scratch_.assign(2 * hp_.n_expert, 0.0f);
    route_order_.assign(hp_.n_expert, 0);
    by_expert_count_.assign(hp_.n_expert, 0);
    by_expert_start_.assign(hp_.n_expert + 1, 0);
    by_expert_slot_.assign(ctx * k, 0);
    used_experts_.assign(hp_.n_expert, 0);
    used_tokens_.assign(hp_.n_expert, 0);
    const int64_t chunk = cfg_.moe_chunk;
    xg_.assign(chunk * E, 0.0f);
    g_.assign(chunk * nff, 0.0f);
    up_.assign(chunk * nff, 0.0f);
    h_.assign(chunk * nff, 0.0f);
    eo_.assign(std::max(chunk, mu) * E, 0.0f);
    sg_.assign(mu * nsh, 0.0f);
    su_.assign(mu * nsh, 0.0f);
    sh_.assign(mu * nsh, 0.0f);
    if (!hp_.engram_layers.empty()) {
        erows_.assign(mu * hp_.engram_buckets(), 0);
        erow_val_.assign(mu * hp_.engram_buckets() * hp_.engram_dim, 0.0f);
        ekv_.assign(mu * (kHc + 1) * E, 0.0f);
    }
    tmp_.assign(E, 0.0f);
    // `betelgeuse plan` prints what the forward will hold from the same sizing function.
    BG_CHECK(buffer_bytes() == cpu_forward_bytes(hp_, roles, cfg_).host);
}

void Forward::set_routing(RoutingPolicy p) {
    if (p != RoutingPolicy::kExact && !cfg_.plan) fail("forward: routing '%s' needs a residency plan", routing_policy_name(p));
    cfg_.routing = p;
}

uint64_t Forward::buffer_bytes() const {
    uint64_t b = 0;
    auto add = [&](const auto& v) { b += v.capacity() * sizeof(v[0]); };
    auto add_all = [&](const auto& vv) { for (const auto& v : vv) add(v); };
    add(tokens_);
    add_all(kv_cache_);
    add_all(comp_in_);
    add_all(comp_score_);
    add_all(comp_latent_);
    add_all(comp_rows_);
    add_all(idx_keys_);
    add_all(sel_);
    add_all(sel_n_);
    for (const auto* v : {&hflat_, &mixm_, &R_, &x_, &y_, &qa_, &q_, &kvb_, &att_, &oa_, &pooled_, &iq_, &iw_, &iscore_,
                          &att_scratch_, &rlogits_, &route_scratch_, &xg_, &g_, &up_, &h_, &eo_, &sg_, &su_, &sh_,
                          &erow_val_, &ekv_, &tmp_})
        add(*v);
    add(mix_a_);
    add(mix_f_);
    add(rows_);
    add(n_rows_);
    add(erows_);
    for (const auto* v : {&route_order_, &by_expert_count_, &by_expert_start_, &used_experts_, &used_tokens_}) add(*v);
    add(by_expert_slot_);
    return b;
}

void Forward::reset() {
    // Caches are overwritten position by position; only the selection counts must be cleared
    // for a reused position to never see a stale selection.
    for (auto& s : sel_n_) std::fill(s.begin(), s.end(), 0);
}

cpu::RopeParams Forward::rope_compressed() const {
    cpu::RopeParams p;
    p.n_dims = hp_.rope_dims;
    p.freq_base = hp_.compress_rope_freq_base;
    // rope.scaling.type applies here only: linear divides positions by the factor, YaRN ramps.
    p.yarn = hp_.rope_scaling == RopeScaling::kYarn;
    p.factor = hp_.rope_scaling == RopeScaling::kNone ? 1.0f : hp_.yarn_factor;
    p.n_ctx_orig = hp_.yarn_n_ctx_orig;
    p.beta_fast = hp_.yarn_beta_fast;
    p.beta_slow = hp_.yarn_beta_slow;
    return p;
}

cpu::RopeParams Forward::rope_for_layer(int64_t l) const {
    if (hp_.compress_ratios[l] > 0) return rope_compressed();
    cpu::RopeParams p;
    p.n_dims = hp_.rope_dims;
    p.freq_base = hp_.rope_freq_base;
    p.yarn = false;
    return p;
}

void Forward::embed(Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) {
    const int64_t E = hp_.n_embd;
    if (n < 1 || n > cfg_.max_ubatch) fail("forward: a unit holds 1..%lld tokens, got %lld", (long long)cfg_.max_ubatch, (long long)n);
    if (pos0 < 0 || pos0 + n > cfg_.n_ctx)
        fail("forward: positions %lld..%lld exceed the context of %lld tokens", (long long)pos0,
             (long long)(pos0 + n - 1), (long long)cfg_.n_ctx);
    u.pos0 = pos0;
    u.n = n;
    u.H.resize(static_cast<size_t>(n * kHc * E));
    u.pre.resize(static_cast<size_t>(n * kHc));
    const int64_t k = hp_.n_expert_used;
    u.xf.resize(static_cast<size_t>(n * E));
    u.mix_f.resize(static_cast<size_t>(n));
    u.ids.resize(static_cast<size_t>(n * k));
    u.wts.resize(static_cast<size_t>(n * k));
    u.eo.resize(static_cast<size_t>(n * k * E));
    const cpu::MatView emb = m_.token_embd();
    for (int64_t i = 0; i < n; ++i) {
        const int32_t t = tokens[i];
        if (t < 0 || t >= hp_.n_vocab) fail("forward: token id %d is outside the vocabulary (%lld)", t, (long long)hp_.n_vocab);
        tokens_[pos0 + i] = t;
        float* h = &u.H[i * kHc * E];
        dequant_row(emb, t, h);
        for (int c = 1; c < kHc; ++c) std::memcpy(h + c * E, h, E * sizeof(float));
        // Layer 0's attention collapses with a one-hot on copy 0.
        for (int c = 0; c < kHc; ++c) u.pre[i * kHc + c] = c == 0 ? 1.0f : 0.0f;
    }
}

void Forward::mix(const cpu::MatView& fn, const float* base, const float* scale, const Ubatch& u, cpu::HcMix* out) {
    const int64_t W = kHc * hp_.n_embd;
    for (int64_t i = 0; i < u.n; ++i) cpu::rmsnorm(&u.H[i * W], nullptr, W, hp_.rms_eps, &hflat_[i * W]);
    cpu::matmul(pool_, fn, hflat_.data(), W, u.n, mixm_.data(), 24);
    for (int64_t i = 0; i < u.n; ++i)
        out[i] = cpu::hc_mix(&mixm_[i * 24], base, scale, static_cast<int>(hp_.hc_sinkhorn_iters), hp_.hc_eps);
}

void Forward::attention_half(int64_t l, Ubatch& u) {
    BG_CHECK(l >= 0 && l < hp_.n_layer && u.n >= 1 && u.n <= cfg_.max_ubatch);
    const LayerWeights& w = m_.layer(l);
    const int64_t E = hp_.n_embd, W = kHc * E, n = u.n;

    if (m_.roles()[l].engram) engram(l, u);

    // Attention sub-layer.
    std::memcpy(R_.data(), u.H.data(), n * W * sizeof(float));
    mix(w.hc_attn_fn, w.hc_attn_base, w.hc_attn_scale, u, mix_a_.data());
    for (int64_t i = 0; i < n; ++i) {
        float* x = &x_[i * E];
        collapse(&u.pre[i * kHc], &u.H[i * W], E, x);
        cpu::rmsnorm(x, w.attn_norm, E, hp_.rms_eps, x);
    }
    attention(l, u, y_.data());
    for (int64_t i = 0; i < n; ++i) expand(mix_a_[i], &y_[i * E], &R_[i * W], E, &u.H[i * W]);

    // MoE input: collapse with the attention mix's pre (one sub-layer of lag); u.H now holds
    // the MoE sub-layer's residual R until moe_half.
    mix(w.hc_ffn_fn, w.hc_ffn_base, w.hc_ffn_scale, u, u.mix_f.data());
    for (int64_t i = 0; i < n; ++i) {
        float* x = &u.xf[i * E];
        collapse(mix_a_[i].pre, &u.H[i * W], E, x);
        cpu::rmsnorm(x, w.ffn_norm, E, hp_.rms_eps, x);
        for (int c = 0; c < kHc; ++c) u.pre[i * kHc + c] = u.mix_f[i].pre[c];
    }

    // Routing: a pure function of the scores and the fixed resident set.
    const int64_t ne = hp_.n_expert, k = hp_.n_expert_used;
    cpu::matmul(pool_, w.gate_inp, u.xf.data(), E, n, rlogits_.data(), ne);
    const uint8_t* resident = cfg_.plan ? cfg_.plan->mask[l].data() : nullptr;
    for (int64_t i = 0; i < n; ++i) {
        route(cfg_.routing, &rlogits_[i * ne], w.exp_probs_b, resident, ne, static_cast<int>(k),
              cpu::RouteWeighting{hp_.expert_weights_norm, hp_.routed_weight_scale()}, &u.ids[i * k],
              &u.wts[i * k], route_scratch_.data(), route_order_.data());
        if (observer_) observer_->on_route(l, u.pos0 + i, &u.ids[i * k], &u.wts[i * k], static_cast<int>(k));
    }
}

void Forward::moe_half(int64_t l, Ubatch* const* units, int64_t n_units) {
    const int64_t E = hp_.n_embd, W = kHc * E, k = hp_.n_expert_used, ne = hp_.n_expert, nff = hp_.n_ff_exp;
    const int64_t chunk = cfg_.moe_chunk;

    // Group every (unit, token, rank) slot by expert; experts in ascending id order.
    std::fill(by_expert_count_.begin(), by_expert_count_.end(), 0);
    int64_t n_slots = 0;
    for (int64_t ui = 0; ui < n_units; ++ui) {
        const Ubatch& u = *units[ui];
        for (int64_t s = 0; s < u.n * k; ++s) ++by_expert_count_[u.ids[s]];
        n_slots += u.n * k;
    }
    BG_CHECK(n_slots <= static_cast<int64_t>(by_expert_slot_.size()));
    int64_t n_used = 0;
    by_expert_start_[0] = 0;
    for (int64_t e = 0; e < ne; ++e) {
        by_expert_start_[e + 1] = by_expert_start_[e] + by_expert_count_[e];
        if (by_expert_count_[e] > 0) {
            used_tokens_[n_used] = by_expert_count_[e];
            used_experts_[n_used++] = static_cast<int32_t>(e);
        }
    }
    std::fill(by_expert_count_.begin(), by_expert_count_.end(), 0);
    for (int64_t ui = 0; ui < n_units; ++ui) {
        const Ubatch& u = *units[ui];
        for (int64_t s = 0; s < u.n * k; ++s) {
            const int32_t e = u.ids[s];
            by_expert_slot_[by_expert_start_[e] + by_expert_count_[e]++] = (ui << 32) | s;
        }
    }

    // Each expert once, for all its tokens, in the order the provider delivers them.
    experts_.begin_layer(l, used_experts_.data(), used_tokens_.data(), n_used);
    for (int64_t got = 0; got < n_used; ++got) {
        ExpertView v;
        const int32_t e = experts_.next_ready(&v);
        const int64_t s0 = by_expert_start_[e], m_total = by_expert_start_[e + 1] - s0;
        for (int64_t c0 = 0; c0 < m_total; c0 += chunk) {
            const int64_t m = std::min(chunk, m_total - c0);
            for (int64_t j = 0; j < m; ++j) {
                const int64_t slot = by_expert_slot_[s0 + c0 + j];
                const Ubatch& u = *units[slot >> 32];
                const int64_t tok = (slot & 0xffffffff) / k;
                std::memcpy(&xg_[j * E], &u.xf[tok * E], E * sizeof(float));
            }
            cpu::matmul(pool_, v.gate, xg_.data(), E, m, g_.data(), nff);
            cpu::matmul(pool_, v.up, xg_.data(), E, m, up_.data(), nff);
            cpu::swiglu(g_.data(), up_.data(), m * nff, hp_.swiglu_limit[l], cfg_.swiglu_form, h_.data());
            cpu::matmul(pool_, v.down, h_.data(), nff, m, eo_.data(), E);
            for (int64_t j = 0; j < m; ++j) {
                const int64_t slot = by_expert_slot_[s0 + c0 + j];
                Ubatch& u = *units[slot >> 32];
                std::memcpy(&u.eo[(slot & 0xffffffff) * E], &eo_[j * E], E * sizeof(float));
            }
        }
        experts_.release(e);
    }
    experts_.end_layer();

    // Per unit: y = sum over ranks of weight * expert output (+ shared expert), then expand.
    for (int64_t ui = 0; ui < n_units; ++ui) {
        Ubatch& u = *units[ui];
        float* y = y_.data();
        shared_expert(l, u, y);
        for (int64_t i = 0; i < u.n; ++i) {
            float* yt = &y[i * E];
            // routed experts in rank order, then the shared expert already in y: add routed
            // first into a zeroed row so the sum order is fixed.
            float* acc = &eo_[i * E];
            std::fill(acc, acc + E, 0.0f);
            for (int64_t j = 0; j < k; ++j) {
                const float wt = u.wts[i * k + j];
                const float* o = &u.eo[(i * k + j) * E];
                for (int64_t c = 0; c < E; ++c) acc[c] += wt * o[c];
            }
            for (int64_t c = 0; c < E; ++c) yt[c] += acc[c];
        }
        for (int64_t i = 0; i < u.n; ++i) {
            std::memcpy(&R_[i * W], &u.H[i * W], W * sizeof(float));
            expand(u.mix_f[i], &y[i * E], &R_[i * W], E, &u.H[i * W]);
        }
    }
}

void engram_rows_for(const HParams& hp, int64_t l, const int32_t* tokens, int64_t pos, uint64_t* rows) {
    const int64_t tab = hp.engram_table_index(l);
    BG_CHECK(tab >= 0 && hp.engram_max_ngram == 4);
    uint64_t c[4];
    for (int k = 0; k < 4; ++k) {
        const int64_t p = pos - k;
        if (p < 0) {
            c[k] = hp.engram_pad_id;
            continue;
        }
        const int32_t t = tokens[p];
        c[k] = static_cast<size_t>(t) < hp.engram_token_map.size() ? hp.engram_token_map[t] : hp.engram_pad_id;
    }
    const int64_t nb = hp.engram_buckets();
    cpu::engram_hash(c, &hp.engram_multipliers[tab * 4], &hp.engram_primes[tab * nb], &hp.engram_offsets[tab * nb],
                     static_cast<int>(hp.engram_heads), rows);
}

void Forward::engram_rows(int64_t l, int64_t pos, uint64_t* rows) const { engram_rows_for(hp_, l, tokens_.data(), pos, rows); }

void Forward::engram(int64_t l, Ubatch& u) {
    const LayerWeights& w = m_.layer(l);
    const int64_t E = hp_.n_embd, W = kHc * E, nb = hp_.engram_buckets(), dim = hp_.engram_dim;
    for (int64_t i = 0; i < u.n; ++i) {
        engram_rows(l, u.pos0 + i, &erows_[i * nb]);
        engram_.fetch_rows(l, &erows_[i * nb], nb, &erow_val_[i * nb * dim]);
    }
    // [n][buckets*dim] -> [n][4 keys + 1 value][n_embd]
    cpu::matmul(pool_, w.engram_wkv, erow_val_.data(), nb * dim, u.n, ekv_.data(), (kHc + 1) * E);
    for (int64_t i = 0; i < u.n; ++i) {
        const float* kv = &ekv_[i * (kHc + 1) * E];
        const float* v = kv + kHc * E;
        float* H = &u.H[i * W];
        for (int c = 0; c < kHc; ++c) {
            const float g = cpu::engram_gate(kv + c * E, H + c * E, w.engram_k + c * E, w.engram_q + c * E, E, hp_.rms_eps);
            for (int64_t e = 0; e < E; ++e) H[c * E + e] += g * v[e];
        }
    }
}

void Forward::compressor(int64_t l, const Ubatch& u) {
    const LayerWeights& w = m_.layer(l);
    const int64_t hd = hp_.head_dim, r = hp_.compress_ratios[l];
    float* cin = comp_in_[l].data();
    cpu::matmul(pool_, w.comp_kv, x_.data(), hp_.n_embd, u.n, cin + u.pos0 * hd, hd);
    const bool gated = m_.roles()[l].gated;
    if (gated) cpu::matmul(pool_, w.comp_gate, x_.data(), hp_.n_embd, u.n, comp_score_[l].data() + u.pos0 * hd, hd);
    const cpu::RopeParams rp = rope_compressed();
    for (int64_t i = 0; i < u.n; ++i) {
        const int64_t p = u.pos0 + i;
        if ((p + 1) % r != 0) continue;  // block b = p / r completes at its last token
        const int64_t b = p / r, t0 = b * r;
        for (int64_t c = 0; c < hd; ++c) {
            if (!gated) {
                float s = 0.0f;
                for (int64_t t = t0; t < t0 + r; ++t) s += cin[t * hd + c];
                pooled_[c] = s;
                continue;
            }
            // per-channel softmax of the scores over the block's tokens weights the kv
            const float* sc = comp_score_[l].data();
            float mx = -INFINITY;
            for (int64_t t = t0; t < t0 + r; ++t) mx = std::max(mx, sc[t * hd + c]);
            float den = 0.0f, num = 0.0f;
            for (int64_t t = t0; t < t0 + r; ++t) {
                const float e = std::exp(sc[t * hd + c] - mx);
                den += e;
                num += e * cin[t * hd + c];
            }
            pooled_[c] = num / den;
        }
        float* latent = &comp_latent_[l][b * hd];
        cpu::rmsnorm(pooled_.data(), w.comp_norm, hd, hp_.rms_eps, latent);
        float* row = &comp_rows_[l][b * hd];
        std::memcpy(row, latent, hd * sizeof(float));
        cpu::rope(row + hd - hp_.rope_dims, t0, rp, false);
    }
}

void Forward::index_keys(int64_t l, const Ubatch& u) {
    const LayerWeights& w = m_.layer(l);
    const int64_t src = kv_src_of_[l], r = hp_.compress_ratios[src], hd = hp_.head_dim, id = hp_.idx_head_dim;
    const cpu::RopeParams rp = rope_compressed();
    for (int64_t i = 0; i < u.n; ++i) {
        const int64_t p = u.pos0 + i;
        if ((p + 1) % r != 0) continue;
        const int64_t b = p / r;
        float* key = &idx_keys_[l][b * id];
        cpu::matmul(pool_, w.idx_k, &comp_latent_[src][b * hd], hd, 1, key, id);
        cpu::rmsnorm(key, w.idx_k_norm, id, hp_.rms_eps, key);
        cpu::rope(key + id - hp_.rope_dims, b * r, rp, false);
    }
}

void Forward::indexer(int64_t l, const Ubatch& u) {
    const LayerWeights& w = m_.layer(l);
    const int64_t ih = hp_.idx_n_head, id = hp_.idx_head_dim, ko = key_owner_of_[l];
    const int64_t r = hp_.compress_ratios[kv_src_of_[l]], top = hp_.idx_top_k, ctx = cfg_.n_ctx;
    cpu::matmul(pool_, w.idx_q_b, qa_.data(), hp_.q_lora_rank, u.n, iq_.data(), ih * id);
    cpu::matmul(pool_, w.idx_proj, x_.data(), hp_.n_embd, u.n, iw_.data(), ih);
    const cpu::RopeParams rp = rope_compressed();
    const float wscale = 1.0f / std::sqrt(static_cast<float>(id * ih));
    pool_.parallel_for(u.n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t p = u.pos0 + i;
            float* q = &iq_[i * ih * id];
            for (int64_t h = 0; h < ih; ++h) cpu::rope(q + h * id + id - hp_.rope_dims, p, rp, false);
            const int64_t visible = (p + 1) / r;
            float* score = &iscore_[i * ctx];
            const float* keys = idx_keys_[ko].data();
            for (int64_t b = 0; b < visible; ++b) {
                float s = 0.0f;
                for (int64_t h = 0; h < ih; ++h) {
                    float d = 0.0f;
                    for (int64_t c = 0; c < id; ++c) d += q[h * id + c] * keys[b * id + c];
                    s += iw_[i * ih + h] * wscale * std::max(d, 0.0f);
                }
                score[b] = s;
            }
            const int64_t k = std::min(visible, top);
            if (k > 0) cpu::top_k(score, visible, k, &sel_[l][p * top]);
            sel_n_[l][p] = static_cast<int32_t>(k);
        }
    });
}

void Forward::attention(int64_t l, const Ubatch& u, float* y) {
    const LayerWeights& w = m_.layer(l);
    const int64_t E = hp_.n_embd, hd = hp_.head_dim, nh = hp_.n_head, qd = hp_.q_dim(), n = u.n;
    const int64_t rd = hp_.rope_dims, ql = hp_.q_lora_rank;
    const cpu::RopeParams rp = rope_for_layer(l);
    const auto& ro = m_.roles()[l];

    cpu::matmul(pool_, w.q_a, x_.data(), E, n, qa_.data(), ql);
    for (int64_t i = 0; i < n; ++i) cpu::rmsnorm(&qa_[i * ql], w.q_a_norm, ql, hp_.rms_eps, &qa_[i * ql]);
    cpu::matmul(pool_, w.q_b, qa_.data(), ql, n, q_.data(), qd);
    cpu::matmul(pool_, w.kv, x_.data(), E, n, kvb_.data(), hd);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t p = u.pos0 + i;
        for (int64_t h = 0; h < nh; ++h) cpu::rope(&q_[i * qd + h * hd + hd - rd], p, rp, false);
        float* kv = &kv_cache_[l][p * hd];
        cpu::rmsnorm(&kvb_[i * hd], w.kv_a_norm, hd, hp_.rms_eps, kv);
        cpu::rope(kv + hd - rd, p, rp, false);
    }
    if (ro.kv_source) compressor(l, u);
    if (ro.key_owner) index_keys(l, u);
    if (ro.index_source) indexer(l, u);

    // Rows each query sees: the raw window, then the selected compressed rows.
    const int64_t max_rows = hp_.sliding_window + hp_.idx_top_k;
    const bool compressed = hp_.compress_ratios[l] > 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t p = u.pos0 + i;
        const float** rows = &rows_[i * max_rows];
        int64_t nr = 0;
        for (int64_t j = std::max<int64_t>(0, p - hp_.sliding_window + 1); j <= p; ++j) rows[nr++] = &kv_cache_[l][j * hd];
        if (compressed) {
            const int64_t src = kv_src_of_[l], is = idx_src_of_[l];
            const int32_t* sel = &sel_[is][p * hp_.idx_top_k];
            for (int32_t s = 0; s < sel_n_[is][p]; ++s) rows[nr++] = &comp_rows_[src][sel[s] * hd];
        }
        n_rows_[i] = nr;
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    pool_.parallel_for(n * nh, [&](int64_t a, int64_t b) {
        for (int64_t it = a; it < b; ++it) {
            const int64_t i = it / nh, h = it % nh, p = u.pos0 + i;
            float* out = &att_[i * qd + h * hd];
            cpu::attention_head(&q_[i * qd + h * hd], &rows_[i * max_rows], n_rows_[i], hd, scale, w.attn_sinks[h],
                                &att_scratch_[it * max_rows], out);
            cpu::rope(out + hd - rd, p, rp, true);  // undo the query position's rotation
        }
    });
    // Grouped low-rank output: group g maps its heads' outputs to o_lora values.
    const int64_t groups = hp_.o_groups, gin = qd / groups, orank = hp_.o_lora_rank;
    for (int64_t g = 0; g < groups; ++g)
        cpu::matmul(pool_, w.o_a.slice_rows(g * orank, orank), &att_[g * gin], qd, n, &oa_[g * orank], groups * orank);
    cpu::matmul(pool_, w.o_b, oa_.data(), groups * orank, n, y, E);
}

void Forward::shared_expert(int64_t l, const Ubatch& u, float* y) {
    const LayerWeights& w = m_.layer(l);
    const int64_t E = hp_.n_embd, n = u.n;
    if (hp_.n_expert_shared == 0) {
        std::fill(y, y + n * E, 0.0f);
        return;
    }
    const int64_t nsh = hp_.n_ff_exp * hp_.n_expert_shared;
    cpu::matmul(pool_, w.sh_gate, u.xf.data(), E, n, sg_.data(), nsh);
    cpu::matmul(pool_, w.sh_up, u.xf.data(), E, n, su_.data(), nsh);
    // Clamped like the routed experts, with the shared expert's own limit (llama.cpp build_ffn).
    cpu::swiglu(sg_.data(), su_.data(), n * nsh, hp_.swiglu_limit_shexp[l], cfg_.swiglu_form, sh_.data());
    cpu::matmul(pool_, w.sh_down, sh_.data(), nsh, n, y, E);
}

void Forward::final_hidden(const Ubatch& u, int64_t i, float* out) {
    const int64_t E = hp_.n_embd;
    collapse(&u.pre[i * kHc], &u.H[i * kHc * E], E, out);
    cpu::rmsnorm(out, m_.output_norm(), E, hp_.rms_eps, out);
}

void Forward::logits(const Ubatch& u, int64_t i, float* out) {
    final_hidden(u, i, tmp_.data());
    cpu::matmul(pool_, m_.output(), tmp_.data(), hp_.n_embd, 1, out, hp_.n_vocab);
}

}  // namespace bg::dsv41
