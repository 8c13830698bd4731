// Launch shapes and device helpers shared by the op families (the .cu files beside this one that
// include it): the block size, the grid-stride grid and the 2-D per-row grid of their launches,
// the product-rounded multiply-add that keeps the CPU's bits, the sigmoid, and warp and block sums.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

namespace bg::cuda {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest
constexpr unsigned kMaxGridY = 65535;

inline unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// 2-D grids: x over the row's width, y (striding) over rows.
inline dim3 rows_grid(int64_t width, int64_t n_rows) {
    return dim3(static_cast<unsigned>((width + kThreads - 1) / kThreads),
                static_cast<unsigned>(std::min<int64_t>(n_rows, kMaxGridY)));
}

// The CPU build rounds each product before adding it (no FMA contraction without -march), so
// chains the CPU writes as s += a*b round the product here too and give the same bits.
__device__ __forceinline__ float mul_add(float a, float b, float c) { return __fadd_rn(__fmul_rn(a, b), c); }

__device__ __forceinline__ float sigmoid_dev(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block; every thread gets the result. red: 33 floats of shared memory. Safe to
// call back to back: the slot results are read from is written only after every thread has
// passed the next call's first barrier.
__device__ inline float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < n_warps ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) red[32] = t;
    }
    __syncthreads();
    return red[32];
}

}  // namespace bg::cuda
