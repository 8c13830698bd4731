// Integer tensor-core matmuls for quantized weights (`--matmul fast`, the default; issue 22), in
// the manner of llama.cpp's mmq: activations quantised once per call to int8 blocks of 32 with a
// float scale (tensor/qtypes/int8_act.h), weights unpacked to int8 in registers by their type's
// traits (tensor/qtypes/*.h: MXFP4's doubled E2M1 codes through a byte_perm table, Q8_0 as
// stored), mma.sync m16n8k32 s8.s8 -> s32 (sm_80+: the RTX 3060's sm_86 and the H200's sm_90).
// One MMA covers one 32-weight block of 16 rows x 8 tokens, so its int32 result is the exact
// block dot product; the block partial (d_w * d_x) * isum is added to an FP32 accumulator.
//
// Kernels (engine/cuda/int8_matmul_kernel.cuh, instantiated per type in int8_matmul_<type>.cu):
//  - a CTA owns 64 weight rows (4 warps x 16) of one or two matrices (gate and up together) x
//    all tokens of a <= 64-token pass (1-8 MMA n-tiles, so 1 token costs one n-tile) x a range of
//    K blocks (split-K sized so the grid fills the GPU); weights and activations go through
//    shared memory in a cp.async pipeline (3 steps of 4 K blocks in flight), the activations in
//    MMA fragment order (each lane's B fragment one 8-byte load);
//  - each split writes its FP32 partials; the last CTA of a row tile adds them in split order
//    (so results are bit-identical run to run) and runs the epilogue: store or scatter to output
//    rows, or, for gate/up, SwiGLU and the int8 quantisation of h for the down projection.
//  A matmul is two launches (quantise x, MMA); an expert three (quantise x, gate/up, down).
//  - passes of 1-2 tokens (decode) go to a GEMV kernel instead (int8_gemv_kernel.cuh): warps own
//    whole rows and read the weights straight from global memory, dp4a on the same int8 words, no
//    split-K; the same launches, the same arithmetic per block.
//
// Numerical contract: every block's integer sum is exact; the result differs from the float64
// sum of the same block partials only by FP32 summation (tests/test_gpu_int8_matmul.cpp holds
// the error to that); the CPU (engine/cpu/int8_matmul.cpp) computes the same partials and sums
// them in another order. Against the precise path (quant_matmul.cuh) the difference is the int8
// rounding of the activations, about 0.4 % of each block's largest value.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/matmul_plan.h"
#include "backend/types.h"
#include "cuda/ops.cuh"

namespace bg::cuda {

// Device memory of the integer path, allocated once: exactly bg::int8_workspace_bytes(max_cols,
// max_ff). One workspace serves one stream at a time.
//  - x as int8 in fragment order [max_cols/32][8 tiles][32 lanes][8 bytes], its block scales
//    [max_cols/32][64 tokens] and its half-block sums times the scale [max_cols/32][64 tokens]
//    (float2: the min term of the K-quants that have one);
//  - the expert FFN's h, the same way for max_ff;
//  - split-K partial sums: kInt8PartialFloats FP32, and kInt8Counters row-tile counters (zero
//    between calls: each call leaves them zero again).
class Int8Workspace {
public:
    Int8Workspace(int64_t max_cols, int64_t max_ff);
    ~Int8Workspace();
    Int8Workspace(const Int8Workspace&) = delete;
    Int8Workspace& operator=(const Int8Workspace&) = delete;

    int64_t max_cols() const { return max_cols_; }
    int64_t max_ff() const { return max_ff_; }
    int sm_count() const { return sm_count_; }
    uint64_t bytes() const { return bytes_; }
    // Split-K override for tests and benchmarks: 0 = the heuristic, n > 0 = n splits.
    void force_split(int n) { force_split_ = n; }
    int forced_split() const { return force_split_; }
    // Passes of up to n tokens (0..kGemvMaxTokens) go through the GEMV kernel, larger ones
    // through the MMA kernel. The H200 measured one token at 31 us for a full-width MXFP4 expert
    // against the MMA kernel's 40, and eight (a GEMV that held only one token's activations in
    // registers) at 136 us against 42: the GEMV is built for two tokens at most, its default.
    // Tests run every pass it takes on both kernels.
    static constexpr int kGemvMaxTokens = 2;
    static constexpr int kGemvDefaultTokens = kGemvMaxTokens;
    void set_gemv_tokens(int n);
    int gemv_tokens() const { return gemv_tokens_; }
    // The GEMV's grid: warps per row (1-8) chosen so the grid holds about this many warps an SM.
    // Benchmarks vary it (bench_gpu BM_GemvWarpsPerSm); the engine keeps the default.
    static constexpr int kGemvDefaultWarpsPerSm = 32;
    void set_gemv_warps_per_sm(int n);
    int gemv_warps_per_sm() const { return gemv_warps_per_sm_; }

    int8_t* xq() const { return xq_; }
    float* xd() const { return xd_; }
    float2* xs() const { return xs_; }
    int8_t* hq() const { return hq_; }
    float* hd() const { return hd_; }
    float2* hs() const { return hs_; }
    float* partials() const { return part_; }
    int* counters() const { return counters_; }

private:
    int64_t max_cols_ = 0, max_ff_ = 0;
    int sm_count_ = 0;
    int force_split_ = 0;
    int gemv_tokens_ = kGemvDefaultTokens;
    int gemv_warps_per_sm_ = kGemvDefaultWarpsPerSm;
    int8_t* xq_ = nullptr;
    float* xd_ = nullptr;
    float2* xs_ = nullptr;
    int8_t* hq_ = nullptr;
    float* hd_ = nullptr;
    float2* hs_ = nullptr;
    float* part_ = nullptr;
    int* counters_ = nullptr;
    uint64_t bytes_ = 0;
};

// y[t*ldy + r] = sum_i W[r][i] * x[t*ldx + i] through int8 activations; W of a type
// qtypes::int8_path_takes accepts, cols a multiple of 32 and <= ws.max_cols(). y must not
// overlap x.
void int8_matmul(Int8Workspace& ws, const DeviceMat& W, const float* x, int64_t ldx, int64_t n_tok, float* y,
                 int64_t ldy, cudaStream_t stream);

// Ops::matmul_grouped through int8 activations: W's rows in `groups` equal groups, group g
// multiplying columns [g * W.cols, (g + 1) * W.cols) of x into columns [g * rows/groups, ...) of
// y. A GEMV pass (n_tok <= ws.gemv_tokens()) quantises x once and runs every group in one launch;
// larger passes run int8_matmul a group. Each group's y is int8_matmul's on its rows up to the order
// of the FP32 sums across a row's warps (the launch's rows set its warps a row).
void int8_matmul_grouped(Int8Workspace& ws, const DeviceMat& W, int64_t groups, const float* x, int64_t ldx,
                         int64_t n_tok, float* y, int64_t ldy, cudaStream_t stream);

// Ops::matmul_many through int8 activations: n matrices of one width times the same x, each into
// its own y. A GEMV pass quantises x once and runs the matrices of one type in one launch (up to
// eight); larger passes run int8_matmul a matrix. Each y is int8_matmul's up to the order of the
// FP32 sums across a row's warps.
void int8_matmul_many(Int8Workspace& ws, const DeviceMat* W, int n, const float* x, int64_t ldx, int64_t n_tok,
                      float* const* y, const int64_t* ldy, cudaStream_t stream);

// cuda::expert_ffn's contract (quant_matmul.cuh) through int8 activations: x (gathered by rows)
// and h = SwiGLU(gate . x, up . x) are each quantised to int8 blocks once. Gate, up and down may
// have different int8 types.
void int8_expert_ffn(Int8Workspace& ws, const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows,
                     int64_t n_tok, float limit, bg::SwigluClamp form, float* y, int64_t ldy, const int32_t* out_rows,
                     cudaStream_t stream);

// int8_expert_ffn for each of n calls (at most kInt8ExpertBatchCalls), each expert's y exactly
// what int8_expert_ffn gives it alone. Experts of one shape and types whose passes go through the
// GEMV with the same token count run together, up to eight: one quantisation of their
// activations side by side, one gate/up launch (a segment each, h of all of them in the
// workspace's partials) and one down launch, each segment with the warps a row it would have
// alone (so the FP32 sums are in the same order). The others run one at a time.
constexpr int64_t kInt8ExpertBatchCalls = 64;
void int8_expert_ffn_batch(Int8Workspace& ws, const bg::ExpertCall* calls, int64_t n, const float* x, int64_t ldx,
                           float limit, bg::SwigluClamp form, float* y, int64_t ldy, cudaStream_t stream);

// For tests: the int8 activations and scales the kernels see for x (n_tok <= 64 rows of cols),
// downloaded in plain order: q [n_tok][cols], d [n_tok][cols/32] (host memory).
void int8_quantize_for_test(Int8Workspace& ws, const float* x, int64_t ldx, int64_t n_tok, int64_t cols, int8_t* q_host,
                            float* d_host, cudaStream_t stream);

}  // namespace bg::cuda
