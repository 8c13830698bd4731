// CUDA kernels of the dsv41 forward pass, each behind a host launcher with the semantics of the
// CPU op it mirrors (engine/cpu/ops.h, engine/cpu/routing.h); tests/test_gpu_ops.cpp holds
// every launcher to its CPU counterpart on random inputs.
//
// Conventions shared by every launcher:
//  - every pointer is device memory unless said otherwise; activations are float32 row-major
//    [n_tok][width]; weights are ggml-typed bytes (DeviceMat);
//  - the launcher enqueues on `stream` and returns at once; a failing CUDA/cuBLAS call aborts
//    with file:line (check.cuh); nothing is allocated per call;
//  - counts of zero are allowed and enqueue nothing;
//  - the order of floating-point operations follows the CPU op where that costs nothing
//    (elementwise chains, sums over 4 copies or k ranks are done in the same order, with the
//    product rounded before the add as on the CPU); reductions over long rows run in a
//    different order, so those agree within a few float ulps times sqrt(length), not bit for bit.
#pragma once

#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/ops.h"
#include "cpu/ops.h"
#include "cpu/routing.h"
#include "tensor/ggml_types.h"

namespace bg::cuda {

// ---------------------------------------------------------------------------------------------
// Matrices and matmul

// A weight matrix in device memory: a cpu::MatView whose data points into the device.
using DeviceMat = cpu::MatView;

// Owns what matmul needs so that calls allocate nothing: the cuBLAS handle (FP32 math, no TF32),
// its workspace, and an F32 scratch of scratch_bytes into which weight rows are dequantised a
// chunk at a time. One context serves one host thread; it may be used on different streams
// (each call waits for the previous call's use of the scratch), but calls are cheapest on one.
class MatmulContext {
public:
    static constexpr uint64_t kDefaultScratchBytes = uint64_t{128} << 20;
    // On the current device. Aborts when there is no device or memory runs out.
    explicit MatmulContext(uint64_t scratch_bytes = kDefaultScratchBytes);
    ~MatmulContext();
    MatmulContext(const MatmulContext&) = delete;
    MatmulContext& operator=(const MatmulContext&) = delete;

    uint64_t scratch_bytes() const { return scratch_bytes_; }
    // Weight rows of a cols-wide matrix dequantised per GEMM (aborts when one row does not fit).
    int64_t chunk_rows(int64_t cols) const;

private:
    friend void matmul(MatmulContext&, const DeviceMat&, const float*, int64_t, int64_t, float*,
                       int64_t, cudaStream_t);
    void bind(cudaStream_t stream);

    cublasHandle_t handle_ = nullptr;
    float* scratch_ = nullptr;        // [scratch_bytes / 4] dequantised weight rows
    uint64_t scratch_bytes_ = 0;
    void* workspace_ = nullptr;       // cuBLAS workspace, so cuBLAS never allocates
    uint64_t workspace_bytes_ = 0;
    cudaStream_t stream_ = nullptr;   // stream the handle is bound to
    bool bound_ = false;
    cudaEvent_t done_ = nullptr;      // end of the last call, on stream_
};

// y[t*ldy + r] = sum_i W[r][i] * x[t*ldx + i] for t < n_tok, r < W.rows (cpu::matmul).
// F32 weights with 4-byte aligned rows go to cuBLAS as they are; every other matrix is
// dequantised (exactly, as dequantize_row) in row chunks into the context's scratch, each chunk
// followed by one SGEMM over all n_tok inputs.
void matmul(MatmulContext& ctx, const DeviceMat& W, const float* x, int64_t ldx, int64_t n_tok,
            float* y, int64_t ldy, cudaStream_t stream);

// H[t][c][:] = dequantised row tokens[t] of emb, for c = 0..3 (the 4 residual copies).
// tokens: [n_tok] int32; H: [n_tok][4][emb.cols]. Ids must be in [0, emb.rows) (the host checks
// them as it uploads them); a row for an id outside gets NaN so the mistake cannot go unseen.
void embed_tokens(const DeviceMat& emb, const int32_t* tokens, int64_t n_tok, float* H,
                  cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Elementwise and per-row ops

// pos[i] = start + i*step (int32): the position arrays rope, attention and indexer read.
void fill_positions(int32_t* pos, int64_t n, int64_t start, int64_t step, cudaStream_t stream);

// Each of n_rows rows: y = x / sqrt(mean(x^2) + eps) * w (cpu::rmsnorm). x, y: [n_rows][n];
// w: [n] or null; y may alias x.
void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y,
             cudaStream_t stream);

// cpu::rope over a batch: for token t at position pos[t] and head h < n_heads, the last p.n_dims
// values of x[t*row_stride + h*head_dim .. + head_dim) are rotated (ggml NORM mode, YaRN as in
// p, angles in double). pos: [n_tok] int32.
void rope(float* x, int64_t row_stride, int64_t n_tok, const int32_t* pos, int64_t n_heads,
          int64_t head_dim, const cpu::RopeParams& p, bool inverse, cudaStream_t stream);

// out[i] = cpu::swiglu(gate[i], up[i]) in either clamp form; limit <= cpu::kSwigluNoClamp: none.
// out may alias gate or up.
void swiglu(const float* gate, const float* up, int64_t n, float limit, cpu::SwigluClamp form,
            float* out, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// mHC (4 residual copies) and Engram

// A mix array [n][kMixWidth] as backend/ops.h lays it out (the bytes of cpu::HcMix).
using bg::kMixComb;
using bg::kMixPost;
using bg::kMixPre;
using bg::kMixWidth;

// mix[t] = cpu::hc_mix(m[t], base, scale, n_iter, eps). m: [n_tok][24] (the hc_*_fn projections);
// base: [24], scale: [3] (device); mix: [n_tok][kMixWidth].
void hc_mix(const float* m, const float* base, const float* scale, int64_t n_tok, int n_iter,
            float eps, float* mix, cudaStream_t stream);

// x[t][e] = sum_c pre[t*pre_stride + c] * H[t][c][e], c = 0..3 in order.
// H: [n_tok][4][n_embd]; pre: 4 floats per token, pre_stride apart (4 for a [n][4] array,
// kMixWidth to read the pre of a mix array directly); x: [n_tok][n_embd].
void hc_collapse(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok,
                 int64_t n_embd, float* x, cudaStream_t stream);

// H[t][d][e] = post[t][d]*y[t][e] + sum_c comb[t][d][c]*R[t][c][e] (c in order), from a mix array
// [n_tok][kMixWidth]. y: [n_tok][n_embd]; R, H: [n_tok][4][n_embd]. H may alias R (each element
// reads its 4 residual values before writing its 4 outputs), so no copy of H into R is needed.
void hc_expand(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t n_embd,
               float* H, cudaStream_t stream);

// Engram injection: for token t and copy c, g = cpu::engram_gate(K_c, H[t][c], wk[c], wq[c]) with
// K_c = kv[t][c], then H[t][c][:] += g * kv[t][4][:].
// kv: [n_tok][5][n_embd] (4 keys, then the value: engram_wkv's output); wk, wq: [4][n_embd];
// H: [n_tok][4][n_embd]; gates: [n_tok][4] or null (the g used, for tests and metrics).
void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n_tok,
                     int64_t n_embd, float eps, float* H, float* gates, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Attention side

// Compressor pooling (Forward::compressor) of the completed blocks b0 .. b0+n_blocks-1:
// block b covers tokens b*ratio .. b*ratio+ratio-1; per channel c, with score (gated):
// out[j][c] = sum_t softmax_t(score[t][c]) * kv[t][c]; without (score null): sum_t kv[t][c].
// kv, score: [n_ctx][d] (compressor inputs by position); out: [n_blocks][d] (pooled, before the
// compressor norm).
void compress_pool(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0,
                   int64_t n_blocks, float* out, cudaStream_t stream);

// One block per (token, head): bg::AttentionArgs (backend/ops.h).
using bg::AttentionArgs;
void attention(const AttentionArgs& a, cudaStream_t stream);

// Lightning indexer: bg::IndexerArgs (backend/ops.h); ld_scores too small traps a kernel.
using bg::IndexerArgs;
void indexer(const IndexerArgs& a, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Router and MoE

// bg::route for every token: p_e = sqrt(softplus(logits[t][e])); the policy picks k experts in
// descending order of p + bias (ties: lower id); weights = p * wt.factor(sum of chosen p).
// logits: [n_tok][n_expert]; bias: [n_expert] or null (0); resident: [n_expert] 1/0 bytes, read
// by every policy but exact (may be null then); ids, weights: [n_tok][k]. Where fewer than k
// experts are resident, the missing ranks get id -1 and weight 0 (the host's route would abort;
// residency plans hold at least k experts per layer).
void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident,
           int64_t n_tok, int64_t n_expert, int k, cpu::RouteWeighting wt, int32_t* ids, float* weights,
           cudaStream_t stream);

// out[j][:] = x[rows[j]*ldx .. + width) for j < m: an expert's tokens, made contiguous.
// rows: [m] int32; out: [m][width].
void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width,
                float* out, cudaStream_t stream);

// dst[rows[j]*width .. + width) = src[j][:] for j < m: an expert's outputs back to their slots
// (slot = token*k + rank in a [n_tok][k][width] array). rows: [m] int32, distinct.
void moe_scatter(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst,
                 cudaStream_t stream);

// y[t][e] += sum_j w[t][j] * eo[t][j][e], j = 0..k-1 in rank order, summed into a zero before
// the add to y (Forward::moe_half's order). eo: [n_tok][k][width]; w: [n_tok][k]; y: [n_tok][width].
void moe_weighted_sum(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width,
                      float* y, cudaStream_t stream);

}  // namespace bg::cuda
