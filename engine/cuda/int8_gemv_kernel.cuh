// The integer path's kernel for passes of 1-2 tokens (decode, small expert groups): a GEMV in
// the manner of llama.cpp's mmvq, a template over the weight type's traits (tensor/qtypes/*.h),
// the token count (1 or 2) and the number of matrices (1, or 2 for gate and up together).
// Included by int8_matmul_<type>.cu beside the MMA kernel, one file a type.
//
// Why a second kernel: at one token the MMA kernel is bound by its latency chain (a CTA streams
// 6-11 GB/s through its shared-memory pipeline; split-K partials and their sums; bench/KERNELS.md)
// and runs an expert at 8-9x its memory floor. Here there is no split-K: each warp owns whole
// rows (or 1/wpr of one).
//
// Why a lane owns whole chunks: in the first versions the four lanes of a quad shared a chunk
// (each read two of its words and the quad added its dp4a sums by shuffles), so each lane decoded
// the same scale and did the same float math. Those versions ran the same at 16 to 64 warps an
// SM, and Nsight Compute (H200, 2026-12-04, the version with this file's shared-memory staging)
// showed the Q8_0 GEMV issuing in 72 % of its cycles with DRAM at 23 %: bound by instructions.
// A lane a chunk was 12-26 % faster on every shape measured (bench/KERNELS.md). Now:
//  - the CTA copies the pass's activations once into shared memory, compact ([chunk][token][32]
//    bytes, then the scales and half sums), with 16-byte copies;
//  - each warp streams its row in spans of kGemvSpanChunks chunks (whole blocks) with 16-byte
//    cp.async copies of the span's bytes, aligned down to 16, kGemvStages spans in flight;
//  - MXFP4 (traits with load_chunk_split) decodes a chunk as the magnitudes of its positive and
//    of its negative codes, a dp4a chain each (tensor/qtypes/mxfp4.h, split8), over activations
//    interleaved once a CTA to split8's order; the same exact integer sum as below;
//  - lane l takes chunk l of a span whole: the traits' load_chunk where a type has one (Q8_0's
//    34 bytes as nine or ten aligned words and a funnel shift a value word, the scale once; 41567b7
//    read it as four load_a calls of two unaligned words and the scale each), else load_a for
//    each of the four quad positions; eight dp4a, and one partial, with no shuffle.
//
// Mapping: a CTA of 8 warps; `wpr` warps (1, 2, 4 or 8, chosen by the launcher so the grid fills
// the GPU) share one row (of each matrix), taking its spans in turn, so a CTA owns 8 / wpr rows.
// A chunk's partial is computed from its exact integer dot product (the sum of its eight dp4a,
// or of each 16-half's four) as in the MMA kernel; the partials are summed in FP32 per lane in
// chunk order, then across lanes and warps in a fixed order (results are bit-identical run to
// run, and equal to the CPU's up to the order of those float sums).
// Epilogues: store (or scatter to output rows); for gate/up, SwiGLU into an FP32 h scratch, and
// the last warp to finish a 32-row block of h (a self-cleaning counter per block) quantises that
// block for the down projection, in the fragment order the activations come in.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include "cuda/check.cuh"
#include "cuda/int8_matmul_kernel.cuh"
#include "cuda/swiglu_dev.cuh"
#include "cuda/launch.cuh"

namespace bg::cuda::int8mm {

// Tokens of a GEMV pass at most: each lane's partial sums, one a token and matrix, stay in
// registers. Eight tokens ran at 136 us against the MMA kernel's 42 (H200, full-width MXFP4
// expert, the first version), so they go to the MMA kernel, and the GEMV is built for one and two
// tokens alone.
constexpr int kGemvMaxTok = 2;
constexpr int kGemvWarps = 8;        // warps of a CTA
constexpr int kGemvSpanChunks = 32;  // 32-weight chunks of a span: one a lane; whole super-blocks too
constexpr int kGemvStages = 2;       // spans of a warp in flight

constexpr int kGemvMaxSegs = 8;  // segments of one launch (GemvParams::seg)

struct GemvSeg {
    const uint8_t* w[2];        // the segment's matrix (gate), and its up for gate/up; row 0
    uint64_t stride[2];         // bytes between their rows
    float* y;                   // kStore: its output, y[(out_rows ? out_rows[j] : j) * ldy + row]
    int64_t ldy;
    const int32_t* out_rows;
    int x_chunk;                // its first activation chunk
};

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
    // Segments (n_seg 0: none, the matrices above): rows [seg_row0[s], seg_row0[s + 1]) are rows
    // of segment s's own matrices (their row 0 at seg_row0[s]) times the activations from chunk
    // seg[s].x_chunk; a CTA's rows lie in one segment. kStore stores each to its own y (several
    // matrices of one input as one launch: matmul_many; the groups of a grouped projection; the
    // down projections of several experts). kGateUpQuant keeps the launch's row numbering for h,
    // its counters and its quantised blocks, so segment s's h is chunks seg_row0[s] / 32 on (the
    // gate/up of several experts; each segment's rows a multiple of 32).
    int n_seg;
    int seg_row0[kGemvMaxSegs + 1];
    GemvSeg seg[kGemvMaxSegs];
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

// Blocks and bytes of one span of a row, and the shared-memory window that holds it: its bytes
// plus up to 15 of alignment, rounded up to whole 16-byte copies.
template <class T>
__host__ __device__ constexpr int gemv_span_blocks() { return kGemvSpanChunks / chunks_per_block<T>(); }
template <class T>
__host__ __device__ constexpr int gemv_window() { return (gemv_span_blocks<T>() * T::kBlockBytes + 15 + 15) / 16 * 16; }
// Shared memory of a CTA: the activations ([nkb][NTOK][32] int8, [nkb][NTOK] scales, and
// [nkb][NTOK] half sums for types with a min, each section 16-byte aligned), then each warp's
// kGemvStages x MATS span windows.
template <class T, int NTOK>
__host__ __device__ constexpr int64_t gemv_act_bytes(int nkb) {
    const int64_t q = int64_t{nkb} * NTOK * 32, d = (int64_t{nkb} * NTOK * 4 + 15) / 16 * 16;
    return q + d + (T::kHasMin ? (int64_t{nkb} * NTOK * 8 + 15) / 16 * 16 : 0);
}
template <class T, int NTOK, int MATS>
__host__ __device__ constexpr int64_t gemv_smem_bytes(int nkb) {
    return gemv_act_bytes<T, NTOK>(nkb) + int64_t{kGemvWarps} * kGemvStages * MATS * gemv_window<T>();
}

// Whether a type's traits read a lane's whole chunk at once (load_chunk: Q8_0); the others give
// it as load_a's four quad positions.
template <class T, class = void>
struct HasLoadChunk : std::false_type {};
template <class T>
struct HasLoadChunk<T, std::void_t<decltype(&T::load_chunk)>> : std::true_type {};

// Whether a type's traits decode a chunk as positive and negative magnitudes over interleaved
// activations (load_chunk_split: MXFP4); the kernel then interleaves the staged activations once.
template <class T, class = void>
struct HasLoadSplit : std::false_type {};
template <class T>
struct HasLoadSplit<T, std::void_t<decltype(&T::load_chunk_split)>> : std::true_type {};

template <class T, int NTOK, int MATS>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(GemvParams p) {
    grid_dependency_begin();
    static_assert(T::kSubK == 16 || T::kSubK == 32, "a scale covers 16 or 32 weights");
    static_assert(NTOK <= kGemvMaxTok, "one and two tokens alone");
    static_assert(kGemvSpanChunks % chunks_per_block<T>() == 0 && kGemvSpanChunks == 32, "whole blocks, a chunk a lane");
    constexpr int kSpanBlocks = gemv_span_blocks<T>(), kWin = gemv_window<T>();
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[kGemvWarps][MATS * NTOK];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wpr = p.wpr, grp = warp % wpr;
    const int r = blockIdx.x * (kGemvWarps / wpr) + warp / wpr;
    const bool active = r < p.rows;  // warp-uniform
    // This CTA's segment: its matrices, output and activations; rr is the row within them.
    const uint8_t* wm[MATS];
    uint64_t sm[MATS];
#pragma unroll
    for (int m = 0; m < MATS; ++m) wm[m] = p.w[m], sm[m] = p.stride[m];
    float* y = p.y;
    int64_t ldy = p.ldy;
    const int32_t* out_rows = p.out_rows;
    int rr = r, x_chunk = 0;
    if (p.n_seg > 0) {
        const int cta_row0 = blockIdx.x * (kGemvWarps / wpr);
        int sg = 0;
        while (sg + 1 < p.n_seg && cta_row0 >= p.seg_row0[sg + 1]) ++sg;
#pragma unroll
        for (int m = 0; m < MATS; ++m) wm[m] = p.seg[sg].w[m], sm[m] = p.seg[sg].stride[m];
        y = p.seg[sg].y;
        ldy = p.seg[sg].ldy;
        out_rows = p.seg[sg].out_rows;
        x_chunk = p.seg[sg].x_chunk;
        rr = r - p.seg_row0[sg];
    }
    const int nkb = p.nkb;
    const int nblk = nkb / chunks_per_block<T>();
    const int nspan = (nkb + kGemvSpanChunks - 1) / kGemvSpanChunks;
    // This warp's spans: grp, grp + wpr, ...
    const int mine = active && grp < nspan ? (nspan - grp + wpr - 1) / wpr : 0;

    const int8_t* xq = p.xq + static_cast<int64_t>(x_chunk) * kTileTok * 32;
    const float* xd = p.xd + static_cast<int64_t>(x_chunk) * kTileTok;
    const float2* xs = p.xs + static_cast<int64_t>(x_chunk) * kTileTok;

    int8_t* aq = reinterpret_cast<int8_t*>(smem);
    float* ad = reinterpret_cast<float*>(smem + int64_t{nkb} * NTOK * 32);
    float2* as = reinterpret_cast<float2*>(smem + int64_t{nkb} * NTOK * 32 + (int64_t{nkb} * NTOK * 4 + 15) / 16 * 16);
    uint8_t* win = smem + gemv_act_bytes<T, NTOK>(nkb) + static_cast<int64_t>(warp) * kGemvStages * MATS * kWin;

    const uint8_t* row[MATS];
#pragma unroll
    for (int m = 0; m < MATS; ++m) row[m] = wm[m] + static_cast<uint64_t>(active ? rr : 0) * sm[m];
    // Copies span number i of this warp (span grp + i * wpr) into its window i % kGemvStages.
    auto issue = [&](int i) {
        const int sp = grp + i * wpr;
        const int nb = min(kSpanBlocks, nblk - sp * kSpanBlocks);
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            const uint8_t* start = row[m] + static_cast<int64_t>(sp) * kSpanBlocks * T::kBlockBytes;
            const uintptr_t base = reinterpret_cast<uintptr_t>(start) & ~uintptr_t{15};
            const int need = static_cast<int>(reinterpret_cast<uintptr_t>(start) - base) + nb * T::kBlockBytes;
            uint8_t* dst = win + ((i % kGemvStages) * MATS + m) * kWin;
            for (int g = lane; g * 16 < need; g += 32) cp_async16(dst + g * 16, reinterpret_cast<const uint8_t*>(base) + g * 16);
        }
    };

    // The activations, compact: chunk c, token j's 32 bytes from the fragment order's c*256 + j*32.
    for (int g = threadIdx.x; g < nkb * NTOK * 2; g += kGemvWarps * 32) {
        const int c = g / (2 * NTOK), j = (g >> 1) % NTOK, h = g & 1;
        cp_async16(aq + static_cast<int64_t>(g) * 16, xq + static_cast<int64_t>(c) * kTileTok * 32 + j * 32 + h * 16);
    }
    cp_async_commit();
    for (int i = threadIdx.x; i < nkb * NTOK; i += kGemvWarps * 32) {
        const int c = i / NTOK, j = i % NTOK;
        ad[i] = __ldg(xd + static_cast<int64_t>(c) * kTileTok + j);
        if constexpr (T::kHasMin) as[i] = __ldg(xs + static_cast<int64_t>(c) * kTileTok + j);
    }
#pragma unroll
    for (int i = 0; i < kGemvStages - 1; ++i) {
        if (i < mine) issue(i);
        cp_async_commit();
    }
    // The activations and this warp's first span have landed (the later spans may not have).
    cp_async_wait<kGemvStages - 2>();
    __syncthreads();
    if constexpr (HasLoadSplit<T>::value) {
        // Each (chunk, token)'s four (lo, hi) word pairs into load_chunk_split's order, in place.
        uint2* pairs = reinterpret_cast<uint2*>(aq);
        for (int i = threadIdx.x; i < nkb * NTOK * 4; i += kGemvWarps * 32) {
            uint2 v = pairs[i];
            T::interleave_act(v.x, v.y, v.x, v.y);
            pairs[i] = v;
        }
        __syncthreads();
    }

    float acc[MATS][NTOK];
#pragma unroll
    for (int m = 0; m < MATS; ++m)
#pragma unroll
        for (int j = 0; j < NTOK; ++j) acc[m][j] = 0.0f;

    [[maybe_unused]] const SharedLoader ld;
    for (int i = 0; i < mine; ++i) {
        // Keep kGemvStages spans in flight: span i + kGemvStages - 1 goes into the window that
        // span i - 1 left (every lane has finished with it at the __syncwarp below).
        if (i + kGemvStages - 1 < mine) issue(i + kGemvStages - 1);
        cp_async_commit();
        cp_async_wait<kGemvStages - 1>();  // this lane's copies of span i
        __syncwarp();                      // and every other lane's
        const int sp = grp + i * wpr, c0 = sp * kGemvSpanChunks;
        const int n = min(kGemvSpanChunks, nkb - c0);
        const uint8_t* wrow[MATS];
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            const uintptr_t start = reinterpret_cast<uintptr_t>(row[m]) + static_cast<uint64_t>(sp) * kSpanBlocks * T::kBlockBytes;
            wrow[m] = win + ((i % kGemvStages) * MATS + m) * kWin + (start & 15);
        }
        if constexpr (HasLoadSplit<T>::value) {
            if (lane < n) {
                const int c = c0 + lane;
                uint32_t pos[MATS][8], neg[MATS][8];
                float d[MATS];
#pragma unroll
                for (int m = 0; m < MATS; ++m) T::load_chunk_split(wrow[m], lane, pos[m], neg[m], d[m]);
#pragma unroll
                for (int j = 0; j < NTOK; ++j) {
                    if (j >= p.m) break;
                    const int4* xa = reinterpret_cast<const int4*>(aq + (static_cast<int64_t>(c) * NTOK + j) * 32);
                    const int4 x0 = xa[0], x1 = xa[1];
                    const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                    const float dxj = ad[c * NTOK + j];
#pragma unroll
                    for (int m = 0; m < MATS; ++m) {
                        // Two chains (the positive and the negative codes) of one exact sum.
                        int ip = 0, in = 0;
#pragma unroll
                        for (int k = 0; k < 8; ++k) {
                            ip = __dp4a(static_cast<int>(pos[m][k]), xw[k], ip);
                            in = __dp4a(static_cast<int>(neg[m][k]), xw[k], in);
                        }
                        acc[m][j] = fmaf(static_cast<float>(ip - in), d[m] * dxj, acc[m][j]);
                    }
                }
            }
        } else if (lane < n) {
            const int c = c0 + lane;
            // The chunk's 32 weights as load_a gives them to the four lanes of a quad: position
            // t's words are weights 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi).
            int lo[MATS][4], hi[MATS][4];
            float d[MATS][2], mn[MATS][2];
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                if constexpr (HasLoadChunk<T>::value) {
                    T::load_chunk(wrow[m], lane, lo[m], hi[m], d[m], mn[m]);
                } else {
#pragma unroll
                    for (int t = 0; t < 4; ++t) T::load_a(wrow[m], lane, t, ld, lo[m][t], hi[m][t], d[m], mn[m]);
                }
            }
#pragma unroll
            for (int j = 0; j < NTOK; ++j) {
                if (j >= p.m) break;
                // Token j's 32 bytes in quad-lane order: position t's lo word, then its hi word.
                const int4* xa = reinterpret_cast<const int4*>(aq + (static_cast<int64_t>(c) * NTOK + j) * 32);
                const int4 x01 = xa[0], x23 = xa[1];
                const int xlo[4] = {x01.x, x01.z, x23.x, x23.z}, xhi[4] = {x01.y, x01.w, x23.y, x23.w};
                const float dxj = ad[c * NTOK + j];
#pragma unroll
                for (int m = 0; m < MATS; ++m) {
                    if constexpr (T::kSubK == 32) {
                        int is = 0;
#pragma unroll
                        for (int t = 0; t < 4; ++t) is = __dp4a(hi[m][t], xhi[t], __dp4a(lo[m][t], xlo[t], is));
                        acc[m][j] = fmaf(static_cast<float>(is), d[m][0] * dxj, acc[m][j]);
                    } else {
                        int il = 0, ih = 0;
#pragma unroll
                        for (int t = 0; t < 4; ++t) {
                            il = __dp4a(lo[m][t], xlo[t], il);
                            ih = __dp4a(hi[m][t], xhi[t], ih);
                        }
                        acc[m][j] = fmaf(static_cast<float>(il), d[m][0] * dxj,
                                         fmaf(static_cast<float>(ih), d[m][1] * dxj, acc[m][j]));
                    }
                    if constexpr (T::kHasMin) {
                        const float2 s = as[c * NTOK + j];
                        acc[m][j] -= fmaf(mn[m][0], s.x, mn[m][1] * s.y);
                    }
                }
            }
        }
        __syncwarp();  // every lane is done with window i before span i + kGemvStages is copied into it
    }
    // Each lane holds the sum of its chunks: add the 32 lanes.
#pragma unroll
    for (int m = 0; m < MATS; ++m)
#pragma unroll
        for (int j = 0; j < NTOK; ++j)
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) acc[m][j] += __shfl_xor_sync(0xffffffffu, acc[m][j], o);
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
                const int64_t o = out_rows ? out_rows[j] : j;
                y[o * ldy + rr] = acc[0][j];
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

// Launches gemv_kernel<T, ntok, mats> (ntok 1 or 2; mats 1 or 2); defined per type in
// int8_matmul_<type>.cu.
template <class T>
void launch_gemv(const GemvParams& p, int ntok, int mats, cudaStream_t stream);

template <class T, int NTOK, int MATS>
void launch_gemv_k(const GemvParams& p, cudaStream_t stream) {
    const int rows_per_cta = kGemvWarps / p.wpr;
    const dim3 grid(static_cast<unsigned>((p.rows + rows_per_cta - 1) / rows_per_cta));
    const int64_t smem = gemv_smem_bytes<T, NTOK, MATS>(p.nkb);
    // Above the 48 KiB a launch gets without asking (activations of 20,480 columns) a kernel must
    // opt in: once per instantiation, to the device's limit less room for the static `red`
    // (99 KiB on sm_86, 227 KiB on sm_90), rather than on every launch.
    static const int64_t dynamic_max = [] {
        int dev = 0, optin = 0;
        BG_CUDA_CHECK(cudaGetDevice(&dev));
        BG_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        const int most = optin - 1024;
        if (most > 48 * 1024)
            BG_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<T, NTOK, MATS>, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
        return static_cast<int64_t>(most > 48 * 1024 ? most : 48 * 1024);
    }();
    BG_CHECK_MSG(smem <= dynamic_max, "int8 GEMV: the activations of this many columns exceed the device's shared memory");
    BG_CUDA_CHECK(
        launch_kernel(gemv_kernel<T, NTOK, MATS>, grid, kGemvWarps * 32, static_cast<size_t>(smem), stream, p));
}
template <class T>
void launch_gemv_impl(const GemvParams& p, int ntok, int mats, cudaStream_t stream) {
    if (ntok <= 1) mats == 2 ? launch_gemv_k<T, 1, 2>(p, stream) : launch_gemv_k<T, 1, 1>(p, stream);
    else mats == 2 ? launch_gemv_k<T, 2, 2>(p, stream) : launch_gemv_k<T, 2, 1>(p, stream);
}

}  // namespace bg::cuda::int8mm
