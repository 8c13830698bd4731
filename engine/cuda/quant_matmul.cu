// Fused quantized matmul kernels (API, contract and tile shapes: quant_matmul.cuh; design,
// floors and predictions: bench/KERNELS.md).
//
// One kernel template, qmm_kernel<weight type, warps, m-tiles per warp, n-tiles, K chunk,
// stages>. A CTA computes BM = warps*MT*16 weight rows for BN = NT*8 token columns over one
// split of K:
//   - each stage holds, for KCB 32-blocks of K, the raw bytes of the CTA's BM weight rows
//     (copied with 16-byte cp.async.cg from 16-byte aligned granules; a row's data starts at
//     its address mod 16 inside its smem slot, so rows of any stride and alignment copy with
//     whole granules) and the [BN][KCB*32] FP16/BF16 activations (converted once per chunk of
//     64 tokens by convert_x_kernel);
//   - each warp owns MT 16-row MMA tiles; per 32-block it reads its rows' bytes from shared
//     memory and builds the m16n8k16 A fragments in registers: MXFP4 nibbles -> E2M1 * 2^-14
//     by bit placement (or doubled E2M1 integers through a byte_perm table), one 32-bit word
//     of codes per lane and block thanks to the activations' column order (mx_column); Q8_0
//     int8 -> FP16 through the 0x6400 magic, BF16 as stored; B fragments come from ldmatrix;
//     the block's two k16 MMAs make a partial sum which is scaled by the block's FP32 scale
//     into the running sum (BF16 accumulates directly);
//   - split-K: every CTA of a split stores its FP32 partial tile ([split][token][row] in the
//     workspace), then counts itself in with an atomic on its row tile's counter; the last CTA
//     to arrive reads the tile's partials back in split order 0, 1, .. (so the sum's order is
//     fixed whichever CTA arrives last: bit-identical results run to run), leaves the counter
//     zero and runs the epilogue on the sums;
//   - epilogues: store, to a per-token output row (the expert's down projection writes each
//     token's own row); gate/up (each 16-row tile = 8 gate rows over the same 8 up rows, so a
//     thread holds gate and up of the same feature and token and applies the SwiGLU in
//     registers).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "cuda/check.cuh"
#include "cuda/sm_limit.cuh"
#include "cuda/quant_matmul.cuh"
#include "cuda/quant_matmul_kernel.cuh"
#include "cuda/swiglu_dev.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

using namespace qmm;

// One m16n8k16 FP16 MMA of A = 2^-15 (an FP16 subnormal) by B = 1: every output is 16 * 2^-15
// = 2^-11 where the tensor cores keep FP16 subnormal inputs (they do on the GPUs we know; this
// is checked on the device rather than assumed).
__global__ void fp16_subnormal_probe(float* out) {
    const uint32_t a[4] = {0x02000200u, 0x02000200u, 0x02000200u, 0x02000200u};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma16816<__half>(d, a, 0x3C003C00u, 0x3C003C00u);
    out[threadIdx.x] = (d[0] == 0x1p-11f && d[1] == 0x1p-11f && d[2] == 0x1p-11f && d[3] == 0x1p-11f) ? 1.0f : 0.0f;
}

// out[t][k] = x[rows ? rows[t] : t][k] rounded to Act (hi); with lo_off, also
// out[lo_off + t][k] = x - hi rounded to Act (lo). Rows ldo apart; with mx, column mx_column(k)
// instead of k (the MXFP4 kernels' order). Grid (k/128, m).
template <typename Act>
__global__ void convert_x_kernel(const float* x, int64_t ldx, const int32_t* rows, int k_total, Act* out, int ldo,
                                 int lo_off, int mx) {
    grid_dependency_begin();
    const int t = blockIdx.y;
    const int k = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= k_total) return;  // k_total is a multiple of 32
    const float* src = x + static_cast<int64_t>(rows ? rows[t] : t) * ldx + k;
    Act* dst = out + static_cast<int64_t>(t) * ldo;
    Act* dlo = out + static_cast<int64_t>(lo_off + t) * ldo;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float v = src[i];
        const Act hi = to_act<Act>(v);
        const int col = mx ? mx_column(k + i) : k + i;
        dst[col] = hi;
        if (lo_off) dlo[col] = to_act<Act>(v - act_float(hi));
    }
}

void launch_by_type(GgmlType t, const KParams& p, int mma_rows, const QuantMatmulWorkspace& ws, cudaStream_t stream) {
    switch (t) {
        case GgmlType::MXFP4: launch_qmm<kMx>(p, mma_rows, ws, stream); break;
        case GgmlType::Q8_0: launch_qmm<kQ8>(p, mma_rows, ws, stream); break;
        case GgmlType::BF16: launch_qmm<kBf>(p, mma_rows, ws, stream); break;
        default: BG_CHECK_MSG(false, "quant_matmul: unsupported weight type");
    }
}

void convert_x(GgmlType t, const float* x, int64_t ldx, const int32_t* rows, int m, int k, void* out, int ldo,
               int lo_off, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((k / 4 + 127) / 128), static_cast<unsigned>(m));
    if (t == GgmlType::BF16) {
        BG_CUDA_CHECK(launch_kernel(convert_x_kernel<__nv_bfloat16>, grid, 128, 0, stream, x, ldx, rows, k,
                                    static_cast<__nv_bfloat16*>(out), ldo, lo_off, 0));
    } else {
        BG_CUDA_CHECK(launch_kernel(convert_x_kernel<__half>, grid, 128, 0, stream, x, ldx, rows, k,
                                    static_cast<__half*>(out), ldo, lo_off, t == GgmlType::MXFP4 ? 1 : 0));
    }
    BG_CUDA_CHECK_LAUNCH();
}

void check_weights(const DeviceMat& W, int64_t max_cols) {
    BG_CHECK_MSG(quant_matmul_supports(W.type), "quant_matmul: weight type must be mxfp4, q8_0 or bf16");
    BG_CHECK(W.cols > 0 && W.cols % 32 == 0 && W.rows >= 0 && W.rows <= INT_MAX / 2);
    BG_CHECK_MSG(W.cols <= max_cols, "quant_matmul: matrix wider than the workspace");
    BG_CHECK(W.row_stride >= row_bytes(W.type, W.cols));
    BG_CHECK(W.data != nullptr || W.rows == 0);
    if (W.type == GgmlType::BF16)
        BG_CHECK_MSG(W.row_stride % 2 == 0 && reinterpret_cast<uintptr_t>(W.data) % 2 == 0,
                     "quant_matmul: bf16 rows must be 2-byte aligned");
}

const uint8_t* mat_end(const DeviceMat& W) {
    return W.rows == 0 ? W.data : W.data + static_cast<uint64_t>(W.rows - 1) * W.row_stride + row_bytes(W.type, W.cols);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// The aligned path addresses a matrix with 31-bit offsets (KParams::size0).
constexpr uint64_t kAlignedMaxBytes = 1ull << 31;
uint32_t mat_bytes(const DeviceMat& W) {
    const uint64_t n = static_cast<uint64_t>(mat_end(W) - W.data);
    return n < kAlignedMaxBytes ? static_cast<uint32_t>(n) : 0;
}
bool cp_async_path(const DeviceMat& W) { return aligned16(W.data) && (W.rows == 0 || mat_bytes(W) > 0); }

// Split activations: m tokens take 2m columns, hi rows 0..m-1 and lo rows from half the tile's
// width on (the tile launch_qmm picks for lo_off + m columns is the one picked here for 2m).
int lo_off_for(int m) {
    const int cols = 2 * m;
    return (cols <= 8 ? 8 : cols <= 16 ? 16 : cols <= 32 ? 32 : 64) / 2;
}
// Tokens of one kernel pass, and its columns.
int pass_tokens(const QuantMatmulWorkspace& ws) {
    return static_cast<int>(ws.split_activations() ? QuantMatmulWorkspace::kChunk / 2 : QuantMatmulWorkspace::kChunk);
}
void set_columns(KParams& q, int m, bool split) {
    q.m_hi = m;
    q.lo_off = split ? lo_off_for(m) : 0;
    q.m = split ? q.lo_off + m : m;
}

}  // namespace

bool quant_matmul_supports(GgmlType t) {
    return t == GgmlType::MXFP4 || t == GgmlType::Q8_0 || t == GgmlType::BF16;
}

QuantMatmulWorkspace::QuantMatmulWorkspace(int64_t max_cols, int64_t max_ff) : max_cols_(max_cols), max_ff_(max_ff) {
    BG_CHECK(max_cols > 0 && max_cols % 32 == 0 && max_ff >= 0 && max_ff % 32 == 0);
    sm_count_ = current_sm_count();  // the green context's SMs under --sm-limit
    {
        float* d = nullptr;
        BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), 32 * sizeof(float)));
        fp16_subnormal_probe<<<1, 32>>>(d);
        BG_CUDA_CHECK_LAUNCH();
        float h[32];
        BG_CUDA_CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
        BG_CUDA_CHECK(cudaFree(d));
        mx_bits_ = fp16_subnormals_ = std::all_of(h, h + 32, [](float v) { return v == 1.0f; });
    }
    // The allocations bg::quant_workspace_bytes counts, and nothing else.
    const uint64_t xq_bytes = static_cast<uint64_t>(kChunk) * max_cols * 2;
    BG_CUDA_CHECK(cudaMalloc(&xq_, xq_bytes));
    bytes_ = xq_bytes;
    if (max_ff > 0) {
        const uint64_t hq_bytes = static_cast<uint64_t>(kChunk) * max_ff * 2;
        BG_CUDA_CHECK(cudaMalloc(&hq_, hq_bytes));
        bytes_ += hq_bytes;
    }
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&part_), kQuantPartialFloats * sizeof(float)));
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&counters_), kQuantCounters * sizeof(int)));
    BG_CUDA_CHECK(cudaMemset(counters_, 0, kQuantCounters * sizeof(int)));
    bytes_ += kQuantPartialFloats * sizeof(float) + kQuantCounters * sizeof(int);
    BG_CHECK(bytes_ == quant_workspace_bytes(max_cols, max_ff));
}

QuantMatmulWorkspace::~QuantMatmulWorkspace() {
    if (xq_) cudaFree(xq_);
    if (hq_) cudaFree(hq_);
    if (part_) cudaFree(part_);
    if (counters_) cudaFree(counters_);
}

void quant_matmul(QuantMatmulWorkspace& ws, const DeviceMat& W, const float* x, int64_t ldx, int64_t n_tok, float* y,
                  int64_t ldy, cudaStream_t stream) {
    check_weights(W, ws.max_cols());
    BG_CHECK(n_tok <= 1 || (ldx >= W.cols && ldy >= W.rows));
    if (W.rows == 0 || n_tok <= 0) return;
    KParams p;
    p.w0 = W.data;
    p.stride0 = W.row_stride;
    p.rows = static_cast<int>(W.rows);
    p.nkb = static_cast<int>(W.cols / 32);
    p.aligned = cp_async_path(W);
    p.size0 = mat_bytes(W);
    p.even = p.aligned && W.row_stride % 2 == 0;
    p.mx_bits = W.type == GgmlType::MXFP4 && ws.mxfp4_bit_decode();
    p.xq = ws.xq();
    p.ldxq = static_cast<int>(W.cols);
    p.mode = kStore;
    p.ldy = n_tok == 1 ? std::max<int64_t>(ldy, W.rows) : ldy;  // one token: ldy is never stepped
    const int mma_rows = static_cast<int>((W.rows + 15) / 16 * 16);
    const int per_pass = pass_tokens(ws);
    for (int64_t j0 = 0; j0 < n_tok; j0 += per_pass) {
        const int m = static_cast<int>(std::min<int64_t>(per_pass, n_tok - j0));
        KParams q = p;
        set_columns(q, m, ws.split_activations());
        convert_x(W.type, x + j0 * ldx, ldx, nullptr, m, static_cast<int>(W.cols), ws.xq(), p.ldxq, q.lo_off, stream);
        q.y = y + j0 * ldy;
        launch_by_type(W.type, q, mma_rows, ws, stream);
    }
}

void expert_ffn(QuantMatmulWorkspace& ws, const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows,
                int64_t n_tok, float limit, bg::SwigluClamp form, float* y, int64_t ldy, const int32_t* out_rows,
                cudaStream_t stream) {
    const int64_t n_embd = e.gate.cols, n_ff = e.gate.rows;
    BG_CHECK_MSG(e.up.type == e.gate.type && e.down.type == e.gate.type, "expert_ffn: one weight type for all three");
    BG_CHECK_MSG(e.up.rows == n_ff && e.up.cols == n_embd && e.down.rows == n_embd && e.down.cols == n_ff,
                 "expert_ffn: gate/up are n_ff rows of n_embd, down n_embd rows of n_ff");
    BG_CHECK_MSG(n_ff > 0 && n_ff <= ws.max_ff(), "expert_ffn: n_ff larger than the workspace's max_ff");
    check_weights(e.gate, ws.max_cols());
    check_weights(e.up, ws.max_cols());
    check_weights(e.down, ws.max_cols());
    BG_CHECK(ldx >= n_embd || n_tok <= 1);
    BG_CHECK(ldy >= n_embd || (n_tok <= 1 && !out_rows));
    if (n_tok <= 0) return;

    KParams gu;
    gu.w0 = e.gate.data;
    gu.w1 = e.up.data;
    gu.stride0 = e.gate.row_stride;
    gu.stride1 = e.up.row_stride;
    gu.rows = static_cast<int>(n_ff);
    gu.nkb = static_cast<int>(n_embd / 32);
    gu.gateup = 1;
    gu.aligned = cp_async_path(e.gate) && cp_async_path(e.up);
    gu.size0 = mat_bytes(e.gate);
    gu.size1 = mat_bytes(e.up);
    gu.even = gu.aligned && e.gate.row_stride % 2 == 0 && e.up.row_stride % 2 == 0;
    gu.mx_bits = e.gate.type == GgmlType::MXFP4 && ws.mxfp4_bit_decode();
    gu.xq = ws.xq();
    gu.ldxq = static_cast<int>(n_embd);
    gu.mode = kGateUp;
    gu.hperm = e.down.type == GgmlType::MXFP4 ? 1 : 0;  // h is the down projection's activations
    gu.hq = ws.hq();
    gu.ldh = static_cast<int>(n_ff);
    gu.limit = limit;
    gu.llama = form == bg::SwigluClamp::kLlamaCpp ? 1 : 0;
    const int gu_rows = static_cast<int>((n_ff + 7) / 8 * 16);

    KParams dn;
    dn.w0 = e.down.data;
    dn.stride0 = e.down.row_stride;
    dn.rows = static_cast<int>(n_embd);
    dn.nkb = static_cast<int>(n_ff / 32);
    dn.aligned = cp_async_path(e.down);
    dn.size0 = mat_bytes(e.down);
    dn.even = dn.aligned && e.down.row_stride % 2 == 0;
    dn.mx_bits = e.down.type == GgmlType::MXFP4 && ws.mxfp4_bit_decode();
    dn.xq = ws.hq();
    dn.ldxq = static_cast<int>(n_ff);
    dn.mode = kStore;
    dn.ldy = std::max(ldy, n_embd);
    const int dn_rows = static_cast<int>((n_embd + 15) / 16 * 16);

    const int per_pass = pass_tokens(ws);
    for (int64_t j0 = 0; j0 < n_tok; j0 += per_pass) {
        const int m = static_cast<int>(std::min<int64_t>(per_pass, n_tok - j0));
        KParams a = gu;
        set_columns(a, m, ws.split_activations());
        if (rows) {
            convert_x(e.gate.type, x, ldx, rows + j0, m, static_cast<int>(n_embd), ws.xq(), gu.ldxq, a.lo_off, stream);
        } else {
            convert_x(e.gate.type, x + j0 * ldx, ldx, nullptr, m, static_cast<int>(n_embd), ws.xq(), gu.ldxq, a.lo_off,
                      stream);
        }
        launch_by_type(e.gate.type, a, gu_rows, ws, stream);
        KParams d = dn;
        set_columns(d, m, ws.split_activations());
        d.y = out_rows ? y : y + j0 * ldy;
        d.out_rows = out_rows ? out_rows + j0 : nullptr;
        launch_by_type(e.down.type, d, dn_rows, ws, stream);
    }
}

}  // namespace bg::cuda
