// The integer MMA kernel of int8_matmul.cuh, as a template over the weight type's traits
// (tensor/qtypes/*.h), the number of 8-token n-tiles and the number of matrices (1, or 2 for gate
// and up together). Included by int8_matmul_<type>.cu, one file a type, so the instantiations
// compile in parallel.
//
// A CTA: 4 warps x 16 weight rows = 64 rows of each matrix, all tokens of the pass, the K chunks
// (32 weights each) [kb0, kb1) of its split (blockIdx.y). The K range goes through shared memory
// in steps of step_chunks<T>() chunks (4 blocks of a 32-weight type, one super-block of a
// 256-weight K-quant), stages<T>() steps in flight (cp.async, 16-byte copies): per step the raw
// bytes of the 64 rows' blocks (each row's window aligned down to 16 bytes, so any row stride and
// address works), the activations' B fragments, their scales and, for types with a min term,
// their half-block sums. Each warp decodes its A fragments from there (the traits' load_a over
// shared memory): one m16n8k32 MMA per (chunk, n-tile, matrix) where a chunk has one scale, two
// m16n8k16 (one per 16-weight half, each with its scale) where the type's sub-blocks are 16.
// Each split stores its FP32 partials; the last CTA of a row tile to finish (a self-cleaning
// counter per tile) adds the splits in order 0, 1, .. and runs the epilogue: store (or scatter to
// output rows), or for gate/up SwiGLU and the int8 quantisation of h for the down projection.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/check.cuh"
#include "cuda/swiglu_dev.cuh"
#include "cuda/launch.cuh"

namespace bg::cuda::int8mm {

constexpr int kWarps = 4;                 // warps of a CTA, each owning 16 weight rows
constexpr int kCtaRows = 16 * kWarps;
constexpr int kStep = 4;                  // K chunks (of 32) per pipeline step, at least
constexpr int kTileTok = 8;               // tokens of one MMA n-tile
constexpr int kMaxTiles = 8;              // n-tiles of one pass: 64 tokens
// Dynamic shared memory a CTA may use on every GPU we build for: the RTX 3060's sm_86 opts in to
// 99 KB a block (the H200's sm_90 to 227 KB), less the kernel's static word.
constexpr int kSmemLimit = 99 * 1024 - 16;

enum Epilogue : int { kStore = 0, kGateUpQuant = 1 };

struct MmaParams {
    const uint8_t* w[2];      // the matrix (gate), and up when two
    uint64_t stride[2];       // bytes between rows
    int rows;                 // weight rows (outputs), the same for both matrices
    int nkb;                  // K / 32
    int kb_split;             // K chunks per split (gridDim.y splits), a multiple of step_chunks<T>()
    int m;                    // tokens of this pass (<= n-tiles * 8)
    const int8_t* xq;         // [nkb][n-tiles][32 lanes][8 bytes] fragment order (int8_matmul.cu)
    const float* xd;          // [nkb][n-tiles * 8] block scales
    const float2* xs;         // [nkb][n-tiles * 8] scale * sum of q per 16-half (types with a min)
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
    float2* hs;
};

// 32-weight chunks of one block of the type (1, or 8 for a 256-weight super-block), and of one
// pipeline step (whole blocks, at least kStep chunks).
template <class T>
__host__ __device__ constexpr int chunks_per_block() { return T::kBlockWeights / 32; }
template <class T>
__host__ __device__ constexpr int step_chunks() { return chunks_per_block<T>() > kStep ? chunks_per_block<T>() : kStep; }
// Bytes of a row's window of one step in shared memory: its blocks plus up to 15 bytes of
// alignment, rounded up to whole 16-byte copies.
template <class T>
__host__ __device__ constexpr int row_window() {
    return (step_chunks<T>() / chunks_per_block<T>() * T::kBlockBytes + 15 + 15) / 16 * 16;
}

template <class T, int NT, int MATS>
__host__ __device__ constexpr int stage_bytes() {
    return MATS * kCtaRows * row_window<T>() + step_chunks<T>() * NT * 32 * 8 + step_chunks<T>() * NT * kTileTok * 4 +
           (T::kHasMin ? step_chunks<T>() * NT * kTileTok * 8 : 0);
}
// Steps in flight: three where they fit the shared memory every GPU allows, else two.
template <class T, int NT, int MATS>
__host__ __device__ constexpr int stages() { return 3 * stage_bytes<T, NT, MATS>() <= kSmemLimit ? 3 : 2; }
// The pipeline's stages, which the last CTA of a tile reuses for the split sums.
template <class T, int NT, int MATS>
__host__ __device__ constexpr int smem_bytes() {
    return stages<T, NT, MATS>() * stage_bytes<T, NT, MATS>() > MATS * NT * kTileTok * kCtaRows * 4
               ? stages<T, NT, MATS>() * stage_bytes<T, NT, MATS>()
               : MATS * NT * kTileTok * kCtaRows * 4;
}
// The most n-tiles a pass of this type and matrix count takes within kSmemLimit (8 for 32-weight
// types; fewer for the widest K-quant super-blocks, whose passes then hold fewer tokens).
template <class T, int MATS>
__host__ __device__ constexpr int max_tiles() {
    return smem_bytes<T, 8, MATS>() <= kSmemLimit   ? 8
           : smem_bytes<T, 7, MATS>() <= kSmemLimit ? 7
           : smem_bytes<T, 6, MATS>() <= kSmemLimit ? 6
           : smem_bytes<T, 5, MATS>() <= kSmemLimit ? 5
                                                    : 4;
}

// Byte of element k (0..31) of token tok's K block kb, in fragment order for a pass of n_tiles
// n-tiles: lane gg*4 + t of tile tok/8 (gg = tok % 8) holds, as b0, elements 4t..4t+3 and, as
// b1, elements 16+4t..16+4t+3 (the m16n8k32 B fragment of column gg).
__host__ __device__ __forceinline__ int64_t frag_byte(int kb, int tok, int k, int n_tiles) {
    const int nt = tok >> 3, gg = tok & 7, hi = k >> 4, t = (k & 15) >> 2;
    return ((static_cast<int64_t>(kb) * n_tiles + nt) * 32 + gg * 4 + t) * 8 + hi * 4 + (k & 3);
}

// One warp quantises one (token, K block), its 32 values one per lane: qtypes::quantize_act_block.
// s gets d * (sum of q over each 16-value half), what a weight type's min term multiplies.
__device__ __forceinline__ void quantize_lane(float v, int kb, int tok, int n_tiles, int8_t* q, float* d, float2* s) {
    const int k = threadIdx.x & 31;
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = amax / 127.0f;
    const int qi = amax == 0.0f ? 0 : static_cast<int>(roundf(v / dd));
    q[frag_byte(kb, tok, k, n_tiles)] = static_cast<int8_t>(qi);
    int half = qi;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) half += __shfl_xor_sync(0xffffffffu, half, o);  // within each half
    const int hi = __shfl_sync(0xffffffffu, half, 16);
    const int64_t at = static_cast<int64_t>(kb) * n_tiles * kTileTok + tok;
    if (k == 0) {
        d[at] = dd;
        s[at] = make_float2(dd * static_cast<float>(half), dd * static_cast<float>(hi));
    }
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
// The same over one 16-wide half of K: a0 (row g), a1 (row g+8) and b0 hold k 4t..4t+3 of the
// half, the layout of m16n8k32's a0/a1/b0 (first half) and a2/a3/b1 (second half).
__device__ __forceinline__ void mma_s8_k16(int (&d)[4], int a0, int a1, int b) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

template <class T, int NT, int MATS>
__global__ void __launch_bounds__(kWarps * 32) mma_kernel(MmaParams p) {
    grid_dependency_begin();
    static_assert(T::kSubK == 16 || T::kSubK == 32, "a scale covers 16 or 32 weights");
    constexpr int kCpb = chunks_per_block<T>(), kSC = step_chunks<T>(), kStages = stages<T, NT, MATS>();
    constexpr int kWin = row_window<T>();
    constexpr int kABytes = MATS * kCtaRows * kWin;
    constexpr int kBBytes = kSC * NT * 32 * 8;
    constexpr int kDBytes = kSC * NT * kTileTok * 4;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tile_r0 = blockIdx.x * kCtaRows;
    const int r0 = tile_r0 + warp * 16;
    const int kb0 = blockIdx.y * p.kb_split, kb1 = min(p.nkb, kb0 + p.kb_split);
    const int steps = (kb1 - kb0 + kSC - 1) / kSC;

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
    // Issues the copies of step s (chunks kb0 + s * kSC ..) into stage buffer s % kStages.
    auto issue = [&](int s) {
        uint8_t* st = smem + (s % kStages) * stage_bytes<T, NT, MATS>();
        const int kb = kb0 + s * kSC, n = min(kSC, kb1 - kb);  // kb and n: whole blocks
        // Weights: per (matrix, row) the 16-byte aligned window holding the n chunks' blocks.
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int i = threadIdx.x + j * kWarps * 32;
            if (i >= MATS * kCtaRows * kChunks) break;
            const int c = i % kChunks;
            const uint8_t* start = chunk_row[j] + static_cast<int64_t>(kb / kCpb) * T::kBlockBytes;
            const uintptr_t base = reinterpret_cast<uintptr_t>(start) & ~uintptr_t{15};
            const int need = static_cast<int>(reinterpret_cast<uintptr_t>(start) - base) + n / kCpb * T::kBlockBytes;
            if (c * 16 < need) cp_async16(st + (i / kChunks) * kWin + c * 16, reinterpret_cast<const uint8_t*>(base) + c * 16);
        }
        // Activations: n chunks of B fragments (contiguous), their scales, and their half sums.
        const uint8_t* xb = reinterpret_cast<const uint8_t*>(p.xq) + static_cast<int64_t>(kb) * NT * 256;
        for (int i = threadIdx.x; i < n * NT * 16; i += kWarps * 32) cp_async16(st + kABytes + i * 16, xb + i * 16);
        const uint8_t* db = reinterpret_cast<const uint8_t*>(p.xd + static_cast<int64_t>(kb) * NT * kTileTok);
        for (int i = threadIdx.x; i < n * NT * 2; i += kWarps * 32) cp_async16(st + kABytes + kBBytes + i * 16, db + i * 16);
        if constexpr (T::kHasMin) {
            const uint8_t* sb = reinterpret_cast<const uint8_t*>(p.xs + static_cast<int64_t>(kb) * NT * kTileTok);
            for (int i = threadIdx.x; i < n * NT * 4; i += kWarps * 32)
                cp_async16(st + kABytes + kBBytes + kDBytes + i * 16, sb + i * 16);
        }
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
        const int kb = kb0 + s * kSC, n = min(kSC, kb1 - kb);
        const uint8_t* row_a[MATS];
        const uint8_t* row_b[MATS];
#pragma unroll
        for (int m = 0; m < MATS; ++m) {
            // The window of a row starts at its first block's address aligned down to 16.
            const int ra = min(r0 + g, p.rows - 1), rb = min(r0 + g + 8, p.rows - 1);
            const uint64_t oa = (reinterpret_cast<uintptr_t>(p.w[m]) + static_cast<uint64_t>(ra) * p.stride[m] +
                                 static_cast<uint64_t>(kb / kCpb) * T::kBlockBytes) & 15;
            const uint64_t ob = (reinterpret_cast<uintptr_t>(p.w[m]) + static_cast<uint64_t>(rb) * p.stride[m] +
                                 static_cast<uint64_t>(kb / kCpb) * T::kBlockBytes) & 15;
            row_a[m] = st + (m * kCtaRows + warp * 16 + g) * kWin + oa;
            row_b[m] = st + (m * kCtaRows + warp * 16 + g + 8) * kWin + ob;
        }
        const int2* sb = reinterpret_cast<const int2*>(st + kABytes);
        const float* sd = reinterpret_cast<const float*>(st + kABytes + kBBytes);
        const float4* ss = reinterpret_cast<const float4*>(st + kABytes + kBBytes + kDBytes);
#pragma unroll
        for (int c = 0; c < kSC; ++c) {
            if (c >= n) break;
            // Per matrix: rows g and g+8's fragments, and per 16-half their scale and min.
            int a[MATS][4];
            float da[MATS][2], db[MATS][2], ma[MATS][2], mb[MATS][2];
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                T::load_a(row_a[m], c, t, ld, a[m][0], a[m][2], da[m], ma[m]);
                T::load_a(row_b[m], c, t, ld, a[m][1], a[m][3], db[m], mb[m]);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int2 b = sb[(c * NT + nt) * 32 + lane];
                const float2 dx = *reinterpret_cast<const float2*>(&sd[c * NT * kTileTok + nt * kTileTok + 2 * t]);
#pragma unroll
                for (int m = 0; m < MATS; ++m) {
                    if constexpr (T::kSubK == 32) {
                        int r[4];
                        mma_s8(r, a[m], b);
                        acc[m][nt][0] = fmaf(static_cast<float>(r[0]), da[m][0] * dx.x, acc[m][nt][0]);
                        acc[m][nt][1] = fmaf(static_cast<float>(r[1]), da[m][0] * dx.y, acc[m][nt][1]);
                        acc[m][nt][2] = fmaf(static_cast<float>(r[2]), db[m][0] * dx.x, acc[m][nt][2]);
                        acc[m][nt][3] = fmaf(static_cast<float>(r[3]), db[m][0] * dx.y, acc[m][nt][3]);
                    } else {
                        int lo[4], hi[4];
                        mma_s8_k16(lo, a[m][0], a[m][1], b.x);
                        mma_s8_k16(hi, a[m][2], a[m][3], b.y);
                        acc[m][nt][0] = fmaf(static_cast<float>(lo[0]), da[m][0] * dx.x,
                                             fmaf(static_cast<float>(hi[0]), da[m][1] * dx.x, acc[m][nt][0]));
                        acc[m][nt][1] = fmaf(static_cast<float>(lo[1]), da[m][0] * dx.y,
                                             fmaf(static_cast<float>(hi[1]), da[m][1] * dx.y, acc[m][nt][1]));
                        acc[m][nt][2] = fmaf(static_cast<float>(lo[2]), db[m][0] * dx.x,
                                             fmaf(static_cast<float>(hi[2]), db[m][1] * dx.x, acc[m][nt][2]));
                        acc[m][nt][3] = fmaf(static_cast<float>(lo[3]), db[m][0] * dx.y,
                                             fmaf(static_cast<float>(hi[3]), db[m][1] * dx.y, acc[m][nt][3]));
                    }
                    if constexpr (T::kHasMin) {
                        // value = d_h * q - m_h: minus m_h times the half's activation sum (d_x * sum q).
                        const float4 s = ss[(c * NT * kTileTok + nt * kTileTok) / 2 + t];  // tokens 2t, 2t+1
                        acc[m][nt][0] -= fmaf(ma[m][0], s.x, ma[m][1] * s.y);
                        acc[m][nt][1] -= fmaf(ma[m][0], s.z, ma[m][1] * s.w);
                        acc[m][nt][2] -= fmaf(mb[m][0], s.x, mb[m][1] * s.y);
                        acc[m][nt][3] -= fmaf(mb[m][0], s.z, mb[m][1] * s.w);
                    }
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
            quantize_lane(v, (tile_r0 + rr) / 32, tok, NT, p.hq, p.hd, p.hs);
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
    BG_CUDA_CHECK(launch_kernel(mma_kernel<T, NT, MATS>, grid, kWarps * 32, bytes, stream, p));
}
template <class T, int NT>
void launch_nt(const MmaParams& p, int mats, dim3 grid, cudaStream_t stream) {
    // Passes wider than the type's max_tiles are split by the callers (int8_matmul.cu).
    if (mats == 2) {
        if constexpr (NT <= max_tiles<T, 2>()) launch_one<T, NT, 2>(p, grid, stream);
        else BG_CHECK_MSG(false, "int8 matmul: a pass wider than the weight type's max_tiles");
    } else {
        if constexpr (NT <= max_tiles<T, 1>()) launch_one<T, NT, 1>(p, grid, stream);
        else BG_CHECK_MSG(false, "int8 matmul: a pass wider than the weight type's max_tiles");
    }
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
