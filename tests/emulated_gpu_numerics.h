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
#include "forwarding_ops.h"
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

class GpuNumericsOps final : public ForwardingOps {
public:
    explicit GpuNumericsOps(std::unique_ptr<bg::Ops> in) : ForwardingOps(std::move(in)) {}
    const char* name() const override { return "cpu-emulating-cuda-matmul"; }

    void matmul(const bg::MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy) override {
        if (!bg::fused_matmul_takes(W.type, W.cols, reinterpret_cast<uintptr_t>(W.data) % 16)) {
            inner().matmul(W, x, ldx, n_tok, y, ldy);
            return;
        }
        xr_.resize(static_cast<size_t>(n_tok * W.cols));
        for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t i = 0; i < W.cols; ++i) xr_[t * W.cols + i] = round_activation(W.type, x[t * ldx + i]);
        inner().matmul(W, xr_.data(), W.cols, n_tok, y, ldy);
    }
    void expert_ffn(const bg::ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows, int64_t m, float limit,
                    bg::SwigluClamp form, float* out, const int32_t* out_rows) override {
        const int64_t E = e.gate.cols, F = e.gate.rows;
        if (!bg::MatmulNeeds::fused_expert(e.gate.type, e.up.type, e.down.type, E, F, 0, 0, 0)) {
            inner().expert_ffn(e, x, ldx, rows, m, limit, form, out, out_rows);
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
        inner().matmul(e.gate, xg_.data(), E, m, g_.data(), F);
        inner().matmul(e.up, xg_.data(), E, m, u_.data(), F);
        inner().swiglu(g_.data(), u_.data(), m * F, limit, form, h_.data());
        for (float& v : h_) v = round_activation(e.down.type, v);
        inner().matmul(e.down, h_.data(), F, m, o_.data(), E);
        inner().moe_scatter(o_.data(), out_rows, m, E, out);
    }

private:
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
