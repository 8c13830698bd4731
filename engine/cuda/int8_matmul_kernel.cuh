// The integer MMA kernel of int8_matmul.cuh, as a template over the weight type's traits
// (tensor/qtypes/*.h), the number of 8-token n-tiles and the number of matrices (1, or 2 for gate
// and up together). Included by int8_matmul_<type>.cu, one file a type, so the instantiations
// compile in parallel.
//
// A CTA: 4 warps x 16 weight rows = 64 rows of each matrix, all tokens of the pass, the K blocks
// [kb0, kb1) of its split (blockIdx.y). The K range goes through shared memory in steps of 4
// blocks, kStages steps in flight (cp.async, 16-byte copies): per step the raw bytes of the 64
// rows' 4 blocks (each row's window aligned down to 16 bytes, so any row stride and address
// works), the activations' B fragments and their scales. Each warp decodes its A fragments from
// there (the traits' load_a over shared memory), one m16n8k32 MMA per (block, n-tile, matrix).
// Each split stores its FP32 partials; the last CTA of a row tile to finish (a self-cleaning
// counter per tile) adds the splits in order 0, 1, .. and runs the epilogue: store (or scatter to
// output rows), or for gate/up SwiGLU and the int8 quantisation of h for the down projection.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/check.cuh"
#include "cuda/swiglu_dev.cuh"

namespace bg::cuda::int8mm {

constexpr int kWarps = 4;                 // warps of a CTA, each owning 16 weight rows
constexpr int kCtaRows = 16 * kWarps;
constexpr int kStep = 4;                  // K blocks (of 32) per pipeline step
constexpr int kStages = 3;                // steps in flight
constexpr int kTileTok = 8;               // tokens of one MMA n-tile
constexpr int kMaxTiles = 8;              // n-tiles of one pass: 64 tokens

enum Epilogue : int { kStore = 0, kGateUpQuant = 1 };

struct MmaParams {
    const uint8_t* w[2];      // the matrix (gate), and up when two
    uint64_t stride[2];       // bytes between rows
    int rows;                 // weight rows (outputs), the same for both matrices
    int nkb;                  // K / 32
    int kb_split;             // K blocks per split (gridDim.y splits)
    int m;                    // tokens of this pass (<= n-tiles * 8)
    const int8_t* xq;         // [nkb][n-tiles][32 lanes][8 bytes] fragment order (int8_matmul.cu)
    const float* xd;          // [nkb][n-tiles * 8] block scales
    float* part;              // [split][matrix][n-tiles * 8][rows]
    int* counters;            // [row tiles] zero between calls
    int epilogue;             // Epilogue
    // kStore: y[(out_rows ? out_rows[j] : j) * ldy + r]
    float* y;
    int64_t ldy;
    const int32_t* out_rows;
    // kGateUpQuant: h = swiglu(gate, up) -> hq, hd in fragment order for the same n-tiles
    float limit;
    int llama;
    int8_t* hq;
    float* hd;
};

// Bytes of a row's window of one step in shared memory: 4 blocks plus up to 15 bytes of
// alignment, rounded up to whole 16-byte copies.
template <class T>
__host__ __device__ constexpr int row_window() { return (kStep * T::kBlockBytes + 15 + 15) / 16 * 16; }

template <class T, int NT, int MATS>
__host__ __device__ constexpr int stage_bytes() {
    return MATS * kCtaRows * row_window<T>() + kStep * NT * 32 * 8 + kStep * NT * kTileTok * 4;
}
// The pipeline's stages, which the last CTA of a tile reuses for the split sums.
template <class T, int NT, int MATS>
__host__ __device__ constexpr int smem_bytes() {
    return kStages * stage_bytes<T, NT, MATS>() > MATS * NT * kTileTok * kCtaRows * 4
               ? kStages * stage_bytes<T, NT, MATS>()
               : MATS * NT * kTileTok * kCtaRows * 4;
}

// Byte of element k (0..31) of token tok's K block kb, in fragment order for a pass of n_tiles
// n-tiles: lane gg*4 + t of tile tok/8 (gg = tok % 8) holds, as b0, elements 4t..4t+3 and, as
// b1, elements 16+4t..16+4t+3 (the m16n8k32 B fragment of column gg).
__host__ __device__ __forceinline__ int64_t frag_byte(int kb, int tok, int k, int n_tiles) {
    const int nt = tok >> 3, gg = tok & 7, hi = k >> 4, t = (k & 15) >> 2;
    return ((static_cast<int64_t>(kb) * n_tiles + nt) * 32 + gg * 4 + t) * 8 + hi * 4 + (k & 3);
}

// One warp quantises one (token, K block), its 32 values one per lane: qtypes::quantize_act_block.
__device__ __forceinline__ void quantize_lane(float v, int kb, int tok, int n_tiles, int8_t* q, float* d) {
    const int k = threadIdx.x & 31;
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = amax / 127.0f;
    const int qi = amax == 0.0f ? 0 : static_cast<int>(roundf(v / dd));
    q[frag_byte(kb, tok, k, n_tiles)] = static_cast<int8_t>(qi);
    if (k == 0) d[static_cast<int64_t>(kb) * n_tiles * kTileTok + tok] = dd;
}

// Unaligned 32-bit reads of shared memory (a row window starts at any byte).
struct SharedLoader {
    __device__ __forceinline__ uint32_t u32(const uint8_t* p) const {
        const uintptr_t a = reinterpret_cast<uintptr_t>(p);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
        const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;
        return sh == 0 ? w[0] : __funnelshift_r(w[0], w[1], sh);
    }
    __device__ __forceinline__ uint32_t u8(const uint8_t* p) const { return *p; }
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// D = A (16x32 s8, row) . B (32x8 s8, col), s32; a: a0..a3 as the PTX fragment, b: b0, b1.
// Not volatile: a pure function of its operands, so the compiler may interleave independent MMAs
// with the scaling of earlier ones.
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], int2 b) {
    asm(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y), "r"(0));
}

template <class T, int NT, int MATS>
__global__ void __launch_bounds__(kWarps * 32) mma_kernel(MmaParams p) {
    static_assert(!T::kHasMin, "types with a min term need the activation block sums");
    constexpr int kWin = row_window<T>();
    constexpr int kABytes = MATS * kCtaRows * kWin;
    constexpr int kBBytes = kStep * NT * 32 * 8;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tile_r0 = blockIdx.x * kCtaRows;
    const int r0 = tile_r0 + warp * 16;
    const int kb0 = blockIdx.y * p.kb_split, kb1 = min(p.nkb, kb0 + p.kb_split);
    const int steps = (kb1 - kb0 + kStep - 1) / kStep;

    // The weight chunks this thread copies, the same every step: (matrix, row, 16-byte chunk of
    // the row's window) for i = threadIdx.x + j * 128; their row starts found once.
    constexpr int kChunks = kWin / 16;
    constexpr int kPerThread = (MATS * kCtaRows * kChunks + kWarps * 32 - 1) / (kWarps * 32);
    const uint8_t* chunk_row[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = threadIdx.x + j * kWarps * 32;
        const int rr = (i / kChunks) % kCtaRows, m = min(i / (kChunks * kCtaRows), MATS - 1);
        chunk_row[j] = p.w[m] + static_cast<uint64_t>(min(tile_r0 + rr, p.rows - 1)) * p.stride[m];
    }
    // Issues the copies of step s (blocks kb0 + 4s ..) into stage buffer s % kStages.
    auto issue = [&](int s) {
        uint8_t* st = smem + (s % kStages) * stage_bytes<T, NT, MATS>();
        const int kb = kb0 + s * kStep, n = min(kStep, kb1 - kb);
        // Weights: per (matrix, row) the 16-byte aligned window holding the n blocks.
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int i = threadIdx.x + j * kWarps * 32;
            if (i >= MATS * kCtaRows * kChunks) break;
            const int c = i % kChunks;
            const uint8_t* start = chunk_row[j] + static_cast<int64_t>(kb) * T::kBlockBytes;
            const uintptr_t base = reinterpret_cast<uintptr_t>(start) & ~uintptr_t{15};
            const int need = static_cast<int>(reinterpret_cast<uintptr_t>(start) - base) + n * T::kBlockBytes;
            if (c * 16 < need) cp_async16(st + (i / kChunks) * kWin + c * 16, reinterpret_cast<const uint8_t*>(base) + c * 16);
        }
        // Activations: n blocks of B fragments (contiguous), then their scales (contiguous).
        const uint8_t* xb = reinterpret_cast<const uint8_t*>(p.xq) + static_cast<int64_t>(kb) * NT * 256;
        for (int i = threadIdx.x; i < n * NT * 16; i += kWarps * 32) cp_async16(st + kABytes + i * 16, xb + i * 16);
        const uint8_t* db = reinterpret_cast<const uint8_t*>(p.xd + static_cast<int64_t>(kb) * NT * kTileTok);
        for (int i = threadIdx.x; i < n * NT * 2; i += kWarps * 32) cp_async16(st + kABytes + kBBytes + i * 16, db + i * 16);
    };

    float acc[MATS][NT][4];
#pragma unroll
    for (int m = 0; m < MATS; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[m][nt][j] = 0.0f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < steps) issue(s);
        cp_async_commit();
    }
    const bool active = r0 < p.rows;  // warp-uniform
    const SharedLoader ld;
    for (int s = 0; s < steps; ++s) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        if (s + kStages - 1 < steps) issue(s + kStages - 1);
        cp_async_commit();
        if (!active) continue;
        const uint8_t* st = smem + (s % kStages) * stage_bytes<T, NT, MATS>();
        const int kb = kb0 + s * kStep, n = min(kStep, kb1 - kb);
        const uint8_t* row_a[MATS];
        const uint8_t* row_b[MATS];
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            // The window of a row starts at its first block's address aligned down to 16.
            const int ra = min(r0 + g, p.rows - 1), rb = min(r0 + g + 8, p.rows - 1);
            const uint64_t oa = (reinterpret_cast<uintptr_t>(p.w[m]) + static_cast<uint64_t>(ra) * p.stride[m] +
                                 static_cast<uint64_t>(kb) * T::kBlockBytes) & 15;
            const uint64_t ob = (reinterpret_cast<uintptr_t>(p.w[m]) + static_cast<uint64_t>(rb) * p.stride[m] +
                                 static_cast<uint64_t>(kb) * T::kBlockBytes) & 15;
            row_a[m] = st + (m * kCtaRows + warp * 16 + g) * kWin + oa;
            row_b[m] = st + (m * kCtaRows + warp * 16 + g + 8) * kWin + ob;
        }
        const int2* sb = reinterpret_cast<const int2*>(st + kABytes);
        const float* sd = reinterpret_cast<const float*>(st + kABytes + kBBytes);
#pragma unroll
        for (int c = 0; c < kStep; ++c) {
            if (c >= n) break;
            int a[MATS][4];
            float da[MATS], db[MATS];
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                float ma, mb;
                T::load_a(row_a[m], c, t, ld, a[m][0], a[m][2], da[m], ma);
                T::load_a(row_b[m], c, t, ld, a[m][1], a[m][3], db[m], mb);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int2 b = sb[(c * NT + nt) * 32 + lane];
                const float2 dx = *reinterpret_cast<const float2*>(&sd[c * NT * kTileTok + nt * kTileTok + 2 * t]);
#pragma unroll
                for (int m = 0; m < MATS; ++m) {
                    int r[4];
                    mma_s8(r, a[m], b);
                    acc[m][nt][0] = fmaf(static_cast<float>(r[0]), da[m] * dx.x, acc[m][nt][0]);
                    acc[m][nt][1] = fmaf(static_cast<float>(r[1]), da[m] * dx.y, acc[m][nt][1]);
                    acc[m][nt][2] = fmaf(static_cast<float>(r[2]), db[m] * dx.x, acc[m][nt][2]);
                    acc[m][nt][3] = fmaf(static_cast<float>(r[3]), db[m] * dx.y, acc[m][nt][3]);
                }
            }
        }
    }
    cp_async_wait<0>();

    // This split's partials.
    const int tok_pass = NT * kTileTok;
    const int64_t mat_floats = static_cast<int64_t>(tok_pass) * p.rows;
    if (active) {
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            float* out = p.part + (static_cast<int64_t>(blockIdx.y) * MATS + m) * mat_floats;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int tok = nt * kTileTok + 2 * t;
                if (r0 + g < p.rows) {
                    out[static_cast<int64_t>(tok) * p.rows + r0 + g] = acc[m][nt][0];
                    out[static_cast<int64_t>(tok + 1) * p.rows + r0 + g] = acc[m][nt][1];
                }
                if (r0 + g + 8 < p.rows) {
                    out[static_cast<int64_t>(tok) * p.rows + r0 + g + 8] = acc[m][nt][2];
                    out[static_cast<int64_t>(tok + 1) * p.rows + r0 + g + 8] = acc[m][nt][3];
                }
            }
        }
    }
    // The last CTA of this row tile adds every split's partials, in split order.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&p.counters[blockIdx.x], 1) == static_cast<int>(gridDim.y) - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;
    // Sums of the splits for the tile's (matrix, token, row), in split order, by all threads at
    // once (four sums in flight per thread) into the pipeline's shared memory, which is free now:
    // [MATS][tok_pass][64] floats.
    const int splits = gridDim.y;
    float* sum = reinterpret_cast<float*>(smem);
    const int n_sum = MATS * tok_pass * kCtaRows;
    for (int i0 = threadIdx.x; i0 < n_sum; i0 += 4 * kWarps * 32) {
        float v[4];
        int64_t at[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int i = i0 + u * kWarps * 32;
            const int rr = i % kCtaRows, tok = (i / kCtaRows) % tok_pass, m = i / (kCtaRows * tok_pass);
            const int r = min(tile_r0 + rr, p.rows - 1);
            at[u] = m * mat_floats + static_cast<int64_t>(tok) * p.rows + r;
            v[u] = i < n_sum && tok < p.m ? __ldcg(p.part + at[u]) : 0.0f;
        }
        for (int sp = 1; sp < splits; ++sp)
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (i0 + u * kWarps * 32 < n_sum && (i0 + u * kWarps * 32) / kCtaRows % tok_pass < p.m)
                    v[u] += __ldcg(p.part + sp * MATS * mat_floats + at[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (i0 + u * kWarps * 32 < n_sum) sum[i0 + u * kWarps * 32] = v[u];
    }
    __syncthreads();
    if (p.epilogue == kStore) {
        for (int i = threadIdx.x; i < kCtaRows * p.m; i += kWarps * 32) {
            const int rr = i % kCtaRows, j = i / kCtaRows;
            if (tile_r0 + rr >= p.rows) continue;
            const int64_t o = p.out_rows ? p.out_rows[j] : j;
            p.y[o * p.ldy + tile_r0 + rr] = sum[j * kCtaRows + rr];
        }
    } else {
        // h rows [tile_r0, tile_r0 + 64): two K blocks of the down projection, each (block,
        // token) one warp's quantisation; tokens past m quantise zeros (the pass's padding).
        for (int task = warp; task < 2 * tok_pass; task += kWarps) {
            const int blk = task / tok_pass, tok = task % tok_pass;
            if (tile_r0 + blk * 32 >= p.rows) continue;  // warp-uniform: rows are whole 32-blocks
            const int rr = blk * 32 + lane;
            const float v = tok < p.m ? swiglu_dev(sum[tok * kCtaRows + rr], sum[(tok_pass + tok) * kCtaRows + rr],
                                                   p.limit, p.llama)
                                      : 0.0f;
            quantize_lane(v, (tile_r0 + rr) / 32, tok, NT, p.hq, p.hd);
        }
    }
}

// Launches mma_kernel<T, nt, mats> (nt in 1..8, mats 1 or 2); defined per type in
// int8_matmul_<type>.cu.
template <class T>
void launch_mma(const MmaParams& p, int nt, int mats, int splits, cudaStream_t stream);

// The body of launch_mma<T>, for those files. The shared memory above 48 KB is opted into once
// per instantiation.
template <class T, int NT, int MATS>
void launch_one(const MmaParams& p, dim3 grid, cudaStream_t stream) {
    constexpr int bytes = smem_bytes<T, NT, MATS>();
    static const bool opted = [] {
        if (bytes > 48 * 1024)
            BG_CUDA_CHECK(cudaFuncSetAttribute(mma_kernel<T, NT, MATS>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        return true;
    }();
    (void)opted;
    mma_kernel<T, NT, MATS><<<grid, kWarps * 32, bytes, stream>>>(p);
}
template <class T, int NT>
void launch_nt(const MmaParams& p, int mats, dim3 grid, cudaStream_t stream) {
    if (mats == 2) launch_one<T, NT, 2>(p, grid, stream);
    else launch_one<T, NT, 1>(p, grid, stream);
}
template <class T>
void launch_mma_impl(const MmaParams& p, int nt, int mats, int splits, cudaStream_t stream) {
    const dim3 grid((p.rows + kCtaRows - 1) / kCtaRows, splits);
    switch (nt) {
        case 1: launch_nt<T, 1>(p, mats, grid, stream); break;
        case 2: launch_nt<T, 2>(p, mats, grid, stream); break;
        case 3: launch_nt<T, 3>(p, mats, grid, stream); break;
        case 4: launch_nt<T, 4>(p, mats, grid, stream); break;
        case 5: launch_nt<T, 5>(p, mats, grid, stream); break;
        case 6: launch_nt<T, 6>(p, mats, grid, stream); break;
        case 7: launch_nt<T, 7>(p, mats, grid, stream); break;
        default: launch_nt<T, 8>(p, mats, grid, stream); break;
    }
}

}  // namespace bg::cuda::int8mm
