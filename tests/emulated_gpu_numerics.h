// The CUDA backend's numerical contract for its matmuls, emulated on the CPU: a device whose ops
// are the CPU's, except that every matmul the CUDA ops run through the fused quantized kernels
// (backend/matmul_plan.h: MXFP4, Q8_0, BF16) sees its activations as those kernels do
// (engine/cuda/quant_matmul.cuh): each split into hi = round(x) and lo = round(x - hi) in FP16
// (MXFP4/Q8_0 weights) or BF16 (BF16 weights), round to nearest even, and the expert FFN's
// hidden SwiGLU output the same way before the down projection. Weights are exact on both,
// products are exact in the tensor cores, sums are FP32 on both: what is left between this
// emulation and the GPU is the order of FP32 sums (about 1e-6 relative). So the forward-level
// figures the GPU tests demand (test_gpu_e2e, test_gpu_reference) can be checked on a machine
// without a GPU (test_emulated_gpu_numerics), and the effect of a contract can be measured before
// a kernel implements it: with one rounding (hi only) the ci scale keeps 47 % of routing
// decisions (BF16 dense weights) and 96 % with only the MXFP4/Q8_0 paths rounded to FP16; with
// hi + lo, all of them.
#pragma once

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "backend/matmul_plan.h"
#include "cpu/cpu_ops.h"
#include "tensor/ggml_types.h"

namespace bgtest {

inline float round_once(bg::GgmlType weights, float v) {
    return weights == bg::GgmlType::BF16 ? bg::bf16_to_fp32(bg::fp32_to_bf16(v)) : bg::fp16_to_fp32(bg::fp32_to_fp16(v));
}
// What the fused kernels multiply by: hi = round(v), lo = round(v - hi), both exact operands of
// the tensor cores, summed in FP32 (quant_matmul.cuh's split activations).
inline float round_activation(bg::GgmlType weights, float v) {
    const float hi = round_once(weights, v);
    return hi + round_once(weights, v - hi);
}

class GpuNumericsOps final : public bg::Ops {
public:
    explicit GpuNumericsOps(std::unique_ptr<bg::Ops> in) : in_(std::move(in)) {}
    const char* name() const override { return "cpu-emulating-cuda-matmul"; }
    bool memory_is_host() const override { return in_->memory_is_host(); }
    void* alloc(uint64_t bytes) override { return in_->alloc(bytes); }
    void* alloc_host(uint64_t bytes) override { return in_->alloc_host(bytes); }
    const void* host_view(const void* host) const override { return in_->host_view(host); }
    void free_host(void* p) override { in_->free_host(p); }
    uint64_t own_bytes() const override { return in_->own_bytes(); }
    uint64_t own_host_bytes() const override { return in_->own_host_bytes(); }
    void reserve(const bg::OpsLimits& lim) override {
        in_->reserve(lim);
        lim_ = lim;
    }
    void upload(void* d, const void* s, uint64_t b) override { in_->upload(d, s, b); }
    void download(void* d, const void* s, uint64_t b) override { in_->download(d, s, b); }
    void copy(void* d, const void* s, uint64_t b) override { in_->copy(d, s, b); }
    void copy_rows(float* d, int64_t ldd, const float* s, int64_t lds, int64_t w, int64_t r) override {
        in_->copy_rows(d, ldd, s, lds, w, r);
    }
    void zero(void* x, uint64_t b) override { in_->zero(x, b); }
    void sync() override { in_->sync(); }
    void record_fence(int i) override { in_->record_fence(i); }
    bool fence_passed(int i, bool w) override { return in_->fence_passed(i, w); }
    void wait_host_word(const uint32_t* w, uint32_t v) override { in_->wait_host_word(w, v); }
    void busy_begin() override { in_->busy_begin(); }
    void busy_end() override { in_->busy_end(); }

    void matmul(const bg::MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy) override {
        if (!bg::fused_matmul_takes(W.type, W.cols, reinterpret_cast<uintptr_t>(W.data) % 16)) {
            in_->matmul(W, x, ldx, n_tok, y, ldy);
            return;
        }
        xr_.resize(static_cast<size_t>(n_tok * W.cols));
        for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t i = 0; i < W.cols; ++i) xr_[t * W.cols + i] = round_activation(W.type, x[t * ldx + i]);
        in_->matmul(W, xr_.data(), W.cols, n_tok, y, ldy);
    }
    void expert_ffn(const bg::ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows, int64_t m, float limit,
                    bg::SwigluClamp form, float* out, const int32_t* out_rows) override {
        const int64_t E = e.gate.cols, F = e.gate.rows;
        if (!bg::MatmulNeeds::fused_expert(e.gate.type, e.up.type, e.down.type, E, F, 0, 0, 0)) {
            in_->expert_ffn(e, x, ldx, rows, m, limit, form, out, out_rows);
            return;
        }
        // As the fused kernels: x rounded, gate and up summed in FP32, SwiGLU in FP32, h rounded,
        // down summed in FP32, stored to the token's own row.
        xg_.resize(static_cast<size_t>(m * E));
        g_.resize(static_cast<size_t>(m * F));
        u_.resize(static_cast<size_t>(m * F));
        h_.resize(static_cast<size_t>(m * F));
        o_.resize(static_cast<size_t>(m * E));
        for (int64_t j = 0; j < m; ++j)
            for (int64_t i = 0; i < E; ++i) xg_[j * E + i] = round_activation(e.gate.type, x[rows[j] * ldx + i]);
        in_->matmul(e.gate, xg_.data(), E, m, g_.data(), F);
        in_->matmul(e.up, xg_.data(), E, m, u_.data(), F);
        in_->swiglu(g_.data(), u_.data(), m * F, limit, form, h_.data());
        for (float& v : h_) v = round_activation(e.down.type, v);
        in_->matmul(e.down, h_.data(), F, m, o_.data(), E);
        in_->moe_scatter(o_.data(), out_rows, m, E, out);
    }

    void dequantize(bg::GgmlType t, const uint8_t* s, float* d, int64_t n) override { in_->dequantize(t, s, d, n); }
    void dequantize_fp8_rows(const uint8_t* s, float* d, int64_t rows, int64_t dim) override {
        in_->dequantize_fp8_rows(s, d, rows, dim);
    }
    void embed_rows(const float* r, const int32_t* ids, int64_t n, int64_t w, float* H) override {
        in_->embed_rows(r, ids, n, w, H);
    }
    void fill_positions(int32_t* p, int64_t n, int64_t s, int64_t st) override { in_->fill_positions(p, n, s, st); }
    void rmsnorm(const float* x, const float* w, int64_t n, int64_t r, float eps, float* y) override {
        in_->rmsnorm(x, w, n, r, eps, y);
    }
    void rope(float* x, int64_t rs, int64_t n, const int32_t* pos, int64_t nh, int64_t hd, const bg::RopeParams& p,
              bool inv) override {
        in_->rope(x, rs, n, pos, nh, hd, p, inv);
    }
    void swiglu(const float* g, const float* u, int64_t n, float l, bg::SwigluClamp f, float* o) override {
        in_->swiglu(g, u, n, l, f, o);
    }
    void scale(float* x, int64_t n, float s) override { in_->scale(x, n, s); }
    void hc_mix(const float* m, const float* b, const float* s, int64_t n, int it, float eps, float* mix) override {
        in_->hc_mix(m, b, s, n, it, eps, mix);
    }
    void hc_collapse(const float* H, const float* pre, int64_t ps, int64_t n, int64_t E, float* x) override {
        in_->hc_collapse(H, pre, ps, n, E, x);
    }
    void hc_expand(const float* mix, const float* y, const float* R, int64_t n, int64_t E, float* H) override {
        in_->hc_expand(mix, y, R, n, E, H);
    }
    void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n, int64_t E, float eps,
                         float* H) override {
        in_->engram_gate_add(kv, wk, wq, n, E, eps, H);
    }
    void compress_pool(const float* kv, const float* sc, int64_t d, int64_t r, int64_t b0, int64_t nb, float* o) override {
        in_->compress_pool(kv, sc, d, r, b0, nb, o);
    }
    void attention(const bg::AttentionArgs& a) override { in_->attention(a); }
    void indexer(const bg::IndexerArgs& a) override { in_->indexer(a); }
    void route(bg::RoutingPolicy p, const float* l, const float* b, const uint8_t* r, const uint8_t* h, int64_t n,
               int64_t ne, int k, bg::RouteWeighting wt, int32_t* ids, float* w) override {
        in_->route(p, l, b, r, h, n, ne, k, wt, ids, w);
    }
    void group_by_expert(const int32_t* ids, int64_t n, int64_t k, int64_t pos0, int64_t ne, int32_t* counts,
                         int32_t* gather, int32_t* scatter, int32_t* host_copy) override {
        in_->group_by_expert(ids, n, k, pos0, ne, counts, gather, scatter, host_copy);
    }
    void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t w, float* o) override {
        in_->moe_gather(x, ldx, rows, m, w, o);
    }
    void moe_scatter_join(const float* s, const int32_t* rows, int64_t m, int64_t a0, int64_t na, int64_t w,
                          float* d) override {
        in_->moe_scatter_join(s, rows, m, a0, na, w, d);
    }
    void argmax(const float* x, int64_t n, const bg::TokenBan& ban, int32_t* out) override { in_->argmax(x, n, ban, out); }
    void moe_weighted_sum(const float* eo, const float* w, int64_t n, int64_t k, int64_t width, float* y) override {
        in_->moe_weighted_sum(eo, w, n, k, width, y);
    }

private:
    std::unique_ptr<bg::Ops> in_;
    bg::OpsLimits lim_;
    std::vector<float> xr_, xg_, g_, u_, h_, o_;
};

// The CPU device with GpuNumericsOps.
class GpuNumericsDevice final : public bg::DeviceFactory {
public:
    const char* name() const override { return "cpu-emulating-cuda-matmul"; }
    std::unique_ptr<bg::Backend> make_backend(const bg::BackendOptions& opts) override {
        return bg::cpu::cpu_device().make_backend(opts);
    }
    std::unique_ptr<bg::Ops> make_ops(bg::cpu::ThreadPool& pool) override {
        return std::make_unique<GpuNumericsOps>(bg::cpu::cpu_device().make_ops(pool));
    }
};

}  // namespace bgtest
