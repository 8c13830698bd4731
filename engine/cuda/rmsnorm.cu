// RMS norm of each row (cpu::rmsnorm), times an optional weight vector: one block per row, the
// sum of squares by a block reduction. Decode norms one row at a time (up to 4 x 5120 values for
// the mHC mix), so a row's block is wide (1024 threads) and reads float4 where the row allows:
// the one block is the whole launch.
#include <climits>
#include <cstdint>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

constexpr int kNormThreads = 1024;

// One block per row; VEC: n % 4 == 0 and x, y, w 16-byte aligned, read and written as float4.
template <bool VEC>
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float* x, const float* w, int64_t n, float eps,
                                                               float* y) {
    grid_dependency_begin();
    __shared__ float red[33];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float ss = 0.0f;
    if constexpr (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 v = x4[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    }
    ss = block_sum(ss, red);
    const float s = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    // Every read of x happened before block_sum's barriers, so y may alias x.
    if constexpr (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            float4 v = x4[i];
            v = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
            if (w) {
                const float4 g = w4[i];
                v = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
            }
            y4[i] = v;
        }
    } else if (w) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * s * w[i];
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * s;
    }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y, cudaStream_t stream) {
    if (n_rows <= 0) return;
    BG_CHECK(n > 0 && n_rows <= INT_MAX);
    const int threads = n >= 4 * kThreads ? kNormThreads : kThreads;
    if (n % 4 == 0 && aligned16(x) && aligned16(y) && (!w || aligned16(w)))
        BG_CUDA_CHECK(
            launch_kernel(rmsnorm_kernel<true>, static_cast<unsigned>(n_rows), threads, 0, stream, x, w, n, eps, y));
    else
        BG_CUDA_CHECK(
            launch_kernel(rmsnorm_kernel<false>, static_cast<unsigned>(n_rows), threads, 0, stream, x, w, n, eps, y));
}

}  // namespace bg::cuda
