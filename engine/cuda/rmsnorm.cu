// RMS norm of each row (cpu::rmsnorm), times an optional weight vector: one block per row, the
// sum of squares by a block reduction.
#include <climits>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

// One block per row.
__global__ void rmsnorm_kernel(const float* x, const float* w, int64_t n, float eps, float* y) {
    __shared__ float red[33];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float s = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    // Every read of x happened before block_sum's barriers, so y may alias x.
    if (w) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * s * w[i];
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * s;
    }
}

}  // namespace

void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y, cudaStream_t stream) {
    if (n_rows <= 0) return;
    BG_CHECK(n > 0 && n_rows <= INT_MAX);
    rmsnorm_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, w, n, eps, y);
    BG_CUDA_CHECK_LAUNCH();
}

}  // namespace bg::cuda
