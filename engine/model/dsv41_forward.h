// The dsv41 forward pass, written once against the backend ops (engine/backend/ops.h): the CPU
// and the CUDA backend run this same sequence of ops. One layer of one unit of work (ubatch), or
// of several consecutive units launched together, at a time, so the caller chooses the order:
// token-major (each ubatch walks all layers) or layer-major (every ubatch of the prompt goes
// through layer l before layer l+1). Both give the same numbers up to the order of float sums
// inside a kernel: each token's arithmetic does not depend on which other tokens share its call.
//
// Activations between layers live in backend memory indexed by position ([n_ctx] rows), so a
// unit is just its positions; the host holds only what it acts on: the tokens (Engram hashing)
// and the routed experts (which experts to bring in).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "cpu/job_thread.h"
#include "model/dsv41_model.h"
#include "model/forward_layout.h"
#include "model/layer_forward.h"
#include "model/providers.h"

namespace bg::dsv41 {

// Engram n-gram hash of one token for one table. c[0] is the token's compressed id, c[1..3] the
// three before it (pad_id where missing). h = c0*m0 (mod 2^64); for k = 1..3: h ^= c_k*m_k, then
// for head j in 0..n_head-1: rows[(k-1)*n_head + j] = (h mod primes[(k-1)*n_head + j]) +
// offsets[(k-1)*n_head + j]. Writes 3*n_head row ids (bucket-major).
void engram_hash(const uint64_t c[4], const uint64_t mult[4], const uint64_t* primes,
                 const uint64_t* offsets, int n_head, uint64_t* rows);

// Rows of layer's Engram table that the token at `pos` hashes to (24 for dsv41), bucket-major;
// tokens[0..pos] is the sequence so far.
void engram_rows_for(const HParams& hp, int64_t layer, const int32_t* tokens, int64_t pos, uint64_t* rows);

class Forward final : public LayerForward {
public:
    // host_ops: CPU ops for host-resident experts (ExpertView::on_host), given exactly when
    // cfg.host_expert_positions > 0; they share no memory with `ops`.
    Forward(const Model& m, std::unique_ptr<Ops> ops, ExpertProvider& experts, EngramProvider& engram,
            const ForwardConfig& cfg, std::unique_ptr<Ops> host_ops = nullptr);
    ~Forward() override;
    Forward(const Forward&) = delete;
    Forward& operator=(const Forward&) = delete;

    const ForwardConfig& config() const { return cfg_; }
    void set_observer(RoutingObserver* o) { observer_ = o; }
    // Switches the routing policy (fidelity runs compare policies on one engine).
    void set_routing(RoutingPolicy p);
    // Reads ForwardConfig::hot again (the experts in VRAM changed: promotion) for the layers
    // routed from now on. Checks that the hot set stays within the resident set.
    void refresh_hot_set();
    // Host memory held by caches and buffers, for the host budget.
    uint64_t buffer_bytes() const { return host_bytes_; }
    // Backend memory held apart from the host (dense weights, caches, work buffers), for the VRAM
    // budget; 0 where the backend's memory is the host's.
    uint64_t device_bytes() const { return device_bytes_; }
    // Milliseconds the device spent running this pass's ops so far, from events around the work
    // (idle gaps while the host waits are excluded); < 0 where not measured (CPU).
    double device_busy_ms() const { return ops_->busy_ms(); }
    // Of that, the MoE calls' experts and shared experts (Ops::BusyKind::kBesideHost).
    double device_busy_beside_host_ms() const { return ops_->busy_beside_host_ms(); }
    // The same busy time as intervals on the host's steady clock, since the last
    // begin_timeline(), so it can be laid over the disk's; nullptr where not measured (CPU).
    void begin_timeline() { ops_->begin_timeline(); }
    const Timeline* device_timeline() const { return ops_->timeline(); }
    int64_t max_ubatch() const override { return cfg_.max_ubatch; }
    int64_t max_launch() const override { return cfg_.launch_tokens(); }
    int64_t n_ctx() const override { return cfg_.n_ctx; }
    void reset() override;

    void embed(Ubatch& u, const int32_t* tokens, int64_t n, int64_t pos0) override;
    // Offers the Engram rows of the positions, Engram layer by layer, to the provider's
    // read-ahead, as much as it takes now; the rest is offered after each Engram fetch.
    void plan_reads(const int32_t* tokens, int64_t pos0, int64_t n) override;
    // Engram, the attention sub-layer, the MoE mix and routing of consecutive units as one
    // launch. The routing stays on the device for moe_half; with an observer attached it is also
    // copied into each unit's ids / wts.
    void attention_half(int64_t l, Ubatch* const* units, int64_t n_units) override;
    // The MoE sub-layer of several units at once: every expert any of them routed to is
    // brought in once and applied to all of their tokens (layer-major prefill passes every
    // unit of the prompt). Per token the outputs are summed in rank order, so the result does
    // not depend on which units share the call or on the order experts arrive in.
    void moe_half(int64_t l, Ubatch* const* units, int64_t n_units) override;
    // Before layer l's attention halves for n_pos positions: under resident-only and hot-pool
    // routing every expert the layer can use is known already, and the provider may start moving
    // the host-resident ones (ExpertProvider::prepare_layer: as many slots as routing may give
    // them, k per position, or under hot-pool about one, rank 1, when H >= k - 1); under other
    // policies, nothing.
    void prepare_moe(int64_t l, int64_t n_pos) override;
    void finish() override;
    // After the last layer: the final normalised hidden state [n_embd] and logits [n_vocab] of
    // token i of the unit, in host memory.
    void final_hidden(const Ubatch& u, int64_t i, float* out);
    void logits(const Ubatch& u, int64_t i, float* out) override;
    int32_t greedy_token(const Ubatch& u, int64_t i, const TokenBan& ban) override;
    // Milliseconds the CPU has spent computing host-resident experts, and how many, since
    // construction.
    double host_expert_ms() const { return host_expert_ms_; }
    uint64_t host_experts() const { return host_experts_; }
    // The fastest of `reps` runs (after one unmeasured where warm_up) of one routed expert on m
    // tokens, from the view's memory: on the CPU for a host view (m <= host_expert_positions),
    // else on the backend, synced. Start-up only (the rates --decode-experts hybrid balances
    // by); the activations are whatever the buffers hold.
    double time_expert_ms(const ExpertView& v, int64_t layer, int64_t m, int reps, bool warm_up = true);
    // Rows of the layer's Engram table the token at `pos` hashes to.
    void engram_rows(int64_t layer, int64_t pos, uint64_t* rows) const;

private:
    template <class T>
    T* alloc(int64_t count);
    template <class T>
    T* alloc_host(int64_t count);
    MatView mat(const MatView& v) const;
    const float* vec(const float* host_vec) const;
    void load_dense_image();
    float* H(int64_t pos) const { return H_ + pos * 4 * E_; }
    void mix(const MatView& fn, const float* base, const float* scale, const float* h, int64_t n, float* out_mix);
    // Positions pos0..pos0+n-1: one launch of one or more consecutive units.
    struct Launch {
        int64_t pos0 = 0, n = 0;
    };
    Launch launch_of(Ubatch* const* units, int64_t n_units) const;
    void engram(int64_t l, int64_t p0, int64_t n);
    // Checks the positions and the ids, and records the tokens (tokens_).
    void record_tokens(const int32_t* tokens, int64_t n, int64_t pos0);
    void offer_engram_rows();  // the plan_reads rows not yet taken, while the provider takes them
    void attention(int64_t l, int64_t p0, int64_t n);
    void blocks(int64_t l, int64_t p0, int64_t n);
    void collapse_final(const Ubatch& u, int64_t i);
    // collapse_final, then the output head: token i's logits in logits_ [n_vocab], on the device.
    void output_head(const Ubatch& u, int64_t i);
    void release_finished(int64_t keep);  // releases experts whose fences passed; waits while more than keep

    const Model& m_;
    const HParams& hp_;
    std::unique_ptr<Ops> ops_;
    std::unique_ptr<Ops> host_ops_;  // CPU ops for host-resident experts, or null
    ExpertProvider& experts_;
    EngramProvider& engram_;
    ForwardConfig cfg_;
    ForwardLayout lay_;
    RoutingObserver* observer_ = nullptr;
    std::vector<void*> host_allocations_;
    uint64_t host_bytes_ = 0, device_bytes_ = 0;
    int64_t E_ = 0;

    const uint8_t* image_ = nullptr;      // the dense image as the backend reads it
    std::vector<LayerWeights> layers_;  // as the backend reads them
    std::vector<int64_t> kv_src_of_, key_owner_of_, idx_src_of_;
    std::vector<uint8_t*> resident_;      // [layer] -> [n_expert] mask (or null)
    std::vector<uint8_t*> hot_;           // [layer] -> [n_expert] mask of the experts in VRAM (or null)

    // Sequence state: caches per layer (null where the layer has no such role).
    std::vector<float*> kv_cache_, comp_in_, comp_score_, comp_latent_, comp_rows_, idx_keys_;
    std::vector<int32_t*> sel_, sel_n_;
    // Activations by position: [n_ctx][...]
    float *H_, *pre_, *xf_, *mixf_, *wts_, *eo_;
    int32_t *ids_, *iota_;
    // Work buffers for one unit
    float *hflat_, *mixm_, *mixa_, *x_, *y_, *qa_, *q_, *kvb_, *att_, *oa_, *iq_, *iw_, *iscore_, *rlogits_;
    float *pooled_, *emb_, *erow_, *ekv_, *sg_, *su_, *sh_, *logits_;
    int32_t* bpos_;
    int32_t* groups_;          // ForwardLayout::groups: counts [n_expert + 1], a call's gather and scatter rows
    int32_t *greedy_, *greedy_host_;  // [1] a decode step's greedy token (Ops::argmax), on the device, on the host
    // Host side
    int32_t* tokens_;          // [n_ctx], for Engram hashing
    float* out_host_;          // [max(n_vocab, n_embd)]
    float* emb_host_;          // [mu][n_embd] embedding rows dequantised on the host
    bool emb_host_in_flight_ = false;  // an upload from emb_host_ may still be queued (embed)
    float* onehot_;            // [mu][4]
    uint64_t* erows_;          // [mu*buckets]
    // plan_reads: Engram rows of positions [plan_pos0_, plan_end_) still to offer, from position
    // plan_pos_ (row plan_row_ of it) of the plan_layer_-th Engram layer on.
    int64_t plan_pos0_ = 0, plan_end_ = 0, plan_pos_ = 0, plan_row_ = 0;
    size_t plan_layer_ = SIZE_MAX;  // SIZE_MAX: no plan (or a provider that does not read ahead)
    size_t plan_fetching_ = 0;      // the Engram layer (index) whose fetches are not all done: offers go no further
    std::vector<uint64_t> plan_rows_;  // [buckets] one position's rows
    int32_t* groups_host_;      // groups_ on the host: the counts, with host compute the rows too
    int32_t *by_expert_start_, *used_experts_, *used_tokens_;
    // Host-resident experts on the CPU (ForwardLayout's host_*; null without), and the CPU's
    // outputs and their rows as the device's ops read them in place (Ops::host_view).
    float *xf_host_ = nullptr, *eo_host_ = nullptr;
    // The positions whose MoE input the last attention half sent to xf_host_ (-1: none).
    int64_t xf_host_pos0_ = -1, xf_host_n_ = 0;
    int32_t *host_pack_ = nullptr, *host_dest_ = nullptr;
    const float* eo_host_view_ = nullptr;
    const int32_t* host_dest_view_ = nullptr;
    double host_expert_ms_ = 0;   // written by host_thread_'s jobs, read between calls
    uint64_t host_experts_ = 0;
    // A call's CPU experts, computed on host_thread_ while this thread issues the device's (a
    // copied expert's kernel need not wait for a CPU expert): one job per batch the provider hands
    // out (the host Ops' expert_ffn_batch: one pool job for them all), its experts a run of
    // host_calls_; [host_expert_positions * k] each, reused each call; empty without host ops.
    // host_thread_ is null also on the CPU backend, whose device ops share the host ops' thread
    // pool: the jobs run inline there.
    struct HostExpertJob {
        int64_t first = 0, n = 0;  // host_calls_[first .. first + n), host_call_experts_ likewise
        float limit = 0;           // the layer's SwiGLU clamp
    };
    std::vector<ExpertCall> host_calls_;  // rows: the host's gather rows from its first slot; out_rows: host_pack_
    std::vector<int32_t> host_call_experts_;
    static void run_host_job(void* self, int64_t job);
    std::vector<HostExpertJob> host_jobs_;
    // What a job threw (jobs run on host_thread_, which must not throw): rethrown by the call
    // that handed it, after its jobs have ended.
    std::exception_ptr host_error_;
    std::unique_ptr<cpu::JobThread> host_thread_;
    // A layer's device ops after its CPU experts wait for them on the device (Ops::
    // wait_host_word), not on this thread: host_thread_ advances host_done_ to host_done_seq_ after
    // the layer's jobs (publish_host_done), and this thread goes on to queue the rest of the layer
    // and the next one's attention half. The next call that reads what the jobs wrote on the host
    // or starts the provider's next layer settles the layer first (settle_layer).
    uint32_t* host_done_ = nullptr;  // [1] pinned host memory
    uint32_t host_done_seq_ = 0;
    static void publish_host_done(void* self, int64_t seq);
    // moe_half leaves its layer open: experts unreleased and the provider's layer not ended.
    bool layer_open_ = false;
    // The device's busy time (Ops::busy_begin / busy_end) is one bracket over every stretch of
    // queued compute the host does not wait inside: it opens before the first op of such a stretch
    // (or stays open from the last) and closes before this thread waits for anything (a sync, a
    // fence, the provider, the CPU's jobs, Engram reads) and before the device is told to wait
    // (for a copy, for the CPU's word), so it never holds an idle device. A bracket left open
    // between two stretches keeps the device's kernels chained (an event between two kernels
    // stops the second from being placed before the first ends: 3-5 us each, three times a
    // decode layer in c9ed0e0's H100 trace), and every kernel of a step is inside one: the
    // Engram projections, the grouping, the CPU rows' scatter, the output head and the embedding
    // were outside until 2026-12-07 (about 0.5 ms of a slice decode token's 2.1 ms of kernels).
    // The experts and the shared expert of a MoE call are brackets of their own kind
    // (Ops::BusyKind::kBesideHost): they run while the host-resident experts' copies land and the
    // CPU computes, so a bound of the wall may leave them out.
    bool busy_open_ = false;
    Ops::BusyKind busy_kind_ = Ops::BusyKind::kChain;
    // Opens a bracket of that kind, or goes on in the one open where it is of that kind.
    void open_busy(Ops::BusyKind kind = Ops::BusyKind::kChain);
    void close_busy();
    // Closes the bracket, then waits for the device.
    void sync_device();
    // Waits for every job handed to host_thread_, releases the open layer's experts (waiting for
    // their fences where the device is not past them yet) and ends it, then rethrows what a job
    // threw.
    void settle_layer();
    // Device experts handed out together (ExpertProvider::next_ready_batch) and computed in one
    // Ops::expert_ffn_batch, at most this many.
    static constexpr int64_t kExpertBatch = 8;
    // Experts whose ops are queued but whose slots are not yet released: a ring of fences, each
    // recorded after one batch's ops and holding its experts, so the host can ask for the next
    // experts while the device still works on earlier ones.
    struct Unreleased {
        int32_t experts[kExpertBatch];
        int64_t n;
    };
    Unreleased unreleased_[Ops::kFences] = {};
    int64_t unreleased_head_ = 0, unreleased_n_ = 0;  // fences in the ring
    int64_t unreleased_experts_ = 0;                  // experts in them
};

}  // namespace bg::dsv41
