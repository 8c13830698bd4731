#include "model/dsv41_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/host_word.h"
#include "util/check.h"
#include "util/file_io.h"

namespace bg::dsv41 {

namespace {

constexpr int kHc = 4;  // residual copies (validated at load)
// How long the host ops' threads stay awake after a decode layer asks (Ops::expect_work): more
// than a layer, so that they stay awake through a decode step, and fall asleep soon after it.
constexpr int64_t kHostWorkAwakeUs = 5000;

RopeParams rope_compressed(const HParams& hp) {
    RopeParams p;
    p.n_dims = hp.rope_dims;
    p.freq_base = hp.compress_rope_freq_base;
    // rope.scaling.type applies here only: linear divides positions by the factor, YaRN ramps.
    p.yarn = hp.rope_scaling == RopeScaling::kYarn;
    p.factor = hp.rope_scaling == RopeScaling::kNone ? 1.0f : hp.yarn_factor;
    p.n_ctx_orig = hp.yarn_n_ctx_orig;
    p.beta_fast = hp.yarn_beta_fast;
    p.beta_slow = hp.yarn_beta_slow;
    return p;
}

RopeParams rope_for_layer(const HParams& hp, int64_t l) {
    if (hp.compress_ratios[l] > 0) return rope_compressed(hp);
    RopeParams p;
    p.n_dims = hp.rope_dims;
    p.freq_base = hp.rope_freq_base;
    p.yarn = false;
    return p;
}

}  // namespace


template <class T>
T* Forward::alloc(int64_t count) {
    const uint64_t bytes = std::max<uint64_t>(1, static_cast<uint64_t>(count) * sizeof(T));
    (ops_->memory_is_host() ? host_bytes_ : device_bytes_) += bytes;
    return static_cast<T*>(ops_->alloc(bytes));
}

template <class T>
T* Forward::alloc_host(int64_t count) {
    const uint64_t bytes = std::max<uint64_t>(1, static_cast<uint64_t>(count) * sizeof(T));
    host_bytes_ += bytes;
    void* p = ops_->alloc_host(bytes);
    host_allocations_.push_back(p);
    return static_cast<T*>(p);
}

MatView Forward::mat(const MatView& v) const {
    if (v.cols == 0) return {};  // a tensor this layer does not have
    MatView d = v;
    d.data = image_ + v.image_offset;
    BG_CHECK(!v.data || v.data == d.data || !ops_->memory_is_host());
    return d;
}

const float* Forward::vec(const float* host_vec) const {
    if (!host_vec) return nullptr;
    return reinterpret_cast<const float*>(image_ + (reinterpret_cast<const uint8_t*>(host_vec) - m_.dense_data()));
}

void Forward::load_dense_image() {
    // A backend whose memory is the host's computes from the model's own image. Elsewhere the
    // 1-D weights come from the host (dequantised to F32 at open); matrices from the host copy
    // when the model holds one, else straight from the file through a staging buffer that is
    // freed once loading is done, so no host copy of them outlives start-up.
    if (ops_->memory_is_host()) {
        BG_CHECK(m_.dense_home() == DenseHome::kHost);
        image_ = m_.dense_data();
        return;
    }
    uint8_t* image = alloc<uint8_t>(static_cast<int64_t>(m_.device_image_bytes()));
    image_ = image;
    ops_->upload(image, m_.dense_data(), m_.vector_bytes());
    constexpr uint64_t kStagingBytes = 64ull << 20;
    uint8_t* staging = nullptr;
    for (const DenseTensor& t : m_.device_tensors()) {
        if (t.vector) continue;
        uint8_t* dst = image + t.image_offset;
        if (m_.dense_home() == DenseHome::kHost) {
            ops_->upload(dst, m_.dense_data() + t.image_offset, t.info->n_bytes);
            continue;
        }
        if (!staging) staging = static_cast<uint8_t*>(ops_->alloc_host(kStagingBytes));
        for (uint64_t done = 0; done < t.info->n_bytes;) {
            const uint64_t n = std::min(kStagingBytes, t.info->n_bytes - done);
            m_.read_tensor(*t.info, staging, n, done, "forward: dense weights");
            ops_->upload(dst + done, staging, n);
            ops_->sync();  // the staging buffer is refilled next
            done += n;
        }
    }
    ops_->sync();
    if (staging) ops_->free_host(staging);
}

Forward::Forward(const Model& m, std::unique_ptr<Ops> ops, ExpertProvider& experts, EngramProvider& engram,
                 const ForwardConfig& cfg, std::unique_ptr<Ops> host_ops)
    : m_(m), hp_(m.hp()), ops_(std::move(ops)), host_ops_(std::move(host_ops)), experts_(experts), engram_(engram), cfg_(cfg),
      lay_(ForwardLayout::of(hp_, m.roles(), cfg, [&m](const std::string& name) {
          const gguf::TensorInfo* t = m.gguf().tensor(name);
          BG_CHECK(t != nullptr);
          return t->type;
      })) {
    BG_CHECK(hp_.hc_count == kHc);
    if (cfg_.n_ctx < 1 || cfg_.max_ubatch < 1 || cfg_.moe_chunk < 1) fail("forward: n_ctx, max_ubatch and moe_chunk must be >= 1");
    if (cfg_.max_launch < 0) fail("forward: max_launch must be >= 0");
    if (cfg_.routing != RoutingPolicy::kExact && (!cfg_.resident || static_cast<int64_t>(cfg_.resident->size()) != hp_.n_layer))
        fail("forward: routing '%s' needs a residency plan for all %lld layers", enum_name(cfg_.routing),
             (long long)hp_.n_layer);
    if (cfg_.hot && (!cfg_.resident || static_cast<int64_t>(cfg_.hot->size()) != hp_.n_layer))
        fail("forward: a hot set needs a residency plan, and one mask for each of the %lld layers", (long long)hp_.n_layer);
    if (cfg_.routing == RoutingPolicy::kHotPool && !cfg_.hot) fail("forward: routing 'hot-pool' needs the hot set");
    BG_CHECK_MSG((cfg_.host_expert_positions > 0) == (host_ops_ != nullptr) && cfg_.host_expert_positions >= 0,
                 "forward: host-expert ops are given exactly when host_expert_positions > 0");
    BG_CHECK(!host_ops_ || host_ops_->memory_is_host());
    const int64_t L = hp_.n_layer, ctx = cfg_.n_ctx, mu = cfg_.max_ubatch;
    E_ = hp_.n_embd;
    const ForwardLayout& f = lay_;

    load_dense_image();
    // Each layer's weights as the backend reads them: the model's views, moved into the image.
    static constexpr const float* LayerWeights::*kVectors[] = {
        &LayerWeights::attn_norm, &LayerWeights::ffn_norm, &LayerWeights::attn_sinks, &LayerWeights::q_a_norm,
        &LayerWeights::kv_a_norm, &LayerWeights::hc_attn_base, &LayerWeights::hc_attn_scale,
        &LayerWeights::hc_ffn_base, &LayerWeights::hc_ffn_scale, &LayerWeights::comp_norm, &LayerWeights::idx_k_norm,
        &LayerWeights::exp_probs_b, &LayerWeights::engram_q, &LayerWeights::engram_k};
    static constexpr MatView LayerWeights::*kMatrices[] = {
        &LayerWeights::q_a, &LayerWeights::q_b, &LayerWeights::kv, &LayerWeights::o_a, &LayerWeights::o_b,
        &LayerWeights::hc_attn_fn, &LayerWeights::hc_ffn_fn, &LayerWeights::comp_kv, &LayerWeights::comp_gate,
        &LayerWeights::idx_k, &LayerWeights::idx_q_b, &LayerWeights::idx_proj, &LayerWeights::gate_inp,
        &LayerWeights::sh_gate, &LayerWeights::sh_up, &LayerWeights::sh_down, &LayerWeights::engram_wkv};
    layers_.resize(L);
    for (int64_t l = 0; l < L; ++l) {
        LayerWeights& d = layers_[l] = m.layer(l);
        for (auto v : kVectors) d.*v = vec(d.*v);
        for (auto v : kMatrices) d.*v = mat(d.*v);
    }
    resident_.assign(L, nullptr);
    for (int64_t l = 0; l < f.resident_masks; ++l) {
        BG_CHECK(static_cast<int64_t>((*cfg_.resident)[l].size()) == f.resident_mask);
        resident_[l] = alloc<uint8_t>(f.resident_mask);
        ops_->upload(resident_[l], (*cfg_.resident)[l].data(), f.resident_mask);
    }
    hot_.assign(L, nullptr);
    for (int64_t l = 0; l < f.hot_masks; ++l) hot_[l] = alloc<uint8_t>(f.resident_mask);
    refresh_hot_set();

    const auto& roles = m.roles();
    kv_src_of_.assign(L, -1);
    key_owner_of_.assign(L, -1);
    idx_src_of_.assign(L, -1);
    for (int64_t l = 0, kv = -1, ko = -1, is = -1; l < L; ++l) {
        if (roles[l].kv_source) kv = l;
        if (roles[l].key_owner) ko = l;
        if (roles[l].index_source) is = l;
        kv_src_of_[l] = kv;
        key_owner_of_[l] = ko;
        idx_src_of_[l] = is;
    }
    auto per_layer = [&](const std::vector<int64_t>& counts, auto& out) {
        using T = std::remove_pointer_t<typename std::decay_t<decltype(out)>::value_type>;
        out.assign(L, nullptr);
        for (int64_t l = 0; l < L; ++l)
            if (counts[l] > 0) out[l] = alloc<T>(counts[l]);
    };
    per_layer(f.kv_cache, kv_cache_);
    per_layer(f.comp_in, comp_in_);
    per_layer(f.comp_score, comp_score_);
    per_layer(f.comp_latent, comp_latent_);
    per_layer(f.comp_rows, comp_rows_);
    per_layer(f.idx_keys, idx_keys_);
    per_layer(f.sel, sel_);
    per_layer(f.sel_n, sel_n_);

    H_ = alloc<float>(f.H);
    pre_ = alloc<float>(f.pre);
    xf_ = alloc<float>(f.xf);
    mixf_ = alloc<float>(f.mixf);
    ids_ = alloc<int32_t>(f.ids);
    wts_ = alloc<float>(f.wts);
    eo_ = alloc<float>(f.eo);
    iota_ = alloc<int32_t>(f.iota);
    for (auto [p, c] : {std::pair{&hflat_, f.hflat}, {&mixm_, f.mixm}, {&mixa_, f.mixa}, {&x_, f.x}, {&y_, f.y},
                        {&qa_, f.qa}, {&q_, f.q}, {&kvb_, f.kvb}, {&att_, f.att}, {&oa_, f.oa}, {&iq_, f.iq},
                        {&iw_, f.iw}, {&iscore_, f.iscore}, {&rlogits_, f.rlogits}, {&pooled_, f.pooled},
                        {&emb_, f.emb}, {&erow_, f.erow}, {&ekv_, f.ekv}, {&sg_, f.sg}, {&su_, f.su}, {&sh_, f.sh},
                        {&logits_, f.logits}})
        *p = alloc<float>(c);
    bpos_ = alloc<int32_t>(f.bpos);
    groups_ = alloc<int32_t>(f.groups);
    greedy_ = alloc<int32_t>(f.greedy);

    tokens_ = alloc_host<int32_t>(f.tokens);
    out_host_ = alloc_host<float>(f.out_host);
    emb_host_ = alloc_host<float>(f.emb_host);
    onehot_ = alloc_host<float>(f.onehot);
    erows_ = alloc_host<uint64_t>(f.erows);
    if (!m_.moe_shape().engram_layers.empty()) plan_rows_.resize(static_cast<size_t>(hp_.engram_buckets()));
    groups_host_ = alloc_host<int32_t>(f.groups_host);
    by_expert_start_ = alloc_host<int32_t>(f.by_expert_start);
    used_experts_ = alloc_host<int32_t>(f.used_experts);
    used_tokens_ = alloc_host<int32_t>(f.used_tokens);
    greedy_host_ = alloc_host<int32_t>(f.greedy_host);
    if (host_ops_) {
        xf_host_ = alloc_host<float>(f.xf_host);
        host_pack_ = alloc_host<int32_t>(f.host_pack);
        host_dest_ = alloc_host<int32_t>(f.host_dest);
        eo_host_ = alloc_host<float>(f.eo_host);
        host_done_ = alloc_host<uint32_t>(f.host_done);
        eo_host_view_ = static_cast<const float*>(ops_->host_view(eo_host_));
        host_dest_view_ = static_cast<const int32_t*>(ops_->host_view(host_dest_));
        // Packed row j of the CPU's outputs is row j of eo_host_.
        for (int64_t i = 0; i < f.host_pack; ++i) host_pack_[i] = static_cast<int32_t>(i);
        host_ops_->reserve(lay_.host_ops);
        const int64_t jobs = cfg_.host_expert_positions * hp_.n_expert_used;  // distinct experts of a call, at most
        host_jobs_.resize(static_cast<size_t>(jobs));
        host_calls_.resize(static_cast<size_t>(jobs));
        host_call_experts_.resize(static_cast<size_t>(jobs));
        // Where the device's ops run on this host's thread pool too (the CPU backend), the CPU's
        // experts stay on this thread: two teams cannot share the pool at once.
        // (+1: the job that publishes a layer's end, publish_host_done.)
        if (!ops_->memory_is_host()) host_thread_ = std::make_unique<cpu::JobThread>(jobs + 1);
    }
    // Layer 0's attention collapses with a one-hot on copy 0.
    for (int64_t i = 0; i < mu; ++i) onehot_[i * kHc] = 1.0f;
    // Position t holds t: the positions rope, attention and the indexer read, and the row ids
    // the embedding gather reads for a unit's rows 0..n-1.
    ops_->fill_positions(iota_, ctx, 0, 1);

    ops_->reserve(lay_.ops);
    ops_->sync();
    ops_->begin_timeline();
    // `betelgeuse plan` prints what the forward holds from the same layout.
    const uint64_t host_ops_bytes = host_ops_ ? host_ops_->own_host_bytes() : 0;
    const ForwardBytes planned = lay_.bytes(ops_->memory_is_host(), m.device_image_bytes(), ops_->own_bytes(),
                                            ops_->own_host_bytes() + host_ops_bytes);
    host_bytes_ += ops_->own_host_bytes() + host_ops_bytes;
    (ops_->memory_is_host() ? host_bytes_ : device_bytes_) += ops_->own_bytes();
    BG_CHECK(device_bytes_ == planned.device_total() && host_bytes_ == planned.host);
}

Forward::~Forward() {
    if (host_thread_) host_thread_->wait_idle();  // a call that threw may have left CPU experts running
    ops_->sync();
    for (void* p : host_allocations_) ops_->free_host(p);
}

void Forward::set_routing(RoutingPolicy p) {
    if (p != RoutingPolicy::kExact && !cfg_.resident) fail("forward: routing '%s' needs a residency plan", enum_name(p));
    if (p == RoutingPolicy::kHotPool && !cfg_.hot) fail("forward: routing 'hot-pool' needs the hot set");
    cfg_.routing = p;
}

void Forward::refresh_hot_set() {
    for (int64_t l = 0; l < lay_.hot_masks; ++l) {
        const std::vector<uint8_t>& hot = (*cfg_.hot)[l];
        const std::vector<uint8_t>& resident = (*cfg_.resident)[l];
        BG_CHECK(static_cast<int64_t>(hot.size()) == lay_.resident_mask);
        for (int64_t e = 0; e < lay_.resident_mask; ++e) BG_CHECK_MSG(!hot[e] || resident[e], "a hot expert is not resident");
        // Queued behind the work already issued, so the layers still to run with the old set do.
        ops_->upload(hot_[l], hot.data(), lay_.resident_mask);
    }
}

void Forward::reset() {
    settle_layer();
    plan_layer_ = SIZE_MAX;
    // Caches are overwritten position by position; only the selection counts must be cleared
    // for a reused position to never see a stale selection.
    for (int64_t l = 0; l < hp_.n_layer; ++l)
        if (sel_n_[l]) ops_->zero(sel_n_[l], lay_.sel_n[l] * sizeof(int32_t));
}

void engram_hash(const uint64_t c[4], const uint64_t mult[4], const uint64_t* primes,
                 const uint64_t* offsets, int n_head, uint64_t* rows) {
    uint64_t h = c[0] * mult[0];  // unsigned: wraps mod 2^64 by definition
    for (int k = 1; k <= 3; ++k) {
        h ^= c[k] * mult[k];
        for (int j = 0; j < n_head; ++j) {
            const int idx = (k - 1) * n_head + j;
            rows[idx] = h % primes[idx] + offsets[idx];
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
    engram_hash(c, &hp.engram_multipliers[tab * 4], &hp.engram_primes[tab * nb], &hp.engram_offsets[tab * nb],
                     static_cast<int>(hp.engram_heads), rows);
}

void Forward::engram_rows(int64_t layer, int64_t pos, uint64_t* rows) const { engram_rows_for(hp_, layer, tokens_, pos, rows); }

void Forward::record_tokens(const int32_t* tokens, int64_t n, int64_t pos0) {
    if (pos0 < 0 || n < 1 || pos0 + n > cfg_.n_ctx)
        fail("forward: positions %lld..%lld exceed the context of %lld tokens", (long long)pos0,
             (long long)(pos0 + n - 1), (long long)cfg_.n_ctx);
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab)
            fail("forward: token id %d is outside the vocabulary (%lld)", tokens[i], (long long)hp_.n_vocab);
    std::copy(tokens, tokens + n, tokens_ + pos0);
}

void Forward::embed(Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) {
    if (n < 1 || n > cfg_.max_ubatch)
        fail("forward: a unit holds 1..%lld tokens, got %lld", (long long)cfg_.max_ubatch, (long long)n);
    record_tokens(tokens, n, pos0);
    u.pos0 = pos0;
    u.n = n;
    // The embedding lives in host memory: its rows, dequantised here, go over as [n][E] floats,
    // which the backend then spreads over the four residual copies.
    const MatView emb = m_.token_embd();
    // The last call's rows may still be on their way over: emb_host_ is rewritten only once they
    // are. Waited for here rather than after queueing them (in decode the token's own download
    // synced the stream just before, so this wait costs nothing there).
    if (emb_host_in_flight_) sync_device();
    for (int64_t i = 0; i < n; ++i)
        dequantize_row(emb.type, emb.data + static_cast<uint64_t>(tokens[i]) * emb.row_stride, emb_host_ + i * E_, E_);
    ops_->upload(emb_, emb_host_, n * E_ * sizeof(float));
    open_busy();
    ops_->embed_rows(emb_, iota_, n, E_, H(pos0));
    ops_->upload(pre_ + pos0 * kHc, onehot_, n * kHc * sizeof(float));  // onehot_ is never rewritten
    emb_host_in_flight_ = true;
}

void Forward::plan_reads(const int32_t* tokens, int64_t pos0, int64_t n) {
    record_tokens(tokens, n, pos0);  // the Engram rows hash them
    if (!engram_.reads_ahead()) {
        plan_layer_ = SIZE_MAX;  // nothing to offer rows to
        return;
    }
    plan_pos0_ = plan_pos_ = pos0;
    plan_end_ = pos0 + n;
    plan_row_ = 0;
    plan_layer_ = 0;
    plan_fetching_ = 0;
    offer_engram_rows();
}

void Forward::offer_engram_rows() {
    // The order the fetches will ask in: each Engram layer in turn, its positions ascending
    // (units are consecutive positions, each fetch a unit's rows by position).
    if (plan_layer_ == SIZE_MAX) return;  // no plan
    const std::vector<int64_t>& layers = m_.moe_shape().engram_layers;
    const int64_t nb = hp_.engram_buckets();
    // One Engram layer at a time: the next layer's rows are offered once this one's fetches are
    // done. The disk serves random reads at a rate, not all at once: with both layers' reads in
    // flight the first layer's fetch waited for all of them (the slice's decode, H200 2026-12-05:
    // 943 us a token where each layer's own took 461 and 427, the second of them now hidden).
    if (plan_layer_ >= layers.size() || plan_layer_ > plan_fetching_) {
        engram_.read_ahead(0, nullptr, 0);  // nothing to offer now: only let the reads move on
        return;
    }
    while (plan_layer_ < layers.size() && plan_layer_ <= plan_fetching_) {
        const int64_t l = layers[plan_layer_];
        engram_rows(l, plan_pos_, plan_rows_.data());
        plan_row_ += engram_.read_ahead(l, plan_rows_.data() + plan_row_, nb - plan_row_);
        if (plan_row_ < nb) return;  // no room: the rest after the next fetch
        plan_row_ = 0;
        if (++plan_pos_ == plan_end_) {
            plan_pos_ = plan_pos0_;
            ++plan_layer_;
        }
    }
}

void Forward::mix(const MatView& fn, const float* base, const float* scale, const float* h, int64_t n, float* out_mix) {
    const int64_t W = kHc * E_;
    ops_->rmsnorm(h, nullptr, W, n, hp_.rms_eps, hflat_);
    ops_->matmul(fn, hflat_, W, n, mixm_, 24);
    ops_->hc_mix(mixm_, base, scale, n, static_cast<int>(hp_.hc_sinkhorn_iters), hp_.hc_eps, out_mix);
}

void Forward::engram(int64_t l, int64_t p0, int64_t n) {
    const LayerWeights& w = layers_[l];
    const int64_t nb = hp_.engram_buckets(), dim = hp_.engram_dim;
    for (int64_t i = 0; i < n; ++i) engram_rows(l, p0 + i, &erows_[i * nb]);
    close_busy();  // the fetch waits for the rows' reads
    engram_.fetch_rows(l, erows_, n * nb, erow_, *ops_);
    // The fetch read what the ring did not hold: the offers go on after its rows.
    const std::vector<int64_t>& layers = m_.moe_shape().engram_layers;
    const size_t li = static_cast<size_t>(std::find(layers.begin(), layers.end(), l) - layers.begin());
    const int64_t end = p0 + n;
    if (plan_layer_ != SIZE_MAX && p0 >= plan_pos0_ && end <= plan_end_ &&
        (plan_layer_ < li || (plan_layer_ == li && plan_pos_ < end))) {
        plan_layer_ = end == plan_end_ ? li + 1 : li;
        plan_pos_ = end == plan_end_ ? plan_pos0_ : end;
        plan_row_ = 0;
    }
    if (plan_layer_ != SIZE_MAX && p0 >= plan_pos0_ && end == plan_end_) plan_fetching_ = std::max(plan_fetching_, li + 1);
    // [n][buckets*dim] -> [n][4 keys + 1 value][n_embd]
    open_busy();
    ops_->matmul(w.engram_wkv, erow_, nb * dim, n, ekv_, (kHc + 1) * E_);
    ops_->engram_gate_add(ekv_, w.engram_k, w.engram_q, n, E_, hp_.rms_eps, H(p0));
    // Into the room this fetch made, once the device has the layer's work: submitting the next
    // layer's reads first left the device idle meanwhile (49 us a decode token in 2f682a8's trace
    // on an H100, between the rows' dequantisation and the matmul).
    offer_engram_rows();
}

// Compressed rows and index keys of the blocks that complete among positions p0..p0+n-1.
void Forward::blocks(int64_t l, int64_t p0, int64_t n) {
    const auto& ro = m_.roles()[l];
    const LayerWeights& w = layers_[l];
    const int64_t hd = hp_.head_dim, id = hp_.idx_head_dim;
    const RopeParams rp = rope_compressed(hp_);
    if (ro.kv_source) {
        const int64_t r = hp_.compress_ratios[l];
        // comp_kv (and comp_gate) of x_ ran with the layer's other projections of it (attention()).
        // Block b = p / r completes at its last token: blocks [b0, b1) complete here.
        const int64_t b0 = (p0 + r) / r - 1, b1 = (p0 + n) / r;
        if (b1 > b0) {
            const int64_t nblk = b1 - b0;
            ops_->compress_pool(comp_in_[l], ro.gated ? comp_score_[l] : nullptr, hd, r, b0, nblk, pooled_);
            ops_->rmsnorm(pooled_, w.comp_norm, hd, nblk, hp_.rms_eps, comp_latent_[l] + b0 * hd);
            ops_->copy(comp_rows_[l] + b0 * hd, comp_latent_[l] + b0 * hd, nblk * hd * sizeof(float));
            ops_->fill_positions(bpos_, nblk, b0 * r, r);
            ops_->rope(comp_rows_[l] + b0 * hd, hd, nblk, bpos_, 1, hd, rp, false);
        }
    }
    if (ro.key_owner) {
        const int64_t src = kv_src_of_[l], r = hp_.compress_ratios[src];
        const int64_t b0 = (p0 + r) / r - 1, b1 = (p0 + n) / r;
        if (b1 > b0) {
            const int64_t nblk = b1 - b0;
            float* keys = idx_keys_[l] + b0 * id;
            ops_->matmul(w.idx_k, comp_latent_[src] + b0 * hd, hd, nblk, keys, id);
            ops_->rmsnorm(keys, w.idx_k_norm, id, nblk, hp_.rms_eps, keys);
            ops_->fill_positions(bpos_, nblk, b0 * r, r);
            ops_->rope(keys, id, nblk, bpos_, 1, id, rp, false);
        }
    }
}

void Forward::attention(int64_t l, int64_t p0, int64_t n) {
    const LayerWeights& w = layers_[l];
    const auto& ro = m_.roles()[l];
    const int64_t hd = hp_.head_dim, nh = hp_.n_head, qd = hp_.q_dim(), ql = hp_.q_lora_rank;
    const int32_t* pos = iota_ + p0;
    const RopeParams rp = rope_for_layer(hp_, l);

    // Every projection of x_ in one call (one activation pass; at decode one launch where the
    // types allow): the query's low rank, the KV row, the compressor's KV and gate, the indexer's
    // head weights.
    MatView proj[5];
    float* proj_out[5];
    int64_t proj_ld[5];
    int n_proj = 0;
    auto project = [&](const MatView& W, float* y, int64_t ldy) {
        proj[n_proj] = W;
        proj_out[n_proj] = y;
        proj_ld[n_proj++] = ldy;
    };
    project(w.q_a, qa_, ql);
    project(w.kv, kvb_, hd);
    if (ro.kv_source) {
        project(w.comp_kv, comp_in_[l] + p0 * hd, hd);
        if (ro.gated) project(w.comp_gate, comp_score_[l] + p0 * hd, hd);
    }
    if (ro.index_source) project(w.idx_proj, iw_, hp_.idx_n_head);
    ops_->matmul_many(proj, n_proj, x_, E_, n, proj_out, proj_ld);
    ops_->rmsnorm(qa_, w.q_a_norm, ql, n, hp_.rms_eps, qa_);
    ops_->matmul(w.q_b, qa_, ql, n, q_, qd);
    ops_->rope(q_, qd, n, pos, nh, hd, rp, false);
    float* kv_rows = kv_cache_[l] + p0 * hd;
    ops_->rmsnorm(kvb_, w.kv_a_norm, hd, n, hp_.rms_eps, kv_rows);
    ops_->rope(kv_rows, hd, n, pos, 1, hd, rp, false);
    blocks(l, p0, n);
    if (ro.index_source) {
        const int64_t ih = hp_.idx_n_head, id = hp_.idx_head_dim;
        ops_->matmul(w.idx_q_b, qa_, ql, n, iq_, ih * id);
        ops_->rope(iq_, ih * id, n, pos, ih, id, rope_compressed(hp_), false);
        ops_->scale(iw_, n * ih, 1.0f / std::sqrt(static_cast<float>(id * ih)));
        IndexerArgs a;
        a.q = iq_;
        a.w = iw_;
        a.keys = idx_keys_[key_owner_of_[l]];
        a.pos = pos;
        a.n_tok = n;
        a.n_head = ih;
        a.head_dim = id;
        a.ratio = hp_.compress_ratios[kv_src_of_[l]];
        a.top_k = hp_.idx_top_k;
        a.scores = iscore_;
        a.ld_scores = cfg_.n_ctx;
        a.sel = sel_[l];
        a.sel_n = sel_n_[l];
        ops_->indexer(a);
    }
    // Rows each query sees: the raw window, then the selected compressed rows.
    AttentionArgs a;
    a.q = q_;
    a.ldq = qd;
    a.kv = kv_cache_[l];
    if (hp_.compress_ratios[l] > 0) {
        a.comp = comp_rows_[kv_src_of_[l]];
        a.sel = sel_[idx_src_of_[l]];
        a.sel_n = sel_n_[idx_src_of_[l]];
        a.top_k = hp_.idx_top_k;
    }
    a.sinks = w.attn_sinks;
    a.pos = pos;
    a.n_tok = n;
    a.n_head = nh;
    a.d = hd;
    a.window = hp_.sliding_window;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.out = att_;
    a.ldo = qd;
    ops_->attention(a);
    ops_->rope(att_, qd, n, pos, nh, hd, rp, true);  // undo the query position's rotation
    // Grouped low-rank output: group g maps its heads' outputs to o_lora values.
    const int64_t groups = hp_.o_groups, gin = qd / groups, orank = hp_.o_lora_rank;
    BG_CHECK(w.o_a.cols == gin && w.o_a.rows == groups * orank);
    ops_->matmul_grouped(w.o_a, groups, att_, qd, n, oa_, groups * orank);
    ops_->matmul(w.o_b, oa_, groups * orank, n, y_, E_);
}

Forward::Launch Forward::launch_of(Ubatch* const* units, int64_t n_units) const {
    BG_CHECK(n_units >= 1);
    Launch g{units[0]->pos0, 0};
    for (int64_t ui = 0; ui < n_units; ++ui) {
        BG_CHECK_MSG(units[ui]->pos0 == g.pos0 + g.n && units[ui]->n >= 1, "forward: a launch's units hold consecutive positions");
        g.n += units[ui]->n;
    }
    return g;
}

void Forward::attention_half(int64_t l, Ubatch* const* units, int64_t n_units) {
    const Launch g = launch_of(units, n_units);
    BG_CHECK(l >= 0 && l < hp_.n_layer && g.n <= cfg_.launch_tokens());
    const LayerWeights& w = layers_[l];
    const int64_t p0 = g.pos0, n = g.n, k = hp_.n_expert_used, ne = hp_.n_expert;
    float* h = H(p0);
    if (m_.roles()[l].engram)
        engram(l, p0, n);
    else
        offer_engram_rows();  // read-ahead reads move on only while someone polls them
    open_busy();              // or still open from the last layer's sums: nothing above waited
    // Attention sub-layer.
    mix(w.hc_attn_fn, w.hc_attn_base, w.hc_attn_scale, h, n, mixa_);
    ops_->hc_collapse(h, pre_ + p0 * kHc, kHc, n, E_, x_);
    ops_->rmsnorm(x_, w.attn_norm, E_, n, hp_.rms_eps, x_);
    attention(l, p0, n);
    ops_->hc_expand(mixa_, y_, h, n, E_, h);

    // MoE input: collapse with the attention mix's pre (one sub-layer of lag); H now holds the
    // MoE sub-layer's residual until moe_half.
    float* mixf = mixf_ + p0 * kMixWidth;
    float* xf = xf_ + p0 * E_;
    mix(w.hc_ffn_fn, w.hc_ffn_base, w.hc_ffn_scale, h, n, mixf);
    ops_->hc_collapse(h, mixa_ + kMixPre, kMixWidth, n, E_, xf);
    ops_->rmsnorm(xf, w.ffn_norm, E_, n, hp_.rms_eps, xf);
    // The MoE input of a call the CPU may compute host-resident experts of (a decode step) goes
    // to the host now, before the routing (queued after the grouping, its copy started only once
    // the grouping had ended).
    xf_host_pos0_ = -1;
    if (host_ops_ && n <= cfg_.host_expert_positions) {
        ops_->download(xf_host_, xf, n * E_ * sizeof(float));
        xf_host_pos0_ = p0;
        xf_host_n_ = n;
    }
    // The next sub-layer collapses with this mix's pre.
    ops_->copy_rows(pre_ + p0 * kHc, kHc, mixf + kMixPre, kMixWidth, kHc, n);

    // Routing: a pure function of the scores and the fixed resident set (and, under hot-pool, of
    // the hot set).
    ops_->matmul(w.gate_inp, xf, E_, n, rlogits_, ne);
    int32_t* ids = ids_ + p0 * k;
    float* wts = wts_ + p0 * k;
    ops_->route(cfg_.routing, rlogits_, w.exp_probs_b, resident_[l], hot_[l], n, ne, static_cast<int>(k),
                RouteWeighting{hp_.expert_weights_norm, hp_.routed_weight_scale()}, ids, wts);
    // The bracket stays open for moe_half's grouping, next (or closes at the next wait).
    // The routing stays on the device: moe_half groups it there and the host learns the layer's
    // experts from one copy of the counts. Only an observer (fidelity) sees each unit's choices.
    if (!observer_) return;
    for (int64_t ui = 0; ui < n_units; ++ui) {
        Ubatch& u = *units[ui];
        u.ids.resize(static_cast<size_t>(u.n * k));  // a unit's size at most: no allocation after the first
        u.wts.resize(static_cast<size_t>(u.n * k));
        ops_->download(u.ids.data(), ids_ + u.pos0 * k, u.n * k * sizeof(int32_t));
        ops_->download(u.wts.data(), wts_ + u.pos0 * k, u.n * k * sizeof(float));
    }
    sync_device();
    for (int64_t ui = 0; ui < n_units; ++ui) {
        const Ubatch& u = *units[ui];
        for (int64_t i = 0; i < u.n * k; ++i)
            if (u.ids[i] < 0 || u.ids[i] >= ne)
                fail("forward: layer %lld routed token %lld to expert %d", (long long)l, (long long)(u.pos0 + i / k),
                     u.ids[i]);
        for (int64_t i = 0; i < u.n; ++i)
            observer_->on_route(l, u.pos0 + i, &u.ids[i * k], &u.wts[i * k], static_cast<int>(k));
    }
}

void Forward::moe_half(int64_t l, Ubatch* const* units, int64_t n_units) {
    const LayerWeights& w = layers_[l];
    const int64_t k = hp_.n_expert_used, ne = hp_.n_expert, nff = hp_.n_ff_exp, chunk = cfg_.moe_chunk;
    // The units hold consecutive positions: their routing slots are one run of ids_.
    const Launch all = launch_of(units, n_units);
    const int64_t pos0 = all.pos0, n_pos = all.n;
    const int64_t n_slots = n_pos * k;
    BG_CHECK(ne + 1 + 2 * n_slots <= lay_.groups);
    // Group every (token, rank) slot by expert on the device, experts in ascending id order
    // (rows: xf by position, eo by position*k + rank); the host needs only the counts, which wait
    // for the layer's routing. The groups are laid out for this call (ForwardLayout::groups):
    // counts [ne + 1], gather rows [n_slots], scatter rows [n_slots], one after another.
    int32_t* const counts = groups_;
    int32_t* const gather_rows = counts + ne + 1;
    int32_t* const scatter_rows = gather_rows + n_slots;
    // A call the CPU may compute host-resident experts of needs its rows on the host too: the
    // grouping kernel writes them there itself, all three (its activations came down after the
    // MoE norm, attention_half). A copy queued after the kernel started on the device 5-6 us
    // after it ended, and the activations' after that (a98fd0d's H100 trace): on the path from a
    // decode layer's routing to its first expert copy.
    const bool host_compute = host_ops_ && n_pos <= cfg_.host_expert_positions;
    const int32_t* const by_expert_count = groups_host_;
    int32_t* const host_gather = groups_host_ + ne + 1;  // meaningful with host_compute
    const int32_t* const host_scatter = host_gather + n_slots;
    BG_CHECK(!host_compute || ne + 1 + 2 * n_slots <= lay_.groups_host);
    open_busy();  // or still open from the attention half, where nothing waited between
    ops_->group_by_expert(ids_ + pos0 * k, n_slots, k, pos0, ne, counts, gather_rows, scatter_rows,
                          host_compute ? groups_host_ : nullptr);
    if (host_compute) {
        // The CPU's threads wake while the device finishes the layer's routing, and stay awake
        // through the layer's experts (a decode layer takes 1-3 ms on the slice).
        host_ops_->expect_work(kHostWorkAwakeUs);
        if (host_thread_) host_thread_->stay_awake(kHostWorkAwakeUs);
        // Its activations, where the attention half did not send this call's (a call of several
        // launches).
        if (xf_host_pos0_ != pos0 || xf_host_n_ != n_pos)
            ops_->download(xf_host_, xf_ + pos0 * E_, n_pos * E_ * sizeof(float));
    } else {
        ops_->download(groups_host_, groups_, (ne + 1) * sizeof(int32_t));
    }
    close_busy();
    // The last layer settles while the device runs this one's attention and routing: what it
    // waits for (its experts' fences, its CPU jobs, which the device waited for) comes before
    // these copies on the stream, so none of it is left on the host's path from the counts'
    // landing to this layer's first copy.
    settle_layer();
    // The store's streamer spins from here to begin_layer (the device's attention and routing,
    // a few hundred microseconds), not while the last layer's CPU experts, settled above, ran.
    if (host_compute) experts_.expect_layer(kHostWorkAwakeUs);
    sync_device();
    if (host_compute)
        for (int64_t i = 0; i < n_slots; ++i) host_gather[i] -= static_cast<int32_t>(pos0);  // rows of xf_host_
    if (by_expert_count[ne] != 0)
        fail("forward: layer %lld routed %d of %lld slots outside the %lld experts", (long long)l, by_expert_count[ne],
             (long long)n_slots, (long long)ne);
    int64_t n_used = 0;
    by_expert_start_[0] = 0;
    for (int64_t e = 0; e < ne; ++e) {
        by_expert_start_[e + 1] = by_expert_start_[e] + by_expert_count[e];
        if (by_expert_count[e] > 0) {
            used_tokens_[n_used] = by_expert_count[e];
            used_experts_[n_used++] = static_cast<int32_t>(e);
        }
    }
    BG_CHECK(by_expert_start_[ne] == n_slots);

    // The shared expert into y_ (per launch: y_ holds one launch), which needs only xf. A call of
    // one launch (a decode step; a prefill of up to --launch-tokens) queues it first, so the
    // device computes it while the CPU computes host-resident experts and copies land, rather
    // than after them; the sums are the same.
    auto shared_expert = [&](int64_t p0, int64_t n) {
        const float* xf = xf_ + p0 * E_;
        if (hp_.n_expert_shared > 0) {
            const int64_t nsh = nff * hp_.n_expert_shared;
            ops_->matmul(w.sh_gate, xf, E_, n, sg_, nsh);
            ops_->matmul(w.sh_up, xf, E_, n, su_, nsh);
            // Clamped like the routed experts, with the shared expert's own limit (llama.cpp build_ffn).
            ops_->swiglu(sg_, su_, n * nsh, hp_.swiglu_limit_shexp[l], cfg_.swiglu_form, sh_);
            ops_->matmul(w.sh_down, sh_, nsh, n, y_, E_);
        } else {
            ops_->zero(y_, n * E_ * sizeof(float));
        }
    };
    // The dense work of the units after the routed experts goes in launches of whole units, as
    // the attention halves did (the runner's grouping).
    const int64_t launch = cfg_.launch_tokens();
    const bool shared_first = units_in_launch(units, n_units, launch) == n_units;
    // Each expert once, for all its tokens, in the order the provider delivers them. While the
    // host waits for the next expert, the device works through the queued ones. Announced before
    // the shared expert's launches: the provider's copies start the sooner (its first copy began
    // about 100 us after the routing in ecf687b's hybrid trace).
    // An expert split between the CPU and the device comes twice (ExpertView::part).
    const int64_t hand_outs = experts_.begin_layer(l, used_experts_, used_tokens_, n_used, host_compute);
    BG_CHECK(hand_outs >= n_used && hand_outs <= 2 * n_used);

    // Each fence holds a batch of at least one expert, so experts kept unreleased bound the fences.
    const int64_t lag = std::min<int64_t>(Ops::kFences - 1, experts_.max_unreleased());
    int64_t n_packed = 0;  // routing slots the CPU computed, packed in eo_host_
    // Of those, the rows of a split expert's CPU part [part_pack0, + part_pack_n): added to its
    // device part's rows, not written.
    int64_t part_pack0 = 0, part_pack_n = 0;
    int64_t n_host_jobs = 0, n_host_calls = 0;
    // Should the provider throw (a failed read), the CPU's experts still running end before the
    // exception leaves: they write this call's buffers and release to the provider.
    struct HostJobsEnd {
        cpu::JobThread* t;
        ~HostJobsEnd() {
            if (t) t->wait_idle();
        }
    } host_jobs_end{host_thread_.get()};
    host_error_ = nullptr;  // a call that threw may have left one
    int32_t got_experts[kExpertBatch];
    ExpertView got_views[kExpertBatch];
    // The CPU's experts of a batch, as one job: on the host thread (released there when it ends)
    // while this thread goes on issuing the device's experts; here on the CPU backend.
    const auto start_host_job = [&](int64_t n_got) {
        const int64_t first_call = n_host_calls;
        for (int64_t b = 0; b < n_got; ++b) {
            const ExpertView& v = got_views[b];
            if (!v.on_host) continue;
            const int32_t e = got_experts[b];
            const int64_t s0 = by_expert_start_[e], m_total = by_expert_start_[e + 1] - s0;
            BG_CHECK(host_compute && m_total <= cfg_.host_expert_positions);
            BG_CHECK(n_host_calls < static_cast<int64_t>(host_calls_.size()));
            host_calls_[static_cast<size_t>(n_host_calls)] = {{v.gate, v.up, v.down}, host_gather + s0, m_total,
                                                              host_pack_ + n_packed};
            host_call_experts_[static_cast<size_t>(n_host_calls++)] = e;
            for (int64_t j = 0; j < m_total; ++j) host_dest_[n_packed + j] = host_scatter[s0 + j];
            if (v.part) {
                BG_CHECK(part_pack_n == 0);  // one split expert a layer at most
                part_pack0 = n_packed;
                part_pack_n = m_total;
            }
            n_packed += m_total;
        }
        if (n_host_calls == first_call) return;
        BG_CHECK(n_host_jobs < static_cast<int64_t>(host_jobs_.size()));
        host_jobs_[static_cast<size_t>(n_host_jobs)] = {first_call, n_host_calls - first_call, hp_.swiglu_limit[l]};
        if (host_thread_)
            host_thread_->submit(run_host_job, this, n_host_jobs++);
        else
            run_host_job(this, n_host_jobs++);
    };
    // A decode step's experts present now (in VRAM, and the CPU's in host slots) are taken before
    // the shared expert is queued, so the CPU's job starts before this thread spends its launches
    // (the CPU's path is the longer one of a hybrid layer); the device still runs the shared
    // expert first.
    int64_t n_got = host_compute && shared_first ? experts_.ready_batch_now(got_experts, got_views, kExpertBatch) : 0;
    BG_CHECK(n_got >= 0 && n_got <= std::min(kExpertBatch, hand_outs));
    if (n_got > 0) start_host_job(n_got);
    // The copies of the host experts left to the device, queued here rather than by the store's
    // thread beside this thread's launches (TieredExpertStore::start_copies).
    if (host_compute) experts_.start_copies();
    if (shared_first) {
        open_busy(Ops::BusyKind::kBesideHost);
        shared_expert(pos0, n_pos);
        close_busy();  // the provider is asked for experts next
    }

    constexpr int64_t kCalls = 16;  // chunks of an expert's tokens, each a call; launched when full
    ExpertCall calls[kCalls];
    for (int64_t got = 0; got < hand_outs; n_got = 0) {
        if (n_got == 0) {
            release_finished(lag);
            BG_CHECK(!busy_open_);  // the provider may wait for a copy or a read
            n_got = experts_.next_ready_batch(got_experts, got_views, kExpertBatch);
            BG_CHECK(n_got >= 1 && n_got <= kExpertBatch);
            start_host_job(n_got);
        }
        BG_CHECK(got + n_got <= hand_outs);
        got += n_got;
        // The device's together. Each (token, rank) writes its own row of eo, summed in rank
        // order below: the result does not depend on the order the experts arrive in.
        // An expert still landing (handed out alone): its compute waits for the copy on the
        // device, outside the busy bracket (the wait is not compute).
        Unreleased batch{};
        for (int64_t b = 0; b < n_got; ++b) {
            if (got_views[b].on_host) continue;
            batch.experts[batch.n++] = got_experts[b];
            BG_CHECK(!busy_open_);
            ops_->wait_event(got_views[b].ready);
        }
        if (batch.n == 0) continue;
        int64_t n_calls = 0;
        open_busy(Ops::BusyKind::kBesideHost);
        for (int64_t b = 0; b < n_got; ++b) {
            if (got_views[b].on_host) continue;
            const int32_t e = got_experts[b];
            const int64_t s0 = by_expert_start_[e], m_total = by_expert_start_[e + 1] - s0;
            const ExpertMats mats{got_views[b].gate, got_views[b].up, got_views[b].down};
            for (int64_t c0 = 0; c0 < m_total; c0 += chunk) {
                if (n_calls == kCalls) ops_->expert_ffn_batch(calls, std::exchange(n_calls, 0), xf_, E_,
                                                              hp_.swiglu_limit[l], cfg_.swiglu_form, eo_);
                calls[n_calls++] = {mats, gather_rows + s0 + c0, std::min(chunk, m_total - c0), scatter_rows + s0 + c0};
            }
        }
        ops_->expert_ffn_batch(calls, n_calls, xf_, E_, hp_.swiglu_limit[l], cfg_.swiglu_form, eo_);
        close_busy();  // the provider is asked for the next experts, and may wait
        // The slots may be refilled once released: the ops reading them must be done first.
        BG_CHECK(unreleased_n_ < Ops::kFences);
        const int64_t at = (unreleased_head_ + unreleased_n_++) % Ops::kFences;
        unreleased_[at] = batch;
        unreleased_experts_ += batch.n;
        ops_->record_fence(static_cast<int>(at));
        release_finished(lag > 0 ? lag - 1 : 0);
    }

    if (host_thread_ && n_host_jobs > 0) {
        // What follows on the device waits there for the CPU's experts; this thread goes on to
        // queue it, and the next layer's attention half, while they compute. Jobs end on their
        // own, the word with them, so nothing here waits for them any more.
        host_thread_->submit(publish_host_done, this, static_cast<int64_t>(++host_done_seq_));
        BG_CHECK(!busy_open_);  // the device's wait for the CPU is not its busy time
        ops_->wait_host_word(host_done_, host_done_seq_);
        host_jobs_end.t = nullptr;
    } else if (host_error_) {
        std::rethrow_exception(std::exchange(host_error_, nullptr));  // jobs run inline here
    }
    if (n_packed > 0) {
        // The CPU's rows join the device's: one scatter to their own rows of eo, reading them
        // where the CPU wrote them (uploading them first, then three scatters, took 27 us a layer
        // from the wait's end to the sums in 2f682a8's H100 trace, and an upload queues behind
        // the expert copies on the copy engine). A split expert's device part wrote its rows
        // (queued above); its CPU part adds to them. The host buffers are rewritten only after
        // the next layer's sync, which the device reaches only past this scatter.
        open_busy();
        ops_->moe_scatter_join(eo_host_view_, host_dest_view_, n_packed, part_pack0, part_pack_n, E_, eo_);
    }

    // Per launch: y = shared expert + sum over ranks of weight * expert output, then expand.
    for (int64_t ui = 0; ui < n_units;) {
        const int64_t nu = units_in_launch(units + ui, n_units - ui, launch);
        const Launch g = launch_of(units + ui, nu);
        ui += nu;
        const int64_t p0 = g.pos0, n = g.n;
        open_busy();
        if (!shared_first) shared_expert(p0, n);
        ops_->moe_weighted_sum(eo_ + p0 * k * E_, wts_ + p0 * k, n, k, E_, y_);
        ops_->hc_expand(mixf_ + p0 * kMixWidth, y_, H(p0), n, E_, H(p0));
    }
    // The bracket stays open: the next layer's attention half (or the output head) follows on
    // the device, chained, unless this thread waits first (which closes it).
    // The layer stays open: its last routed experts (their slots must be free for the next
    // layer's) and the CPU's are released, and the provider told the layer is over, once the
    // device is past them (settle_layer), so this thread goes on to queue the next layer's
    // attention half now, behind these sums on the stream.
    layer_open_ = true;
}

void Forward::publish_host_done(void* self, int64_t seq) {
    auto* f = static_cast<Forward*>(self);
    publish_host_word(f->host_done_, static_cast<uint32_t>(seq));
}

void Forward::open_busy(Ops::BusyKind kind) {
    if (busy_open_ && busy_kind_ == kind) return;
    close_busy();
    ops_->busy_begin(kind);
    busy_open_ = true;
    busy_kind_ = kind;
}

void Forward::close_busy() {
    if (!busy_open_) return;
    ops_->busy_end();
    busy_open_ = false;
}

void Forward::sync_device() {
    close_busy();
    ops_->sync();
}

void Forward::settle_layer() {
    close_busy();
    if (host_thread_) host_thread_->wait_idle();
    if (layer_open_) {
        layer_open_ = false;
        release_finished(0);
        experts_.end_layer();
    }
    if (host_error_) std::rethrow_exception(std::exchange(host_error_, nullptr));
}

void Forward::finish() {
    sync_device();
    settle_layer();
}

void Forward::prepare_moe(int64_t l, int64_t n_pos) {
    int64_t n_slots = 0;
    if (cfg_.routing == RoutingPolicy::kResidentOnly) n_slots = n_pos * hp_.n_expert_used;
    if (cfg_.routing == RoutingPolicy::kHotPool) n_slots = n_pos;
    if (!experts_.speculates(n_slots)) return;
    settle_layer();  // the copies it starts need the last layer's slots
    experts_.prepare_layer(l, n_slots);
}

void Forward::run_host_job(void* self, int64_t job) {
    auto* f = static_cast<Forward*>(self);
    const HostExpertJob& j = f->host_jobs_[static_cast<size_t>(job)];
    const ExpertCall* calls = &f->host_calls_[static_cast<size_t>(j.first)];
    const double t0 = now_ms();
    try {
        f->host_ops_->expert_ffn_batch(calls, j.n, f->xf_host_, f->E_, j.limit, f->cfg_.swiglu_form, f->eo_host_);
    } catch (...) {
        if (!f->host_error_) f->host_error_ = std::current_exception();
    }
    const double took_ms = now_ms() - t0;
    // The provider learns the CPU's rate an expert: each its share of the job by weight rows
    // times tokens (a split expert's part has fewer rows).
    double work = 0;
    for (int64_t i = 0; i < j.n; ++i) work += static_cast<double>(calls[i].m * calls[i].mats.gate.rows);
    for (int64_t i = 0; i < j.n; ++i)
        f->experts_.release_computed(f->host_call_experts_[static_cast<size_t>(j.first + i)],
                                     took_ms * static_cast<double>(calls[i].m * calls[i].mats.gate.rows) / work);
    f->host_expert_ms_ += took_ms;
    f->host_experts_ += static_cast<uint64_t>(j.n);
}

double Forward::time_expert_ms(const ExpertView& v, int64_t layer, int64_t m, int reps, bool warm_up) {
    BG_CHECK(m >= 1 && reps >= 1 && layer >= 0 && layer < hp_.n_layer);
    settle_layer();  // host_ops_ and its buffers are this thread's now
    const ExpertMats mats{v.gate, v.up, v.down};
    double best = 1e30;
    for (int r = warm_up ? 0 : 1; r <= reps; ++r) {  // run 0 loads kernels and warms caches: not counted
        // Timed as decode runs it (moe_half): on a team that is awake.
        if (v.on_host && host_ops_) host_ops_->expect_work(kHostWorkAwakeUs);
        sync_device();
        const double t0 = now_ms();
        if (v.on_host) {
            BG_CHECK(host_ops_ && m <= cfg_.host_expert_positions);
            host_ops_->expert_ffn(mats, xf_host_, E_, host_pack_, m, hp_.swiglu_limit[layer], cfg_.swiglu_form, eo_host_,
                                  host_pack_);
        } else {
            BG_CHECK(m <= std::min(cfg_.n_ctx, lay_.ops.expert_max_tok));
            ops_->expert_ffn(mats, xf_, E_, iota_, m, hp_.swiglu_limit[layer], cfg_.swiglu_form, eo_, iota_);
            sync_device();
        }
        if (r > 0) best = std::min(best, now_ms() - t0);
    }
    return best;
}

void Forward::release_finished(int64_t keep) {
    if (unreleased_experts_ > keep) close_busy();  // it waits for a fence
    while (unreleased_n_ > 0) {
        const int at = static_cast<int>(unreleased_head_);
        if (!ops_->fence_passed(at, unreleased_experts_ > keep)) return;
        const Unreleased& u = unreleased_[at];
        for (int64_t i = 0; i < u.n; ++i) experts_.release(u.experts[i]);
        unreleased_experts_ -= u.n;
        unreleased_head_ = (unreleased_head_ + 1) % Ops::kFences;
        --unreleased_n_;
    }
}

void Forward::collapse_final(const Ubatch& u, int64_t i) {
    const int64_t p = u.pos0 + i;
    open_busy();  // or still open from the last layer's sums
    ops_->hc_collapse(H(p), pre_ + p * kHc, kHc, 1, E_, x_);
    ops_->rmsnorm(x_, vec(m_.output_norm()), E_, 1, hp_.rms_eps, x_);
}

void Forward::output_head(const Ubatch& u, int64_t i) {
    collapse_final(u, i);
    ops_->matmul(mat(m_.output()), x_, E_, 1, logits_, hp_.n_vocab);
}

void Forward::final_hidden(const Ubatch& u, int64_t i, float* out) {
    collapse_final(u, i);
    ops_->download(out_host_, x_, E_ * sizeof(float));
    sync_device();
    settle_layer();
    std::memcpy(out, out_host_, E_ * sizeof(float));
}

int32_t Forward::greedy_token(const Ubatch& u, int64_t i, const TokenBan& ban) {
    output_head(u, i);
    ops_->argmax(logits_, hp_.n_vocab, ban, greedy_);
    ops_->download(greedy_host_, greedy_, sizeof(int32_t));
    sync_device();
    settle_layer();
    return greedy_host_[0];
}

void Forward::logits(const Ubatch& u, int64_t i, float* out) {
    output_head(u, i);
    ops_->download(out_host_, logits_, hp_.n_vocab * sizeof(float));
    sync_device();
    settle_layer();
    std::memcpy(out, out_host_, hp_.n_vocab * sizeof(float));
}

}  // namespace bg::dsv41
