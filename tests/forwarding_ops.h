// An Ops that hands every call to another (the CPU's, in the tests), and tells a hook what kind of
// call each one is before it does: the base of the tests' wrappers, which change what a few ops
// compute (emulated_gpu_numerics.h) or watch the order the forward queues them in
// (test_busy_brackets.cpp). The composite ops (matmul_many, matmul_grouped, expert_ffn_batch) keep
// Ops' own definitions, which come back through the wrapped single ops, so a wrapper that changes
// matmul changes them too.
#pragma once

#include <memory>
#include <utility>

#include "backend/ops.h"

namespace bgtest {

class ForwardingOps : public bg::Ops {
public:
    enum class Call {
        kMemory,
        kCopy,
        kCompute,
        kSync,
        kFence,
        kFenceWait,
        kDeviceWait,
        kBusyBegin,
        kBusyBeginBesideHost,
        kBusyEnd
    };

    explicit ForwardingOps(std::unique_ptr<bg::Ops> in) : in_(std::move(in)) {}
    const char* name() const override { return in_->name(); }
    bool memory_is_host() const override { return in_->memory_is_host(); }
    void* alloc(uint64_t bytes) override { return in_->alloc(bytes); }
    void* alloc_host(uint64_t bytes) override { return in_->alloc_host(bytes); }
    const void* host_view(const void* host) const override { return in_->host_view(host); }
    void free_host(void* p) override { in_->free_host(p); }
    uint64_t own_bytes() const override { return in_->own_bytes(); }
    uint64_t own_host_bytes() const override { return in_->own_host_bytes(); }
    void reserve(const bg::OpsLimits& lim) override { in_->reserve(lim); }

    void upload(void* d, const void* s, uint64_t b) override {
        on(Call::kCopy, "upload");
        in_->upload(d, s, b);
    }
    void download(void* d, const void* s, uint64_t b) override {
        on(Call::kCopy, "download");
        in_->download(d, s, b);
    }
    void copy(void* d, const void* s, uint64_t b) override {
        on(Call::kCopy, "copy");
        in_->copy(d, s, b);
    }
    void copy_rows(float* d, int64_t ldd, const float* s, int64_t lds, int64_t w, int64_t r) override {
        on(Call::kCopy, "copy_rows");
        in_->copy_rows(d, ldd, s, lds, w, r);
    }
    void zero(void* x, uint64_t b) override {
        on(Call::kCopy, "zero");
        in_->zero(x, b);
    }

    void sync() override {
        on(Call::kSync, "sync");
        in_->sync();
    }
    void expect_work(int64_t us) override { in_->expect_work(us); }
    void record_fence(int i) override {
        on(Call::kFence, "record_fence");
        in_->record_fence(i);
    }
    void wait_event(bg::DeviceEvent e) override {
        on(Call::kDeviceWait, "wait_event");
        in_->wait_event(e);
    }
    bool fence_passed(int i, bool w) override {
        on(w ? Call::kFenceWait : Call::kFence, "fence_passed");
        return in_->fence_passed(i, w);
    }
    void wait_host_word(const uint32_t* w, uint32_t v) override {
        on(Call::kDeviceWait, "wait_host_word");
        in_->wait_host_word(w, v);
    }
    void busy_begin(BusyKind kind) override {
        on(kind == BusyKind::kBesideHost ? Call::kBusyBeginBesideHost : Call::kBusyBegin, "busy_begin");
        in_->busy_begin(kind);
    }
    void busy_end() override {
        on(Call::kBusyEnd, "busy_end");
        in_->busy_end();
    }
    double busy_ms() const override { return in_->busy_ms(); }
    double busy_beside_host_ms() const override { return in_->busy_beside_host_ms(); }
    void begin_timeline() override { in_->begin_timeline(); }
    const bg::Timeline* timeline() const override { return in_->timeline(); }

    void matmul(const bg::MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy) override {
        on(Call::kCompute, "matmul");
        in_->matmul(W, x, ldx, n_tok, y, ldy);
    }
    void expert_ffn(const bg::ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows, int64_t m, float limit,
                    bg::SwigluClamp form, float* out, const int32_t* out_rows) override {
        on(Call::kCompute, "expert_ffn");
        in_->expert_ffn(e, x, ldx, rows, m, limit, form, out, out_rows);
    }
    void dequantize(bg::GgmlType t, const uint8_t* s, float* d, int64_t n) override {
        on(Call::kCompute, "dequantize");
        in_->dequantize(t, s, d, n);
    }
    void dequantize_fp8_rows(const uint8_t* s, float* d, int64_t rows, int64_t dim) override {
        on(Call::kCompute, "dequantize_fp8_rows");
        in_->dequantize_fp8_rows(s, d, rows, dim);
    }
    void embed_rows(const float* r, const int32_t* ids, int64_t n, int64_t w, float* H) override {
        on(Call::kCompute, "embed_rows");
        in_->embed_rows(r, ids, n, w, H);
    }
    void fill_positions(int32_t* p, int64_t n, int64_t s, int64_t st) override {
        on(Call::kCompute, "fill_positions");
        in_->fill_positions(p, n, s, st);
    }
    void rmsnorm(const float* x, const float* w, int64_t n, int64_t r, float eps, float* y) override {
        on(Call::kCompute, "rmsnorm");
        in_->rmsnorm(x, w, n, r, eps, y);
    }
    void rope(float* x, int64_t rs, int64_t n, const int32_t* pos, int64_t nh, int64_t hd, const bg::RopeParams& p,
              bool inv) override {
        on(Call::kCompute, "rope");
        in_->rope(x, rs, n, pos, nh, hd, p, inv);
    }
    void swiglu(const float* g, const float* u, int64_t n, float l, bg::SwigluClamp f, float* o) override {
        on(Call::kCompute, "swiglu");
        in_->swiglu(g, u, n, l, f, o);
    }
    void scale(float* x, int64_t n, float s) override {
        on(Call::kCompute, "scale");
        in_->scale(x, n, s);
    }
    void hc_mix(const float* m, const float* b, const float* s, int64_t n, int it, float eps, float* mix) override {
        on(Call::kCompute, "hc_mix");
        in_->hc_mix(m, b, s, n, it, eps, mix);
    }
    void hc_collapse(const float* H, const float* pre, int64_t ps, int64_t n, int64_t E, float* x) override {
        on(Call::kCompute, "hc_collapse");
        in_->hc_collapse(H, pre, ps, n, E, x);
    }
    void hc_expand(const float* mix, const float* y, const float* R, int64_t n, int64_t E, float* H) override {
        on(Call::kCompute, "hc_expand");
        in_->hc_expand(mix, y, R, n, E, H);
    }
    void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n, int64_t E, float eps,
                         float* H) override {
        on(Call::kCompute, "engram_gate_add");
        in_->engram_gate_add(kv, wk, wq, n, E, eps, H);
    }
    void compress_pool(const float* kv, const float* sc, int64_t d, int64_t r, int64_t b0, int64_t nb,
                       float* o) override {
        on(Call::kCompute, "compress_pool");
        in_->compress_pool(kv, sc, d, r, b0, nb, o);
    }
    void attention(const bg::AttentionArgs& a) override {
        on(Call::kCompute, "attention");
        in_->attention(a);
    }
    void indexer(const bg::IndexerArgs& a) override {
        on(Call::kCompute, "indexer");
        in_->indexer(a);
    }
    void route(bg::RoutingPolicy p, const float* l, const float* b, const uint8_t* r, const uint8_t* h, int64_t n,
               int64_t ne, int k, bg::RouteWeighting wt, int32_t* ids, float* w) override {
        on(Call::kCompute, "route");
        in_->route(p, l, b, r, h, n, ne, k, wt, ids, w);
    }
    void group_by_expert(const int32_t* ids, int64_t n, int64_t k, int64_t pos0, int64_t ne, int32_t* counts,
                         int32_t* gather, int32_t* scatter, int32_t* host_copy) override {
        on(Call::kCompute, "group_by_expert");
        in_->group_by_expert(ids, n, k, pos0, ne, counts, gather, scatter, host_copy);
    }
    void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t w, float* o) override {
        on(Call::kCompute, "moe_gather");
        in_->moe_gather(x, ldx, rows, m, w, o);
    }
    void moe_scatter_join(const float* s, const int32_t* rows, int64_t m, int64_t a0, int64_t na, int64_t w,
                          float* d) override {
        on(Call::kCompute, "moe_scatter_join");
        in_->moe_scatter_join(s, rows, m, a0, na, w, d);
    }
    void argmax(const float* x, int64_t n, const bg::TokenBan& ban, int32_t* out) override {
        on(Call::kCompute, "argmax");
        in_->argmax(x, n, ban, out);
    }
    void moe_weighted_sum(const float* eo, const float* w, int64_t n, int64_t k, int64_t width, float* y) override {
        on(Call::kCompute, "moe_weighted_sum");
        in_->moe_weighted_sum(eo, w, n, k, width, y);
    }

protected:
    // Before each call is handed on (memory and start-up calls are not reported).
    virtual void on(Call kind, const char* what) {
        (void)kind;
        (void)what;
    }
    bg::Ops& inner() { return *in_; }

private:
    std::unique_ptr<bg::Ops> in_;
};

}  // namespace bgtest
