// The dsv41 forward pass on a CUDA device: the same math and the same unit/layer structure as
// dsv41::Forward, with every op a kernel (engine/cuda/ops.cuh) on one compute stream. Dense
// weights live in VRAM in their file types; routed experts come from the tiered store, whose
// device slots are in VRAM (the store's streamer copies on its own stream, overlapping compute);
// Engram rows come through the Engram store's device buffer.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "cuda/ops.cuh"
#include "model/dsv41_forward.h"
#include "runtime/engram_store.h"

namespace bg::cuda {

class GpuForward final : public dsv41::ForwardPass {
public:
    GpuForward(const dsv41::Model& m, ExpertProvider& experts, EngramStore& engram, const dsv41::ForwardConfig& cfg);
    ~GpuForward() override;

    const dsv41::ForwardConfig& config() const override { return cfg_; }
    void set_observer(dsv41::RoutingObserver* o) override { observer_ = o; }
    void set_routing(RoutingPolicy p) override;
    uint64_t buffer_bytes() const override;
    uint64_t device_bytes() const override { return device_bytes_; }
    double device_busy_ms() const override { return busy_ms_; }
    void begin_timeline() override;
    const Timeline* device_timeline() const override { return &timeline_; }
    void reset() override;
    void embed(dsv41::Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) override;
    void attention_half(int64_t l, dsv41::Ubatch& u) override;
    void moe_half(int64_t l, dsv41::Ubatch* const* units, int64_t n_units) override;
    void final_hidden(const dsv41::Ubatch& u, int64_t i, float* out) override;
    void logits(const dsv41::Ubatch& u, int64_t i, float* out) override;
    void engram_rows(int64_t layer, int64_t pos, uint64_t* rows) const override;

private:
    struct LayerDev;  // device views of one layer's dense weights
    template <class T>
    T* dev_alloc(int64_t count);
    DeviceMat dmat(const cpu::MatView& v) const;
    const float* dvec(const float* host_vec) const;
    void load_dense_image();
    float* H(int64_t slot) { return H_ + slot * mu_ * 4 * E_; }
    void mix(const DeviceMat& fn, const float* base, const float* scale, const float* h, int64_t n, float* out_mix);
    void engram(int64_t l, dsv41::Ubatch& u);
    void attention(int64_t l, const dsv41::Ubatch& u);
    void blocks(int64_t l, const dsv41::Ubatch& u);
    void collapse_final(const dsv41::Ubatch& u, int64_t i);
    // Busy time: event pairs around kernel work, summed once the stream has caught up.
    void busy_begin();
    void busy_end();
    void busy_collect();  // after a stream synchronise

    const dsv41::Model& m_;
    const dsv41::HParams& hp_;
    ExpertProvider& experts_;
    EngramStore& engram_;
    dsv41::ForwardConfig cfg_;
    dsv41::RoutingObserver* observer_ = nullptr;
    cudaStream_t stream_ = nullptr;
    std::unique_ptr<MatmulContext> mm_;
    std::vector<void*> allocations_;
    uint64_t device_bytes_ = 0;
    int64_t E_ = 0, mu_ = 0, max_units_ = 0, next_slot_ = 0;

    uint8_t* d_dense_ = nullptr;            // a copy of the model's dense buffer
    std::vector<LayerDev> layers_;
    std::vector<int64_t> kv_src_of_, key_owner_of_, idx_src_of_;
    std::vector<uint8_t*> resident_;        // [layer] -> [n_expert] mask on the device (or null)

    // Sequence state
    std::vector<int32_t> tokens_;           // host [n_ctx], for Engram hashing
    std::vector<float*> kv_cache_, comp_in_, comp_score_, comp_latent_, comp_rows_, idx_keys_;
    std::vector<int32_t*> sel_, sel_n_;

    // Per unit (slot): [max_units][...]
    float* H_ = nullptr;        // [slots][mu][4][E]
    float* pre_ = nullptr;      // [slots][mu][4]
    float* xf_ = nullptr;       // [slots][mu][E]
    float* mixf_ = nullptr;     // [slots][mu][24]
    int32_t* ids_ = nullptr;    // [slots][mu][k]
    float* wts_ = nullptr;      // [slots][mu][k]
    float* eo_ = nullptr;       // [slots][mu][k][E]
    int32_t* pos_ = nullptr;    // [slots][mu]

    // Work buffers for one unit
    float *hflat_, *mixm_, *mixa_, *x_, *y_, *qa_, *q_, *kvb_, *att_, *oa_, *iq_, *iw_, *iscore_, *rlogits_;
    float *pooled_, *erow_, *ekv_, *xg_, *g_, *up_, *h_, *eo_tmp_, *sg_, *su_, *sh_, *logits_;
    int32_t *bpos_, *gather_rows_, *scatter_rows_;
    int32_t* tok_dev_;   // [mu] 0..mu-1: row i of emb_dev_ is token i of the unit
    float* emb_dev_;     // [mu][E] embedding rows gathered on the host
    float* h_emb_ = nullptr;  // pinned [mu][E]
    int32_t* h_rows_ = nullptr;             // page-locked [2][n_ctx*k] gather and scatter rows
    float* h_out_ = nullptr;                // page-locked [max(n_vocab, n_embd)]
    std::vector<float> onehot_;             // [mu][4]
    std::vector<uint64_t> erows_;           // [mu*buckets]
    // MoE grouping (host)
    std::vector<int32_t> by_expert_count_, by_expert_start_, used_experts_, used_tokens_;
    std::vector<int64_t> by_expert_slot_;
    std::vector<cudaEvent_t> events_;  // pool, allocated at start-up
    size_t events_used_ = 0;
    double busy_ms_ = 0;
    // Busy intervals in host time: an anchor event whose host time is known (recorded on an
    // idle stream and waited for), each event placed at anchor + elapsed.
    cudaEvent_t anchor_ = nullptr;
    double anchor_host_ms_ = 0;
    Timeline timeline_{timeline_capacity(hp_.n_layer, hp_.n_expert)};
    // Experts whose kernels are queued but whose slots are not yet released: a ring of
    // (expert, event recorded after its kernels), so the host can ask for the next expert
    // while the GPU still works on earlier ones.
    static constexpr int kMaxUnreleased = 8;
    cudaEvent_t release_events_[kMaxUnreleased] = {};
    int32_t unreleased_[kMaxUnreleased] = {};
    int64_t unreleased_head_ = 0, unreleased_n_ = 0;
    void release_finished(int64_t keep);  // releases done experts; waits while more than keep
};

}  // namespace bg::cuda
