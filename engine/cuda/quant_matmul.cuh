// Fused quantized matmul: y = W x reading W in its ggml block format (MXFP4, Q8_0, BF16),
// decoding blocks in registers, never writing a dequantised copy of a weight matrix
// (issue #14, first part). Kernel and its launch: engine/cuda/quant_matmul_kernel.cuh,
// instantiated per weight type in quant_matmul_{mxfp4,q8_0,bf16}.cu; workspace, activation
// conversion and the entry points: engine/cuda/quant_matmul.cu; tests:
// tests/test_gpu_quant_matmul.cpp; timings: bench/bench_gpu.cpp; design and floors:
// bench/KERNELS.md.
//
// One tensor-core kernel (mma.sync m16n8k16, sm_80+, so sm_86 and sm_90 alike) serves every M:
//  - a CTA owns BM weight rows x all tokens of a <= 64-token chunk x a range of K (split-K);
//    weight rows are staged raw (the file's bytes) into shared memory with 16-byte cp.async,
//    STAGES deep, and each warp decodes its 16-row A fragments from there into registers;
//  - tile shapes by activation columns (2 per token with split activations, below): <= 8
//    ("GEMV": 64 rows, 8 columns, 3 stages), <= 16 (128 x 16, 8 warps), <= 32 (256 x 32; 2
//    stages from 4096 rows on or on sm_86, else 4), <= 64 (256 rows, 64 columns; 2 stages on
//    sm_86, 4 where shared memory allows, sm_90); more tokens run
//    in passes of 64 columns (32 tokens split, 64 not), each pass reading the weights once;
//  - split-K sized so the grid fills the GPU (at most kQuantPartialFloats partial sums): each
//    CTA of a split stores its FP32 partial tile into the workspace, and the last CTA of a row
//    tile to arrive (a self-cleaning counter per tile) adds the tile's partials in split order
//    0, 1, .. and runs the epilogue (store, or the SwiGLU for gate/up). The sum order is fixed by
//    the split boundaries, not by which CTA finishes last, so results are bit-identical run to
//    run; no FP32 atomics touch an output.
//
// Numerical contract (every path; tests/test_gpu_quant_matmul.cpp holds it against float64):
//  - activations arrive as FP32 and are split into hi = round(x) and lo = round(x - hi), both
//    FP16 (MXFP4, Q8_0 weights) or BF16 (BF16 weights), round to nearest even; hi and lo are two
//    columns of the MMA and token t's result is its hi column's sum plus its lo column's, in
//    FP32 (so a pass of 64 MMA columns takes 32 tokens). hi + lo holds x to about 2^-22 (FP16,
//    less where lo falls below FP16's normal range: an absolute 2^-25 or so) or 2^-16 (BF16);
//    every product is exact in the tensor core, sums are FP32;
//  - MXFP4 and Q8_0 weights are decoded EXACTLY: the integer codes (doubled E2M1 values -12..12,
//    int8 -127..127) are exact FP16 operands and each 32-block's partial sum is multiplied by the
//    block's scale in FP32 (the scale never meets an FP16 rounding); BF16 weights go in as they
//    are;
//  - so the error is that of FP32 summation plus the split's residue: relative
//    ||y - y_exact|| / ||y_exact|| of about 1e-6..1e-5 on random data; tests hold 5e-5
//    (MXFP4/Q8_0) and 1e-4 (BF16). Why split: with one rounding (set_split_activations(false))
//    it is about 2e-4 (FP16) and 1.5e-3 (BF16) per matmul, and over the forward pass that moves
//    the routing: on the ci scale only 47 % of routing decisions matched the CPU's (96 % with the
//    BF16 dense weights exact), where issue #14 asks >= 99.5 %; split, all of them match
//    (measured with the rounding emulated on the CPU, tests/test_emulated_gpu_numerics.cpp);
//  - activations must lie inside the FP16 range (|x| < 65504) on the MXFP4/Q8_0 paths (the
//    engine's matmul inputs are normed activations, attention outputs and clamped SwiGLU
//    outputs);
//  - deterministic: the same inputs on the same GPU give bit-identical outputs (the split count
//    depends on the GPU's SM count and on the number of tokens in the call, never on timing).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/matmul_plan.h"
#include "cpu/ops.h"
#include "cuda/ops.cuh"

namespace bg::cuda {

// Scratch the quantized matmuls need, allocated once (calls allocate nothing), exactly
// bg::quant_workspace_bytes(max_cols, max_ff) bytes:
//  - the converted activations of one chunk: [64][max_cols] FP16/BF16;
//  - the expert FFN's hidden h = SwiGLU(gate, up): [64][max_ff] FP16/BF16;
//  - the split-K partial sums: kQuantPartialFloats FP32, and kQuantCounters row-tile counters,
//    zero between calls (each call leaves them zero again).
// One workspace serves one stream at a time (calls on one stream are ordered; calls on
// different streams need their own workspaces).
class QuantMatmulWorkspace {
public:
    // max_cols: the widest matrix input (n_embd, or n_ff for down), max_ff: the widest expert
    // FFN (0: no expert FFN). On the current device; aborts when memory runs out.
    QuantMatmulWorkspace(int64_t max_cols, int64_t max_ff);
    ~QuantMatmulWorkspace();
    QuantMatmulWorkspace(const QuantMatmulWorkspace&) = delete;
    QuantMatmulWorkspace& operator=(const QuantMatmulWorkspace&) = delete;

    static constexpr int64_t kChunk = kQuantChunk;  // tokens per kernel pass

    int64_t max_cols() const { return max_cols_; }
    int64_t max_ff() const { return max_ff_; }
    int sm_count() const { return sm_count_; }
    uint64_t bytes() const { return bytes_; }

    // Split-K override for benchmarks and tests: 0 = the heuristic (default), n > 0 = n splits
    // (clamped to the number of K chunks, the partial-sum capacity and the counters).
    void force_split(int n) { force_split_ = n; }

    // MXFP4 decode: by bit placement (3 instructions per pair of weights; exact, but code 0.5
    // becomes an FP16 subnormal, so the constructor first checks with one MMA that this GPU's
    // tensor cores keep FP16 subnormals) or through a byte_perm table (about 8; no subnormals).
    // Both are exact; the faster is the default wherever the check passed.
    bool fp16_subnormals_in_mma() const { return fp16_subnormals_; }
    bool mxfp4_bit_decode() const { return mx_bits_; }
    void set_mxfp4_bit_decode(bool on) { mx_bits_ = on && fp16_subnormals_; }

    // Split activations (the default): each activation x goes in as hi = round(x) and
    // lo = round(x - hi), two columns of the MMA, summed in FP32, so the activation's rounding
    // error drops from 2^-11 (FP16) / 2^-8 (BF16) to about 2^-22 / 2^-16 relative; a pass then
    // takes 32 tokens (64 columns) instead of 64. Off: one rounding (hi only), for benchmarks.
    bool split_activations() const { return split_x_; }
    void set_split_activations(bool on) { split_x_ = on; }

    // The tile shapes of a GPU with sm_86's 99 KB of opt-in shared memory per block (the RTX
    // 3060: two stages for the 256-row tiles), on any GPU: how that path is tested on an sm_90.
    bool small_shared_memory() const { return small_smem_; }
    void set_small_shared_memory(bool on) { small_smem_ = on; }

    // Alternative tile shapes for up to 32 activation columns (16 tokens split), for
    // benchmarks (bench_gpu's `tiles` argument; bench/KERNELS.md) and their tests: 0 the
    // default choice; 1 four warps with narrower K chunks or 128-row tiles; 2 eight warps of one
    // 16-row tile each; 3 two stages; 4 the choice before the H200 measurements of 2026-12-02
    // (128 x 16 tiles of 4 warps at <= 16 columns, 4 stages at <= 32 whatever the rows).
    // Results are the same bits whatever the variant only where the split-K count is forced.
    static constexpr int kTileVariants = 5;
    int tile_variant() const { return tile_variant_; }
    void set_tile_variant(int v) { tile_variant_ = v >= 0 && v < kTileVariants ? v : 0; }

    // Internals for the launchers.
    void* xq() const { return xq_; }
    void* hq() const { return hq_; }
    float* partials() const { return part_; }
    int* counters() const { return counters_; }
    int forced_split() const { return force_split_; }

private:
    int64_t max_cols_ = 0, max_ff_ = 0;
    int sm_count_ = 0;
    void* xq_ = nullptr;     // [64][max_cols] half or bfloat16
    void* hq_ = nullptr;     // [64][max_ff] half or bfloat16
    float* part_ = nullptr;  // [kQuantPartialFloats]
    int* counters_ = nullptr;  // [kQuantCounters]
    uint64_t bytes_ = 0;
    int force_split_ = 0;
    bool fp16_subnormals_ = false;
    bool mx_bits_ = false;
    bool split_x_ = true;
    bool small_smem_ = false;
    int tile_variant_ = 0;
};

// y[t*ldy + r] = sum_i W[r][i] * x[t*ldx + i] for t < n_tok, r < W.rows (bg::cuda::matmul's
// contract, with the numerical contract above). W: MXFP4, Q8_0 or BF16 (BF16 rows 2-byte
// aligned), any row_stride >= row bytes; W.data 16-byte aligned for the fast path (any other
// address works, through byte copies). W.cols <= ws.max_cols(). y must not overlap x.
void quant_matmul(QuantMatmulWorkspace& ws, const DeviceMat& W, const float* x, int64_t ldx, int64_t n_tok,
                  float* y, int64_t ldy, cudaStream_t stream);

// True for the weight types quant_matmul takes.
bool quant_matmul_supports(GgmlType t);

// One routed (or shared) expert on its gathered tokens, fused:
//   for j < n_tok, t = rows ? rows[j] : j, o = out_rows ? out_rows[j] : j:
//     g = gate . x[t],  u = up . x[t]           (one pass over gate and up together)
//     h = cpu::swiglu(g, u, limit, form)        (applied where the gate/up sums complete)
//     y[o*ldy + e] = (down . h)[e]              (stored: no routing weight, no accumulation)
// gate, up: n_ff rows of n_embd; down: n_embd rows of n_ff; all three one weight type (MXFP4,
// Q8_0 or BF16). x: [..][ldx] FP32 device; rows, out_rows: [n_tok] int32 device or null
// (identity; out_rows distinct); y: FP32 device. h goes into the down projection split into
// hi + lo FP16 (BF16 for BF16 weights) like any activation. Bit-identical run to run, like quant_matmul.
void expert_ffn(QuantMatmulWorkspace& ws, const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows,
                int64_t n_tok, float limit, bg::SwigluClamp form, float* y, int64_t ldy, const int32_t* out_rows,
                cudaStream_t stream);

}  // namespace bg::cuda
