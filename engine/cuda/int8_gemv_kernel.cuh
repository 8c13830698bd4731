// The integer path's kernel for passes of 1-8 tokens (decode, small expert groups): a GEMV in
// the manner of llama.cpp's mmvq, a template over the weight type's traits (tensor/qtypes/*.h),
// the token count rounded up (1, 2, 4, 8) and the number of matrices (1, or 2 for gate and up
// together). Included by int8_matmul_<type>.cu beside the MMA kernel, one file a type.
//
// Why a second kernel: at one token the MMA kernel is bound by its latency chain (a CTA streams
// 6-11 GB/s through its shared-memory pipeline; split-K partials and their sums; bench/KERNELS.md)
// and runs an expert at 8-9x its memory floor. Here there is no shared-memory staging and no
// split-K: each warp owns whole rows, reads the weights straight from global memory (the traits'
// load_a with a global loader), and keeps many independent loads in flight.
//
// Mapping: a CTA of 8 warps; `wpr` warps (1, 2, 4 or 8, chosen by the launcher so the grid fills
// the GPU) share one row (of each matrix), so a CTA owns 8 / wpr rows. Within a warp, quad q
// (lanes 4q..4q+3) takes one 32-weight chunk at a time, lane t of the quad the A-fragment words
// of load_a: weights 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi). The activations are the quantiser's
// fragment order for one n-tile (int8_matmul.cu, quantize_x): token j's chunk c is 32 bytes at
// c*256 + j*32, lane t's 8 of them at +t*8 (lo word, hi word), matching load_a's words. Per
// (chunk, token) the quad's dp4a sums are added across the quad (integer, exact), so each
// chunk's partial is computed from its exact integer dot product as in the MMA kernel; the
// partials are summed in FP32 per lane, then across quads and warps in a fixed order (results are
// bit-identical run to run).
// Epilogues: store (or scatter to output rows); for gate/up, SwiGLU into an FP32 h scratch, and
// the last warp to finish a 32-row block of h (a self-cleaning counter per block) quantises that
// block for the down projection, in the same fragment order.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/check.cuh"
#include "cuda/int8_matmul_kernel.cuh"
#include "cuda/swiglu_dev.cuh"

namespace bg::cuda::int8mm {

// Tokens of a GEMV pass at most: their activations are held in registers across the loads.
// More tokens ran at 136 us for eight against the MMA kernel's 42 (H200, full-width MXFP4
// expert), so they go to the MMA kernel, and the GEMV is built for one and two tokens alone.
constexpr int kGemvMaxTok = 2;
constexpr int kGemvWarps = 8;   // warps of a CTA
constexpr int kGemvUnroll = 4;  // chunks a quad loads before it computes

struct GemvParams {
    const uint8_t* w[2];   // the matrix (gate), and up when two
    uint64_t stride[2];    // bytes between rows
    int rows;              // weight rows (outputs), the same for both matrices
    int nkb;               // K / 32
    int m;                 // tokens (<= kGemvMaxTok)
    int wpr;               // warps per row: 1, 2, 4 or 8
    const int8_t* xq;      // fragment order for one n-tile: [nkb][32 lanes][8 bytes]
    const float* xd;       // [nkb][8] block scales
    const float2* xs;      // [nkb][8] scale * sum of q per 16-half (types with a min)
    int epilogue;          // Epilogue (int8_matmul_kernel.cuh)
    // kStore: y[(out_rows ? out_rows[j] : j) * ldy + r]
    float* y;
    int64_t ldy;
    const int32_t* out_rows;
    // kGateUpQuant: h[j * rows + r] = swiglu(gate, up) in FP32, then per 32-row block -> hq, hd, hs
    // (fragment order, one n-tile) once counters[block] reaches 32.
    float limit;
    int llama;
    float* h;
    int* counters;
    int8_t* hq;
    float* hd;
    float2* hs;
};

// Unaligned 32-bit reads of global memory through two aligned words (always both, so the lanes
// of a warp do not diverge on alignment). The second word shares its 4-byte granule with the
// read's last byte, so it never leaves the allocation.
struct GlobalLoader {
    __device__ __forceinline__ uint32_t u32(const uint8_t* p) const {
        const uintptr_t a = reinterpret_cast<uintptr_t>(p);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
        return __funnelshift_r(__ldg(w), __ldg(w + 1), static_cast<uint32_t>(a & 3) * 8);
    }
    __device__ __forceinline__ uint32_t u8(const uint8_t* p) const { return __ldg(p); }
};

template <class T, int NTOK, int MATS>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(GemvParams p) {
    static_assert(T::kSubK == 16 || T::kSubK == 32, "a scale covers 16 or 32 weights");
    __shared__ float red[kGemvWarps][MATS * NTOK];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, q = lane >> 2, t = lane & 3;
    const int wpr = p.wpr, grp = warp % wpr;
    const int r = blockIdx.x * (kGemvWarps / wpr) + warp / wpr;
    const bool active = r < p.rows;  // warp-uniform

    float acc[MATS][NTOK];
#pragma unroll
    for (int m = 0; m < MATS; ++m)
#pragma unroll
        for (int j = 0; j < NTOK; ++j) acc[m][j] = 0.0f;

    if (active) {
        const uint8_t* row[MATS];
#pragma unroll
        for (int m = 0; m < MATS; ++m) row[m] = p.w[m] + static_cast<uint64_t>(r) * p.stride[m];
        const GlobalLoader ld;
        const int stride = 8 * wpr;
        const unsigned quad = 0xFu << (4 * q);
        // Activation words of chunk c, token j (lane t's 8 bytes), its scale and half sums.
        auto act = [&](int c, int j, int2& xb, float& dx, float2& s) {
            xb = __ldg(reinterpret_cast<const int2*>(p.xq + static_cast<int64_t>(c) * 256 + j * 32 + t * 8));
            dx = __ldg(p.xd + static_cast<int64_t>(c) * kTileTok + j);
            if constexpr (T::kHasMin) s = __ldg(p.xs + static_cast<int64_t>(c) * kTileTok + j);
            else s = make_float2(0.0f, 0.0f);
        };
        static_assert(NTOK <= kGemvMaxTok, "activations held across the loads");
        for (int c0 = grp * 8 + q; c0 < p.nkb; c0 += kGemvUnroll * stride) {
            // Every load of kGemvUnroll chunks first, with no branch between them, so their reads
            // are in flight together: a chunk past the row's end loads the row's last chunk again
            // and is not added.
            int lo[kGemvUnroll][MATS], hi[kGemvUnroll][MATS];
            float d[kGemvUnroll][MATS][2], mn[kGemvUnroll][MATS][2];
            int2 xb[kGemvUnroll][NTOK];
            float dx[kGemvUnroll][NTOK];
            float2 xs[kGemvUnroll][NTOK];
#pragma unroll
            for (int u = 0; u < kGemvUnroll; ++u) {
                const int c = min(c0 + u * stride, p.nkb - 1);
#pragma unroll
                for (int m = 0; m < MATS; ++m) T::load_a(row[m], c, t, ld, lo[u][m], hi[u][m], d[u][m], mn[u][m]);
#pragma unroll
                for (int j = 0; j < NTOK; ++j) act(c, j, xb[u][j], dx[u][j], xs[u][j]);
            }
#pragma unroll
            for (int u = 0; u < kGemvUnroll; ++u) {
                const int c = c0 + u * stride;
                if (c >= p.nkb) break;  // quad-uniform: the shuffles below are the quad's alone
#pragma unroll
                for (int j = 0; j < NTOK; ++j) {
                    if (j >= p.m) break;
                    const int2 b = xb[u][j];
                    const float dxj = dx[u][j];
                    const float2 s = xs[u][j];
#pragma unroll
                    for (int m = 0; m < MATS; ++m) {
                        if constexpr (T::kSubK == 32) {
                            int is = __dp4a(hi[u][m], b.y, __dp4a(lo[u][m], b.x, 0));
                            is += __shfl_xor_sync(quad, is, 1);
                            is += __shfl_xor_sync(quad, is, 2);
                            acc[m][j] = fmaf(static_cast<float>(is), d[u][m][0] * dxj, acc[m][j]);
                        } else {
                            int il = __dp4a(lo[u][m], b.x, 0), ih = __dp4a(hi[u][m], b.y, 0);
                            il += __shfl_xor_sync(quad, il, 1);
                            ih += __shfl_xor_sync(quad, ih, 1);
                            il += __shfl_xor_sync(quad, il, 2);
                            ih += __shfl_xor_sync(quad, ih, 2);
                            acc[m][j] = fmaf(static_cast<float>(il), d[u][m][0] * dxj,
                                             fmaf(static_cast<float>(ih), d[u][m][1] * dxj, acc[m][j]));
                        }
                        if constexpr (T::kHasMin) acc[m][j] -= fmaf(mn[u][m][0], s.x, mn[u][m][1] * s.y);
                    }
                }
            }
        }
    }
    // The quads of a warp hold the same sum in each of their 4 lanes: add the 8 quads.
#pragma unroll
    for (int m = 0; m < MATS; ++m)
#pragma unroll
        for (int j = 0; j < NTOK; ++j)
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) acc[m][j] += __shfl_xor_sync(0xffffffffu, acc[m][j], o);
    if (wpr > 1) {  // the warps of a row add theirs in warp order
        if (lane == 0)
#pragma unroll
            for (int m = 0; m < MATS; ++m)
#pragma unroll
                for (int j = 0; j < NTOK; ++j) red[warp][m * NTOK + j] = acc[m][j];
        __syncthreads();
        if (grp != 0) return;
#pragma unroll
        for (int m = 0; m < MATS; ++m)
#pragma unroll
            for (int j = 0; j < NTOK; ++j) {
                float v = red[warp][m * NTOK + j];
                for (int g = 1; g < wpr; ++g) v += red[warp + g][m * NTOK + j];
                acc[m][j] = v;
            }
    }
    if (!active) return;
    if (p.epilogue == kStore) {
#pragma unroll
        for (int j = 0; j < NTOK; ++j)
            if (j < p.m && lane == j) {
                const int64_t o = p.out_rows ? p.out_rows[j] : j;
                p.y[o * p.ldy + r] = acc[0][j];
            }
        return;
    }
    // Gate/up: h in FP32, then the block's counter; the 32nd row of a block quantises it.
#pragma unroll
    for (int j = 0; j < NTOK; ++j)
        if (j < p.m && lane == j) p.h[static_cast<int64_t>(j) * p.rows + r] = swiglu_dev(acc[0][j], acc[MATS - 1][j], p.limit, p.llama);
    __threadfence();
    __syncwarp();
    const int blk = r / 32;
    int last = 0;
    if (lane == 0) last = atomicAdd(&p.counters[blk], 1) == 31;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __threadfence();
    for (int j = 0; j < p.m; ++j) {
        const float v = __ldcg(p.h + static_cast<int64_t>(j) * p.rows + blk * 32 + lane);
        quantize_lane(v, blk, j, 1, p.hq, p.hd, p.hs);
    }
    if (lane == 0) p.counters[blk] = 0;
}

// Launches gemv_kernel<T, ntok, mats> (ntok 1, 2, 4 or 8; mats 1 or 2); defined per type in
// int8_matmul_<type>.cu.
template <class T>
void launch_gemv(const GemvParams& p, int ntok, int mats, cudaStream_t stream);

template <class T, int NTOK>
void launch_gemv_nt(const GemvParams& p, int mats, cudaStream_t stream) {
    const int rows_per_cta = kGemvWarps / p.wpr;
    const dim3 grid(static_cast<unsigned>((p.rows + rows_per_cta - 1) / rows_per_cta));
    if (mats == 2) gemv_kernel<T, NTOK, 2><<<grid, kGemvWarps * 32, 0, stream>>>(p);
    else gemv_kernel<T, NTOK, 1><<<grid, kGemvWarps * 32, 0, stream>>>(p);
}
template <class T>
void launch_gemv_impl(const GemvParams& p, int ntok, int mats, cudaStream_t stream) {
    switch (ntok) {
        case 1: launch_gemv_nt<T, 1>(p, mats, stream); break;
        default: launch_gemv_nt<T, 2>(p, mats, stream); break;
    }
}

}  // namespace bg::cuda::int8mm
