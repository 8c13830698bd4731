#include "cuda/forward_gpu.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/check.cuh"
#include "cuda/dequant.cuh"
#include "model/forward_sizes.h"
#include "util/check.h"
#include "util/file_io.h"

namespace bg::cuda {

namespace {

constexpr int kHc = 4;

__global__ void scale_kernel(float* x, int64_t n, float s) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) x[i] *= s;
}

void scale_inplace(float* x, int64_t n, float s, cudaStream_t st) {
    if (n <= 0) return;
    scale_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, st>>>(x, n, s);
    BG_CUDA_CHECK_LAUNCH();
}

cpu::RopeParams rope_compressed(const dsv41::HParams& hp) {
    cpu::RopeParams p;
    p.n_dims = hp.rope_dims;
    p.freq_base = hp.compress_rope_freq_base;
    // rope.scaling.type applies here only: linear divides positions by the factor, YaRN ramps.
    p.yarn = hp.rope_scaling == dsv41::RopeScaling::kYarn;
    p.factor = hp.rope_scaling == dsv41::RopeScaling::kNone ? 1.0f : hp.yarn_factor;
    p.n_ctx_orig = hp.yarn_n_ctx_orig;
    p.beta_fast = hp.yarn_beta_fast;
    p.beta_slow = hp.yarn_beta_slow;
    return p;
}

cpu::RopeParams rope_for_layer(const dsv41::HParams& hp, int64_t l) {
    if (hp.compress_ratios[l] > 0) return rope_compressed(hp);
    cpu::RopeParams p;
    p.n_dims = hp.rope_dims;
    p.freq_base = hp.rope_freq_base;
    return p;
}

}  // namespace

struct GpuForward::LayerDev {
    const float *attn_norm, *ffn_norm, *attn_sinks, *q_a_norm, *kv_a_norm, *hc_attn_base, *hc_attn_scale, *hc_ffn_base,
        *hc_ffn_scale, *comp_norm, *idx_k_norm, *exp_probs_b, *engram_q, *engram_k;
    DeviceMat q_a, q_b, kv, o_a, o_b, hc_attn_fn, hc_ffn_fn, comp_kv, comp_gate, idx_k, idx_q_b, idx_proj, gate_inp,
        sh_gate, sh_up, sh_down, engram_wkv;
};

template <class T>
T* GpuForward::dev_alloc(int64_t count) {
    void* p = nullptr;
    const uint64_t bytes = std::max<uint64_t>(1, static_cast<uint64_t>(count) * sizeof(T));
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) fail("gpu forward: cannot allocate %llu bytes of device memory: %s", (unsigned long long)bytes, cudaGetErrorString(e));
    BG_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    allocations_.push_back(p);
    device_bytes_ += bytes;
    return static_cast<T*>(p);
}

DeviceMat GpuForward::dmat(const cpu::MatView& v) const {
    DeviceMat d;
    if (v.cols == 0) return d;  // a tensor this layer does not have (the host holds no matrices)
    d.data = d_dense_ + v.image_offset;
    d.type = v.type;
    d.cols = v.cols;
    d.rows = v.rows;
    d.row_stride = v.row_stride;
    return d;
}

const float* GpuForward::dvec(const float* host_vec) const {
    if (!host_vec) return nullptr;
    return reinterpret_cast<const float*>(d_dense_ + (reinterpret_cast<const uint8_t*>(host_vec) - m_.dense_data()));
}

void GpuForward::load_dense_image() {
    // 1-D weights come from the host (dequantised to F32 at open); matrices from the host copy
    // when the model holds one, else straight from the file through a small pinned staging
    // buffer that is freed once loading is done, so no host copy of them outlives start-up.
    BG_CUDA_CHECK(cudaMemcpy(d_dense_, m_.dense_data(), m_.vector_bytes(), cudaMemcpyHostToDevice));
    constexpr uint64_t kStagingBytes = 64ull << 20;
    uint8_t* staging = nullptr;
    for (const dsv41::DenseTensor& t : m_.device_tensors()) {
        if (t.vector) continue;
        uint8_t* dst = d_dense_ + t.image_offset;
        if (m_.dense_home() == dsv41::DenseHome::kHost) {
            BG_CUDA_CHECK(cudaMemcpy(dst, m_.dense_data() + t.image_offset, t.info->n_bytes, cudaMemcpyHostToDevice));
            continue;
        }
        if (!staging) BG_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&staging), kStagingBytes, cudaHostAllocDefault));
        for (uint64_t done = 0; done < t.info->n_bytes;) {
            const uint64_t n = std::min(kStagingBytes, t.info->n_bytes - done);
            pread_exact(m_.fd(), staging, n, t.info->file_offset + done, "gpu forward: dense weights");
            BG_CUDA_CHECK(cudaMemcpy(dst + done, staging, n, cudaMemcpyHostToDevice));
            done += n;
        }
    }
    if (staging) cudaFreeHost(staging);
}

GpuForward::GpuForward(const dsv41::Model& m, ExpertProvider& experts, EngramStore& engram, const dsv41::ForwardConfig& cfg)
    : m_(m), hp_(m.hp()), experts_(experts), engram_(engram), cfg_(cfg) {
    if (cfg_.routing != RoutingPolicy::kExact && (!cfg_.plan || cfg_.plan->n_layer() != hp_.n_layer))
        fail("gpu forward: routing '%s' needs a residency plan", routing_policy_name(cfg_.routing));
    BG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    mm_ = std::make_unique<MatmulContext>();
    device_bytes_ += mm_->scratch_bytes();
    const int64_t L = hp_.n_layer, hd = hp_.head_dim, ctx = cfg_.n_ctx, k = hp_.n_expert_used;
    E_ = hp_.n_embd;
    mu_ = cfg_.max_ubatch;
    max_units_ = (ctx + mu_ - 1) / mu_ + 1;

    // Dense weights: the model's dense image but the token embedding (whose rows the host
    // gathers per token), loaded once; views translate by their image offset.
    d_dense_ = dev_alloc<uint8_t>(static_cast<int64_t>(m.device_image_bytes()));
    load_dense_image();
    layers_.resize(L);
    for (int64_t l = 0; l < L; ++l) {
        const dsv41::LayerWeights& w = m.layer(l);
        LayerDev& d = layers_[l];
        d.attn_norm = dvec(w.attn_norm);
        d.ffn_norm = dvec(w.ffn_norm);
        d.attn_sinks = dvec(w.attn_sinks);
        d.q_a_norm = dvec(w.q_a_norm);
        d.kv_a_norm = dvec(w.kv_a_norm);
        d.hc_attn_base = dvec(w.hc_attn_base);
        d.hc_attn_scale = dvec(w.hc_attn_scale);
        d.hc_ffn_base = dvec(w.hc_ffn_base);
        d.hc_ffn_scale = dvec(w.hc_ffn_scale);
        d.comp_norm = dvec(w.comp_norm);
        d.idx_k_norm = dvec(w.idx_k_norm);
        d.exp_probs_b = dvec(w.exp_probs_b);
        d.engram_q = dvec(w.engram_q);
        d.engram_k = dvec(w.engram_k);
        d.q_a = dmat(w.q_a);
        d.q_b = dmat(w.q_b);
        d.kv = dmat(w.kv);
        d.o_a = dmat(w.o_a);
        d.o_b = dmat(w.o_b);
        d.hc_attn_fn = dmat(w.hc_attn_fn);
        d.hc_ffn_fn = dmat(w.hc_ffn_fn);
        d.comp_kv = dmat(w.comp_kv);
        d.comp_gate = dmat(w.comp_gate);
        d.idx_k = dmat(w.idx_k);
        d.idx_q_b = dmat(w.idx_q_b);
        d.idx_proj = dmat(w.idx_proj);
        d.gate_inp = dmat(w.gate_inp);
        d.sh_gate = dmat(w.sh_gate);
        d.sh_up = dmat(w.sh_up);
        d.sh_down = dmat(w.sh_down);
        d.engram_wkv = dmat(w.engram_wkv);
    }
    resident_.assign(L, nullptr);
    if (cfg_.plan) {
        for (int64_t l = 0; l < L; ++l) {
            resident_[l] = dev_alloc<uint8_t>(hp_.n_expert);
            BG_CUDA_CHECK(cudaMemcpy(resident_[l], cfg_.plan->mask[l].data(), hp_.n_expert, cudaMemcpyHostToDevice));
        }
    }

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
    tokens_.assign(ctx, 0);
    kv_cache_.assign(L, nullptr);
    comp_in_.assign(L, nullptr);
    comp_score_.assign(L, nullptr);
    comp_latent_.assign(L, nullptr);
    comp_rows_.assign(L, nullptr);
    idx_keys_.assign(L, nullptr);
    sel_.assign(L, nullptr);
    sel_n_.assign(L, nullptr);
    for (int64_t l = 0; l < L; ++l) {
        kv_cache_[l] = dev_alloc<float>(ctx * hd);
        if (roles[l].kv_source) {
            const int64_t blocks = ctx / hp_.compress_ratios[l] + 1;
            comp_in_[l] = dev_alloc<float>(ctx * hd);
            if (roles[l].gated) comp_score_[l] = dev_alloc<float>(ctx * hd);
            comp_latent_[l] = dev_alloc<float>(blocks * hd);
            comp_rows_[l] = dev_alloc<float>(blocks * hd);
        }
        if (roles[l].key_owner) idx_keys_[l] = dev_alloc<float>((ctx / hp_.compress_ratios[kv_src_of_[l]] + 1) * hp_.idx_head_dim);
        if (roles[l].index_source) {
            sel_[l] = dev_alloc<int32_t>(ctx * hp_.idx_top_k);
            sel_n_[l] = dev_alloc<int32_t>(ctx);
        }
    }

    const int64_t S = max_units_, nff = hp_.n_ff_exp, nsh = hp_.n_ff_exp * hp_.n_expert_shared, chunk = cfg_.moe_chunk;
    H_ = dev_alloc<float>(S * mu_ * kHc * E_);
    pre_ = dev_alloc<float>(S * mu_ * kHc);
    xf_ = dev_alloc<float>(S * mu_ * E_);
    mixf_ = dev_alloc<float>(S * mu_ * kMixWidth);
    ids_ = dev_alloc<int32_t>(S * mu_ * k);
    wts_ = dev_alloc<float>(S * mu_ * k);
    eo_ = dev_alloc<float>(S * mu_ * k * E_);
    pos_ = dev_alloc<int32_t>(S * mu_);

    hflat_ = dev_alloc<float>(mu_ * kHc * E_);
    mixm_ = dev_alloc<float>(mu_ * 24);
    mixa_ = dev_alloc<float>(mu_ * kMixWidth);
    x_ = dev_alloc<float>(mu_ * E_);
    y_ = dev_alloc<float>(mu_ * E_);
    qa_ = dev_alloc<float>(mu_ * hp_.q_lora_rank);
    q_ = dev_alloc<float>(mu_ * hp_.q_dim());
    kvb_ = dev_alloc<float>(mu_ * hd);
    att_ = dev_alloc<float>(mu_ * hp_.q_dim());
    oa_ = dev_alloc<float>(mu_ * hp_.o_groups * hp_.o_lora_rank);
    iq_ = dev_alloc<float>(mu_ * hp_.idx_n_head * hp_.idx_head_dim);
    iw_ = dev_alloc<float>(mu_ * hp_.idx_n_head);
    iscore_ = dev_alloc<float>(mu_ * ctx);
    rlogits_ = dev_alloc<float>(mu_ * hp_.n_expert);
    pooled_ = dev_alloc<float>((mu_ + 1) * hd);
    bpos_ = dev_alloc<int32_t>(mu_ + 1);
    tok_dev_ = dev_alloc<int32_t>(mu_);
    emb_dev_ = dev_alloc<float>(mu_ * E_);
    {
        std::vector<int32_t> iota(static_cast<size_t>(mu_));
        for (int64_t i = 0; i < mu_; ++i) iota[i] = static_cast<int32_t>(i);
        BG_CUDA_CHECK(cudaMemcpy(tok_dev_, iota.data(), mu_ * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
    const int64_t nb = hp_.engram_layers.empty() ? 0 : hp_.engram_buckets();
    erow_ = dev_alloc<float>(mu_ * std::max<int64_t>(1, nb * hp_.engram_dim));
    ekv_ = dev_alloc<float>(mu_ * (kHc + 1) * E_);
    xg_ = dev_alloc<float>(chunk * E_);
    g_ = dev_alloc<float>(chunk * nff);
    up_ = dev_alloc<float>(chunk * nff);
    h_ = dev_alloc<float>(chunk * nff);
    eo_tmp_ = dev_alloc<float>(chunk * E_);
    sg_ = dev_alloc<float>(mu_ * std::max<int64_t>(1, nsh));
    su_ = dev_alloc<float>(mu_ * std::max<int64_t>(1, nsh));
    sh_ = dev_alloc<float>(mu_ * std::max<int64_t>(1, nsh));
    logits_ = dev_alloc<float>(hp_.n_vocab);
    gather_rows_ = dev_alloc<int32_t>(ctx * k);
    scatter_rows_ = dev_alloc<int32_t>(ctx * k);
    BG_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h_rows_), 2 * ctx * k * sizeof(int32_t), cudaHostAllocDefault));
    BG_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h_out_), std::max(hp_.n_vocab, E_) * sizeof(float), cudaHostAllocDefault));
    BG_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h_emb_), mu_ * E_ * sizeof(float), cudaHostAllocDefault));
    onehot_.assign(mu_ * kHc, 0.0f);
    for (int64_t i = 0; i < mu_; ++i) onehot_[i * kHc] = 1.0f;
    erows_.assign(mu_ * std::max<int64_t>(1, nb), 0);
    by_expert_count_.assign(hp_.n_expert, 0);
    by_expert_start_.assign(hp_.n_expert + 1, 0);
    used_experts_.assign(hp_.n_expert, 0);
    used_tokens_.assign(hp_.n_expert, 0);
    by_expert_slot_.assign(ctx * k, 0);
    // Two events per expert and per unit of a layer, and a few for the attention half.
    events_.resize(2 * (hp_.n_expert + max_units_ + 4));
    for (cudaEvent_t& e : events_) BG_CUDA_CHECK(cudaEventCreate(&e));
    BG_CUDA_CHECK(cudaEventCreate(&anchor_));
    for (cudaEvent_t& e : release_events_) BG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    begin_timeline();
    // `betelgeuse plan` prints what the forward holds from the same sizing function.
    const dsv41::ForwardBytes planned = dsv41::gpu_forward_bytes(hp_, roles, cfg_, m.device_image_bytes(), cfg_.plan != nullptr);
    BG_CHECK(device_bytes_ == planned.device_total() && buffer_bytes() == planned.host);
    BG_CHECK(mm_->scratch_bytes() == dsv41::kGpuMatmulScratchBytes);
}

void GpuForward::begin_timeline() {
    BG_CHECK(events_used_ == 0);
    BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    BG_CUDA_CHECK(cudaEventRecord(anchor_, stream_));
    BG_CUDA_CHECK(cudaEventSynchronize(anchor_));
    anchor_host_ms_ = now_ms();
    timeline_.clear();
}

void GpuForward::busy_begin() {
    BG_CHECK(events_used_ + 2 <= events_.size() && events_used_ % 2 == 0);
    BG_CUDA_CHECK(cudaEventRecord(events_[events_used_++], stream_));
}

void GpuForward::busy_end() {
    BG_CHECK(events_used_ % 2 == 1);
    BG_CUDA_CHECK(cudaEventRecord(events_[events_used_++], stream_));
}

void GpuForward::busy_collect() {
    for (size_t i = 0; i + 1 < events_used_; i += 2) {
        float ms = 0, at = 0;
        BG_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
        busy_ms_ += ms;
        BG_CUDA_CHECK(cudaEventElapsedTime(&at, anchor_, events_[i]));
        timeline_.add(anchor_host_ms_ + at, anchor_host_ms_ + at + ms);
    }
    events_used_ = 0;
}

GpuForward::~GpuForward() {
    cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (cudaEvent_t e : release_events_) cudaEventDestroy(e);
    cudaEventDestroy(anchor_);
    for (void* p : allocations_) cudaFree(p);
    cudaFreeHost(h_rows_);
    cudaFreeHost(h_out_);
    cudaFreeHost(h_emb_);
    mm_.reset();
    cudaStreamDestroy(stream_);
}

void GpuForward::set_routing(RoutingPolicy p) {
    if (p != RoutingPolicy::kExact && !cfg_.plan) fail("gpu forward: routing '%s' needs a residency plan", routing_policy_name(p));
    cfg_.routing = p;
}

uint64_t GpuForward::buffer_bytes() const {
    return tokens_.capacity() * sizeof(int32_t) + 2 * cfg_.n_ctx * hp_.n_expert_used * sizeof(int32_t) +
           std::max(hp_.n_vocab, E_) * sizeof(float) + mu_ * E_ * sizeof(float) +
           by_expert_slot_.capacity() * sizeof(int64_t) +
           timeline_.bytes();
}

void GpuForward::reset() {
    for (int64_t l = 0; l < hp_.n_layer; ++l)
        if (sel_n_[l]) BG_CUDA_CHECK(cudaMemsetAsync(sel_n_[l], 0, cfg_.n_ctx * sizeof(int32_t), stream_));
    // Units get device slots afresh for each sequence.
    next_slot_ = 0;
}

void GpuForward::engram_rows(int64_t layer, int64_t pos, uint64_t* rows) const {
    dsv41::engram_rows_for(hp_, layer, tokens_.data(), pos, rows);
}

void GpuForward::embed(dsv41::Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) {
    if (n < 1 || n > mu_) fail("gpu forward: a unit holds 1..%lld tokens, got %lld", (long long)mu_, (long long)n);
    if (pos0 < 0 || pos0 + n > cfg_.n_ctx)
        fail("gpu forward: positions %lld..%lld exceed the context of %lld tokens", (long long)pos0,
             (long long)(pos0 + n - 1), (long long)cfg_.n_ctx);
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab) fail("gpu forward: token id %d is outside the vocabulary", tokens[i]);
    // A unit keeps its slot while it is reused at the same place (decode reuses one unit).
    if (u.device_slot < 0 || u.device_slot >= next_slot_) {
        if (next_slot_ >= max_units_) fail("gpu forward: more units than the context allows");
        u.device_slot = next_slot_++;
    }
    u.pos0 = pos0;
    u.n = n;
    const int64_t k = hp_.n_expert_used;
    u.ids.resize(static_cast<size_t>(n * k));
    u.wts.resize(static_cast<size_t>(n * k));
    std::copy(tokens, tokens + n, tokens_.begin() + pos0);
    const int64_t s = u.device_slot;
    // The embedding lives in host memory: its rows, dequantised here, go up as [n][E] floats,
    // which the embedding kernel then spreads over the four residual copies (rows 0..n-1).
    const cpu::MatView emb = m_.token_embd();
    for (int64_t i = 0; i < n; ++i)
        dequantize_row(emb.type, emb.data + static_cast<uint64_t>(tokens[i]) * emb.row_stride, h_emb_ + i * E_, E_);
    BG_CUDA_CHECK(cudaMemcpyAsync(emb_dev_, h_emb_, n * E_ * sizeof(float), cudaMemcpyHostToDevice, stream_));
    DeviceMat rows;
    rows.data = reinterpret_cast<const uint8_t*>(emb_dev_);
    rows.type = GgmlType::F32;
    rows.cols = E_;
    rows.rows = mu_;
    rows.row_stride = E_ * sizeof(float);
    embed_tokens(rows, tok_dev_, n, H(s), stream_);
    BG_CUDA_CHECK(cudaMemcpyAsync(pre_ + s * mu_ * kHc, onehot_.data(), n * kHc * sizeof(float), cudaMemcpyHostToDevice, stream_));
    fill_positions(pos_ + s * mu_, n, pos0, 1, stream_);
    // The host arrays above are reused by the next call: let the copies finish.
    BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void GpuForward::mix(const DeviceMat& fn, const float* base, const float* scale, const float* h, int64_t n, float* out_mix) {
    const int64_t W = kHc * E_;
    rmsnorm(h, nullptr, W, n, hp_.rms_eps, hflat_, stream_);
    matmul(*mm_, fn, hflat_, W, n, mixm_, 24, stream_);
    hc_mix(mixm_, base, scale, n, static_cast<int>(hp_.hc_sinkhorn_iters), hp_.hc_eps, out_mix, stream_);
}

void GpuForward::engram(int64_t l, dsv41::Ubatch& u) {
    const LayerDev& w = layers_[l];
    const int64_t nb = hp_.engram_buckets(), dim = hp_.engram_dim, n = u.n;
    for (int64_t i = 0; i < n; ++i) engram_rows(l, u.pos0 + i, &erows_[i * nb]);
    const GgmlType t = m_.engram_type(l);
    const int64_t total = n * nb;
    for (int64_t r0 = 0; r0 < total; r0 += engram_.rows_per_fetch()) {
        const int64_t cnt = std::min<int64_t>(total - r0, engram_.rows_per_fetch());
        const uint8_t* raw = engram_.fetch_raw(l, &erows_[r0], cnt);
        // The Engram buffer is reused by the next fetch: dequantise before it.
        BG_CUDA_CHECK(dequantize(t, raw, erow_ + r0 * dim, cnt * dim, stream_));
        BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    matmul(*mm_, w.engram_wkv, erow_, nb * dim, n, ekv_, (kHc + 1) * E_, stream_);
    engram_gate_add(ekv_, w.engram_k, w.engram_q, n, E_, hp_.rms_eps, H(u.device_slot), nullptr, stream_);
}

// Compressed rows and index keys of the blocks that complete inside this unit.
void GpuForward::blocks(int64_t l, const dsv41::Ubatch& u) {
    const auto& ro = m_.roles()[l];
    const LayerDev& w = layers_[l];
    const int64_t hd = hp_.head_dim, id = hp_.idx_head_dim;
    const cpu::RopeParams rp = rope_compressed(hp_);
    if (ro.kv_source) {
        const int64_t r = hp_.compress_ratios[l];
        matmul(*mm_, w.comp_kv, x_, E_, u.n, comp_in_[l] + u.pos0 * hd, hd, stream_);
        if (ro.gated) matmul(*mm_, w.comp_gate, x_, E_, u.n, comp_score_[l] + u.pos0 * hd, hd, stream_);
        const int64_t b0 = (u.pos0 + r) / r - 1, b1 = (u.pos0 + u.n) / r;  // blocks [b0, b1) complete here
        if (b1 > b0) {
            const int64_t nblk = b1 - b0;
            compress_pool(comp_in_[l], ro.gated ? comp_score_[l] : nullptr, hd, r, b0, nblk, pooled_, stream_);
            rmsnorm(pooled_, w.comp_norm, hd, nblk, hp_.rms_eps, comp_latent_[l] + b0 * hd, stream_);
            BG_CUDA_CHECK(cudaMemcpyAsync(comp_rows_[l] + b0 * hd, comp_latent_[l] + b0 * hd, nblk * hd * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream_));
            fill_positions(bpos_, nblk, b0 * r, r, stream_);
            rope(comp_rows_[l] + b0 * hd, hd, nblk, bpos_, 1, hd, rp, false, stream_);
        }
    }
    if (ro.key_owner) {
        const int64_t src = kv_src_of_[l], r = hp_.compress_ratios[src];
        const int64_t b0 = (u.pos0 + r) / r - 1, b1 = (u.pos0 + u.n) / r;
        if (b1 > b0) {
            const int64_t nblk = b1 - b0;
            float* keys = idx_keys_[l] + b0 * id;
            matmul(*mm_, w.idx_k, comp_latent_[src] + b0 * hd, hd, nblk, keys, id, stream_);
            rmsnorm(keys, w.idx_k_norm, id, nblk, hp_.rms_eps, keys, stream_);
            fill_positions(bpos_, nblk, b0 * r, r, stream_);
            rope(keys, id, nblk, bpos_, 1, id, rp, false, stream_);
        }
    }
}

void GpuForward::attention(int64_t l, const dsv41::Ubatch& u) {
    const LayerDev& w = layers_[l];
    const auto& ro = m_.roles()[l];
    const int64_t hd = hp_.head_dim, nh = hp_.n_head, qd = hp_.q_dim(), ql = hp_.q_lora_rank, n = u.n;
    const int32_t* pos = pos_ + u.device_slot * mu_;
    const cpu::RopeParams rp = rope_for_layer(hp_, l);

    matmul(*mm_, w.q_a, x_, E_, n, qa_, ql, stream_);
    rmsnorm(qa_, w.q_a_norm, ql, n, hp_.rms_eps, qa_, stream_);
    matmul(*mm_, w.q_b, qa_, ql, n, q_, qd, stream_);
    rope(q_, qd, n, pos, nh, hd, rp, false, stream_);
    matmul(*mm_, w.kv, x_, E_, n, kvb_, hd, stream_);
    float* kv_rows = kv_cache_[l] + u.pos0 * hd;
    rmsnorm(kvb_, w.kv_a_norm, hd, n, hp_.rms_eps, kv_rows, stream_);
    rope(kv_rows, hd, n, pos, 1, hd, rp, false, stream_);
    blocks(l, u);
    if (ro.index_source) {
        const int64_t ih = hp_.idx_n_head, id = hp_.idx_head_dim;
        matmul(*mm_, w.idx_q_b, qa_, ql, n, iq_, ih * id, stream_);
        rope(iq_, ih * id, n, pos, ih, id, rope_compressed(hp_), false, stream_);
        matmul(*mm_, w.idx_proj, x_, E_, n, iw_, ih, stream_);
        scale_inplace(iw_, n * ih, 1.0f / std::sqrt(static_cast<float>(id * ih)), stream_);
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
        indexer(a, stream_);
    }
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
    bg::cuda::attention(a, stream_);
    rope(att_, qd, n, pos, nh, hd, rp, true, stream_);  // undo the query position's rotation
    const int64_t groups = hp_.o_groups, gin = qd / groups, orank = hp_.o_lora_rank;
    for (int64_t g = 0; g < groups; ++g)
        matmul(*mm_, w.o_a.slice_rows(g * orank, orank), att_ + g * gin, qd, n, oa_ + g * orank, groups * orank, stream_);
    matmul(*mm_, w.o_b, oa_, groups * orank, n, y_, E_, stream_);
}

void GpuForward::attention_half(int64_t l, dsv41::Ubatch& u) {
    BG_CHECK(l >= 0 && l < hp_.n_layer && u.device_slot >= 0);
    const LayerDev& w = layers_[l];
    const int64_t s = u.device_slot, n = u.n, k = hp_.n_expert_used, ne = hp_.n_expert;
    float* h = H(s);
    if (m_.roles()[l].engram) engram(l, u);
    busy_begin();
    mix(w.hc_attn_fn, w.hc_attn_base, w.hc_attn_scale, h, n, mixa_);
    hc_collapse(h, pre_ + s * mu_ * kHc, kHc, n, E_, x_, stream_);
    rmsnorm(x_, w.attn_norm, E_, n, hp_.rms_eps, x_, stream_);
    attention(l, u);
    hc_expand(mixa_, y_, h, n, E_, h, stream_);

    float* mixf = mixf_ + s * mu_ * kMixWidth;
    float* xf = xf_ + s * mu_ * E_;
    mix(w.hc_ffn_fn, w.hc_ffn_base, w.hc_ffn_scale, h, n, mixf);
    hc_collapse(h, mixa_ + kMixPre, kMixWidth, n, E_, xf, stream_);
    rmsnorm(xf, w.ffn_norm, E_, n, hp_.rms_eps, xf, stream_);
    // The next sub-layer collapses with this mix's pre.
    BG_CUDA_CHECK(cudaMemcpy2DAsync(pre_ + s * mu_ * kHc, kHc * sizeof(float), mixf + kMixPre, kMixWidth * sizeof(float),
                                    kHc * sizeof(float), n, cudaMemcpyDeviceToDevice, stream_));
    matmul(*mm_, w.gate_inp, xf, E_, n, rlogits_, ne, stream_);
    int32_t* ids = ids_ + s * mu_ * k;
    float* wts = wts_ + s * mu_ * k;
    route(cfg_.routing, rlogits_, w.exp_probs_b, cfg_.plan ? resident_[l] : nullptr, n, ne, static_cast<int>(k),
          cpu::RouteWeighting{hp_.expert_weights_norm, hp_.routed_weight_scale()}, ids, wts, stream_);
    busy_end();
    // The host needs the routing to plan the layer's expert traffic.
    BG_CUDA_CHECK(cudaMemcpyAsync(u.ids.data(), ids, n * k * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    BG_CUDA_CHECK(cudaMemcpyAsync(u.wts.data(), wts, n * k * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    busy_collect();
    for (int64_t i = 0; i < n * k; ++i)
        if (u.ids[i] < 0 || u.ids[i] >= ne) fail("gpu forward: layer %lld routed token %lld to expert %d", (long long)l, (long long)(u.pos0 + i / k), u.ids[i]);
    if (observer_)
        for (int64_t i = 0; i < n; ++i) observer_->on_route(l, u.pos0 + i, &u.ids[i * k], &u.wts[i * k], static_cast<int>(k));
}

void GpuForward::moe_half(int64_t l, dsv41::Ubatch* const* units, int64_t n_units) {
    const LayerDev& w = layers_[l];
    const int64_t k = hp_.n_expert_used, ne = hp_.n_expert, nff = hp_.n_ff_exp, chunk = cfg_.moe_chunk;
    // Group (unit, token, rank) slots by expert, ascending ids (as the CPU forward does).
    std::fill(by_expert_count_.begin(), by_expert_count_.end(), 0);
    int64_t n_slots = 0;
    for (int64_t ui = 0; ui < n_units; ++ui) {
        for (int64_t s = 0; s < units[ui]->n * k; ++s) ++by_expert_count_[units[ui]->ids[s]];
        n_slots += units[ui]->n * k;
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
    int32_t* h_gather = h_rows_;
    int32_t* h_scatter = h_rows_ + cfg_.n_ctx * k;
    for (int64_t ui = 0; ui < n_units; ++ui) {
        const dsv41::Ubatch& u = *units[ui];
        for (int64_t s = 0; s < u.n * k; ++s) {
            const int32_t e = u.ids[s];
            const int64_t at = by_expert_start_[e] + by_expert_count_[e]++;
            // Rows of the slot arrays: xf [slot][mu] rows, eo [slot][mu][k] rows.
            h_gather[at] = static_cast<int32_t>(u.device_slot * mu_ + s / k);
            h_scatter[at] = static_cast<int32_t>(u.device_slot * mu_ * k + s);
        }
    }
    BG_CUDA_CHECK(cudaMemcpyAsync(gather_rows_, h_gather, n_slots * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    BG_CUDA_CHECK(cudaMemcpyAsync(scatter_rows_, h_scatter, n_slots * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));

    experts_.begin_layer(l, used_experts_.data(), used_tokens_.data(), n_used);
    // While the host waits for the next expert, the GPU works through the queued ones.
    const int64_t lag = std::min<int64_t>(kMaxUnreleased, experts_.max_unreleased());
    for (int64_t got = 0; got < n_used; ++got) {
        release_finished(lag);
        ExpertView v;
        const int32_t e = experts_.next_ready(&v);
        DeviceMat gate{v.gate.data, v.gate.type, v.gate.cols, v.gate.rows, v.gate.row_stride};
        DeviceMat upm{v.up.data, v.up.type, v.up.cols, v.up.rows, v.up.row_stride};
        DeviceMat down{v.down.data, v.down.type, v.down.cols, v.down.rows, v.down.row_stride};
        const int64_t s0 = by_expert_start_[e], m_total = by_expert_start_[e + 1] - s0;
        busy_begin();
        for (int64_t c0 = 0; c0 < m_total; c0 += chunk) {
            const int64_t m = std::min(chunk, m_total - c0);
            moe_gather(xf_, E_, gather_rows_ + s0 + c0, m, E_, xg_, stream_);
            matmul(*mm_, gate, xg_, E_, m, g_, nff, stream_);
            matmul(*mm_, upm, xg_, E_, m, up_, nff, stream_);
            swiglu(g_, up_, m * nff, hp_.swiglu_limit[l], cfg_.swiglu_form, h_, stream_);
            matmul(*mm_, down, h_, nff, m, eo_tmp_, E_, stream_);
            moe_scatter(eo_tmp_, scatter_rows_ + s0 + c0, m, E_, eo_, stream_);
        }
        busy_end();
        // The slot may be refilled once released: the kernels reading it must be done first.
        BG_CHECK(unreleased_n_ < kMaxUnreleased);
        const int64_t at = (unreleased_head_ + unreleased_n_++) % kMaxUnreleased;
        unreleased_[at] = e;
        BG_CUDA_CHECK(cudaEventRecord(release_events_[at], stream_));
        release_finished(lag > 0 ? lag - 1 : 0);
    }
    release_finished(0);
    experts_.end_layer();

    for (int64_t ui = 0; ui < n_units; ++ui) {
        const dsv41::Ubatch& u = *units[ui];
        const int64_t s = u.device_slot, n = u.n;
        float* xf = xf_ + s * mu_ * E_;
        busy_begin();
        if (hp_.n_expert_shared > 0) {
            const int64_t nsh = nff * hp_.n_expert_shared;
            matmul(*mm_, w.sh_gate, xf, E_, n, sg_, nsh, stream_);
            matmul(*mm_, w.sh_up, xf, E_, n, su_, nsh, stream_);
            swiglu(sg_, su_, n * nsh, hp_.swiglu_limit_shexp[l], cfg_.swiglu_form, sh_, stream_);
            matmul(*mm_, w.sh_down, sh_, nsh, n, y_, E_, stream_);
        } else {
            BG_CUDA_CHECK(cudaMemsetAsync(y_, 0, n * E_ * sizeof(float), stream_));
        }
        moe_weighted_sum(eo_ + s * mu_ * k * E_, wts_ + s * mu_ * k, n, k, E_, y_, stream_);
        hc_expand(mixf_ + s * mu_ * kMixWidth, y_, H(s), n, E_, H(s), stream_);
        busy_end();
    }
    BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    busy_collect();
}

void GpuForward::release_finished(int64_t keep) {
    while (unreleased_n_ > 0) {
        cudaEvent_t ev = release_events_[unreleased_head_];
        if (unreleased_n_ > keep) {
            BG_CUDA_CHECK(cudaEventSynchronize(ev));
        } else {
            const cudaError_t q = cudaEventQuery(ev);
            if (q == cudaErrorNotReady) return;
            BG_CUDA_CHECK(q);
        }
        experts_.release(unreleased_[unreleased_head_]);
        unreleased_head_ = (unreleased_head_ + 1) % kMaxUnreleased;
        --unreleased_n_;
    }
}

void GpuForward::collapse_final(const dsv41::Ubatch& u, int64_t i) {
    const int64_t s = u.device_slot;
    hc_collapse(H(s) + i * kHc * E_, pre_ + (s * mu_ + i) * kHc, kHc, 1, E_, x_, stream_);
    rmsnorm(x_, dvec(m_.output_norm()), E_, 1, hp_.rms_eps, x_, stream_);
}

void GpuForward::final_hidden(const dsv41::Ubatch& u, int64_t i, float* out) {
    collapse_final(u, i);
    BG_CUDA_CHECK(cudaMemcpyAsync(h_out_, x_, E_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(out, h_out_, E_ * sizeof(float));
}

void GpuForward::logits(const dsv41::Ubatch& u, int64_t i, float* out) {
    collapse_final(u, i);
    matmul(*mm_, dmat(m_.output()), x_, E_, 1, logits_, hp_.n_vocab, stream_);
    BG_CUDA_CHECK(cudaMemcpyAsync(h_out_, logits_, hp_.n_vocab * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(out, h_out_, hp_.n_vocab * sizeof(float));
}

}  // namespace bg::cuda
