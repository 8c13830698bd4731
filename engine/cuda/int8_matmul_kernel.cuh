// The integer MMA kernel of int8_matmul.cuh, as a template over the weight type's traits
// (tensor/qtypes/*.h), the number of 8-token n-tiles and the number of matrices (1, or 2 for gate
// and up together). Included by int8_matmul_<type>.cu, one file a type, so the instantiations
// compile in parallel.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace bg::cuda::int8mm {

constexpr int kWarps = 4;                 // warps of a CTA, each owning 16 weight rows
constexpr int kCtaRows = 16 * kWarps;
constexpr int kStage = 4;                 // K blocks of activations staged in shared memory at once
constexpr int kTileTok = 8;               // tokens of one MMA n-tile
constexpr int kMaxTiles = 8;              // n-tiles of one pass: 64 tokens

// Weight bytes at any alignment, through the read-only cache: rows of 17- or 34-byte blocks put
// a lane's 4 bytes at every alignment. An unaligned word is two aligned loads and a funnel shift;
// the second word holds a byte of the block, so it never crosses into an unmapped page.
struct Loader {
    __device__ __forceinline__ uint32_t u32(const uint8_t* p) const {
        const uintptr_t a = reinterpret_cast<uintptr_t>(p);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
        const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;
        const uint32_t lo = __ldg(w);
        if (sh == 0) return lo;
        return __funnelshift_r(lo, __ldg(w + 1), sh);
    }
    __device__ __forceinline__ uint32_t u8(const uint8_t* p) const { return __ldg(p); }
};

struct MmaParams {
    const uint8_t* w[2];      // the matrix (gate), and up when two
    uint64_t stride[2];       // bytes between rows
    int rows;                 // weight rows (outputs), the same for both matrices
    int nkb;                  // K / 32
    int kb_split;             // K blocks per split (gridDim.y splits)
    const int2* xq;           // [nkb][n-tiles][32 lanes] fragment order (int8_matmul.cu)
    const float* xd;          // [nkb][n-tiles * 8] block scales
    float* part;              // [split][matrix][n-tiles * 8][rows]
};

// D = A (16x32 s8, row) . B (32x8 s8, col), s32; a: a0..a3 as the PTX fragment, b: b0, b1.
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], int2 b) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y), "r"(0));
}

template <class T, int NT, int MATS>
__global__ void __launch_bounds__(kWarps * 32) mma_kernel(MmaParams p) {
    static_assert(!T::kHasMin, "types with a min term need the activation block sums");
    __shared__ __align__(16) int2 sx[kStage][NT][32];
    __shared__ __align__(16) float sd[kStage][NT * kTileTok];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = blockIdx.x * kCtaRows + warp * 16;
    const int ra = min(r0 + g, p.rows - 1), rb = min(r0 + g + 8, p.rows - 1);
    const int kb0 = blockIdx.y * p.kb_split, kb1 = min(p.nkb, kb0 + p.kb_split);
    const uint8_t* row_a[MATS];
    const uint8_t* row_b[MATS];
#pragma unroll
    for (int m = 0; m < MATS; ++m) {
        row_a[m] = p.w[m] + static_cast<uint64_t>(ra) * p.stride[m];
        row_b[m] = p.w[m] + static_cast<uint64_t>(rb) * p.stride[m];
    }
    float acc[MATS][NT][4];
#pragma unroll
    for (int m = 0; m < MATS; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[m][nt][j] = 0.0f;
    const Loader ld;
    const bool active = r0 < p.rows;  // warp-uniform
    for (int kc = kb0; kc < kb1; kc += kStage) {
        const int n = min(kStage, kb1 - kc);
        __syncthreads();
        {
            const int2* src = p.xq + static_cast<int64_t>(kc) * NT * 32;
            int2* dst = &sx[0][0][0];
            for (int i = threadIdx.x; i < n * NT * 32; i += kWarps * 32) dst[i] = src[i];
            const float* dsrc = p.xd + static_cast<int64_t>(kc) * NT * kTileTok;
            float* ddst = &sd[0][0];
            for (int i = threadIdx.x; i < n * NT * kTileTok; i += kWarps * 32) ddst[i] = dsrc[i];
        }
        __syncthreads();
        if (!active) continue;
#pragma unroll
        for (int c = 0; c < kStage; ++c) {
            if (c >= n) break;
            const int kb = kc + c;
            int a[MATS][4];
            float da[MATS], db[MATS];
#pragma unroll
            for (int m = 0; m < MATS; ++m) {
                float ma, mb;
                T::load_a(row_a[m], kb, t, ld, a[m][0], a[m][2], da[m], ma);
                T::load_a(row_b[m], kb, t, ld, a[m][1], a[m][3], db[m], mb);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int2 b = sx[c][nt][lane];
                const float2 dx = *reinterpret_cast<const float2*>(&sd[c][nt * kTileTok + 2 * t]);
#pragma unroll
                for (int m = 0; m < MATS; ++m) {
                    int s[4];
                    mma_s8(s, a[m], b);
                    acc[m][nt][0] = fmaf(static_cast<float>(s[0]), da[m] * dx.x, acc[m][nt][0]);
                    acc[m][nt][1] = fmaf(static_cast<float>(s[1]), da[m] * dx.y, acc[m][nt][1]);
                    acc[m][nt][2] = fmaf(static_cast<float>(s[2]), db[m] * dx.x, acc[m][nt][2]);
                    acc[m][nt][3] = fmaf(static_cast<float>(s[3]), db[m] * dx.y, acc[m][nt][3]);
                }
            }
        }
    }
    if (!active) return;
    const int tok_pass = NT * kTileTok;
#pragma unroll
    for (int m = 0; m < MATS; ++m) {
        float* out = p.part + (static_cast<int64_t>(blockIdx.y) * MATS + m) * tok_pass * p.rows;
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

// Launches mma_kernel<T, nt, mats> (nt in 1..8, mats 1 or 2); defined per type in
// int8_matmul_<type>.cu.
template <class T>
void launch_mma(const MmaParams& p, int nt, int mats, int splits, cudaStream_t stream);

// The body of launch_mma<T>, for those files.
template <class T, int NT>
void launch_nt(const MmaParams& p, int mats, dim3 grid, cudaStream_t stream) {
    if (mats == 2) mma_kernel<T, NT, 2><<<grid, kWarps * 32, 0, stream>>>(p);
    else mma_kernel<T, NT, 1><<<grid, kWarps * 32, 0, stream>>>(p);
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
