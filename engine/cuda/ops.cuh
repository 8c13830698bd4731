// CUDA kernels of the dsv41 forward pass, each behind a host launcher with the semantics of the
// bg::Ops method of the same name (engine/backend/ops.h), which names the CPU op it mirrors
// (engine/cpu/ops.h, engine/cpu/routing.h); only what is CUDA's own is said here.
// tests/test_gpu_ops.cpp holds every launcher to its CPU counterpart on random inputs.
// Each op family's kernels sit beside their launchers in one file named for it: matmul.cu (also
// embed_tokens), positions.cu, rmsnorm.cu, rope.cu, swiglu.cu, mhc.cu (hc_*), engram_gate.cu,
// compress_pool.cu, attention.cu (also the indexer), router.cu, moe_group.cu, moe_rows.cu
// (moe_gather/scatter/weighted_sum), argmax.cu, host_wait.cu (wait_host_word), small_copy.cu
// (copies too short for the copy engine); device helpers they share are in common.cuh.
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
#include "tensor/ggml_types.h"

namespace bg::cuda {

// ---------------------------------------------------------------------------------------------
// Matrices and matmul

// A weight matrix in device memory: a MatView whose data points into the device.
using DeviceMat = MatView;

// Owns what matmul needs so that calls allocate nothing: the cuBLAS handle (FP32 math, no TF32),
// its workspace, and an F32 scratch of scratch_bytes into which weight rows are dequantised a
// chunk at a time (0: none, for F32 matrices read in place only). One context serves one host
// thread; it may be used on different streams (each call waits for the previous call's use of
// the scratch), but calls are cheapest on one. The CUDA ops take MXFP4/Q8_0/BF16 weights through
// the fused kernels (quant_matmul.cuh) instead; this path serves F32, F16 and the odd cases.
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
// F32 weights with 4-byte aligned rows go to cuBLAS as they are, or, for at most 4 tokens with
// rows 16-byte aligned and a multiple of 4 wide (a decode step's router), to a GEMV kernel of
// matmul.cu, chained like the other kernels (launch.cuh); every other matrix is
// dequantised (exactly, as dequantize_row) in row chunks into the context's scratch, each chunk
// followed by one SGEMM over all n_tok inputs.
void matmul(MatmulContext& ctx, const DeviceMat& W, const float* x, int64_t ldx, int64_t n_tok,
            float* y, int64_t ldy, cudaStream_t stream);

// H[t][c][:] = dequantised row tokens[t] of emb, for c = 0..3 (the 4 residual copies).
// tokens: [n_tok] int32; H: [n_tok][4][emb.cols]. Ids must be in [0, emb.rows) (the host checks
// them as it uploads them); a row for an id outside gets NaN so the mistake cannot go unseen.
void embed_tokens(const DeviceMat& emb, const int32_t* tokens, int64_t n_tok, float* H,
                  cudaStream_t stream);

void fill_positions(int32_t* pos, int64_t n, int64_t start, int64_t step, cudaStream_t stream);
void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y,
             cudaStream_t stream);
// Angles in double.
void rope(float* x, int64_t row_stride, int64_t n_tok, const int32_t* pos, int64_t n_heads,
          int64_t head_dim, const RopeParams& p, bool inverse, cudaStream_t stream);
// out may alias gate or up.
void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form,
            float* out, cudaStream_t stream);
void hc_mix(const float* m, const float* base, const float* scale, int64_t n_tok, int n_iter,
            float eps, float* mix, cudaStream_t stream);
void hc_collapse(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok,
                 int64_t n_embd, float* x, cudaStream_t stream);
// H may alias R (each element reads its 4 residual values before writing its 4 outputs).
void hc_expand(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t n_embd,
               float* H, cudaStream_t stream);
// gates: [n_tok][4] or null (the g used, for tests and metrics).
void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n_tok,
                     int64_t n_embd, float eps, float* H, float* gates, cudaStream_t stream);
void compress_pool(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0,
                   int64_t n_blocks, float* out, cudaStream_t stream);
// heads_per_block: 1, 2, 4 or 8 heads of a token per block (they share their rows); 0 chooses
// (tests pin each). partials: device memory for decode's row split (attention.cu), where the
// (token, head) pairs are too few to fill the GPU: each pair's rows go to `splits` blocks whose
// partial softmax a second kernel merges. splits 0: the launcher splits where partials are given
// and the grid would be small; 1: never; n >= 2: n blocks a pair (partials must hold them).
struct AttentionPartials {
    float* data = nullptr;  // [slots][d + 2]
    int64_t slots = 0;      // (token, head, split) triples it holds
    int64_t d = 0;          // largest head dimension
};
void attention(const AttentionArgs& a, cudaStream_t stream, int heads_per_block = 0,
               const AttentionPartials* partials = nullptr, int splits = 0);
// ld_scores too small traps a kernel.
void indexer(const IndexerArgs& a, cudaStream_t stream);
// Where fewer than k experts are resident, the missing ranks get id -1 and weight 0 (the host's
// route would abort; residency plans hold at least k experts per layer). hot: hot-pool only.
void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident, const uint8_t* hot,
           int64_t n_tok, int64_t n_expert, int k, RouteWeighting wt, int32_t* ids, float* weights,
           cudaStream_t stream);
// Ops::group_by_expert on the device (engine/cuda/moe_group.cu); host_copy: the device's address
// of the host copy, or null.
void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert, int32_t* counts,
                     int32_t* gather, int32_t* scatter, int32_t* host_copy, cudaStream_t stream);
void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width,
                float* out, cudaStream_t stream);
void moe_scatter(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst,
                 cudaStream_t stream);
// Rows add0 <= j < add0 + n_add added, the others written (Ops::moe_scatter_join); src and rows
// may be mapped host memory.
void moe_scatter_join(const float* src, const int32_t* rows, int64_t m, int64_t add0, int64_t n_add, int64_t width,
                      float* dst, cudaStream_t stream);
void moe_weighted_sum(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width,
                      float* y, cudaStream_t stream);

// Ops::argmax on the device (engine/cuda/argmax.cu): the same index as the CPU's. word: 8 bytes
// of device memory holding 0 (reserve() zeroes it), which the call uses and leaves 0 again.
void argmax(const float* x, int64_t n, const TokenBan& ban, unsigned long long* word, int32_t* out,
            cudaStream_t stream);

// Ops::wait_host_word (engine/cuda/host_wait.cu): the stream's later work waits until the pinned
// host word reaches value (a wrapping sequence).
void wait_host_word(const uint32_t* word_host, uint32_t value, cudaStream_t stream);

// Small copies as kernels (engine/cuda/small_copy.cu), for copies too short to pay for the copy
// engine (CudaOps: kKernelCopyMaxBytes, cuda_ops.cuh). Both ends device addresses; any
// alignment; dst and src must not overlap.
void copy_bytes(void* dst, const void* src, uint64_t bytes, cudaStream_t stream);
// Ops::copy_rows: rows of width floats, ld_src and ld_dst apart.
void copy_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t width, int64_t rows,
               cudaStream_t stream);

}  // namespace bg::cuda
