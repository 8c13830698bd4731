// The MoE row shuffles around the routed experts: moe_gather copies the rows a group of tokens
// sends to one expert into a dense block, moe_scatter puts an expert's output rows back in
// their slots (moe_scatter_add adds them there: the CPU's share of a split expert), moe_weighted_sum adds each token's k expert outputs, weighted, to its row.
#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

// 2-D grids below: x over the row's width, y (striding) over rows.
__global__ void gather_kernel(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width,
                              float* out) {
    grid_dependency_begin();
    const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (e >= width) return;
    for (int64_t j = blockIdx.y; j < m; j += gridDim.y) out[j * width + e] = x[rows[j] * ldx + e];
}

// Rows [add0, add0 + n_add) are added, the others written (n_add = 0: a plain scatter).
__global__ void scatter_kernel(const float* src, const int32_t* rows, int64_t m, int64_t add0, int64_t n_add,
                               int64_t width, float* dst) {
    grid_dependency_begin();
    const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (e >= width) return;
    for (int64_t j = blockIdx.y; j < m; j += gridDim.y) {
        float& d = dst[rows[j] * width + e];
        const float s = src[j * width + e];
        d = j >= add0 && j < add0 + n_add ? d + s : s;
    }
}

__global__ void weighted_sum_kernel(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width,
                                    float* y) {
    grid_dependency_begin();
    const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (e >= width) return;
    for (int64_t t = blockIdx.y; t < n_tok; t += gridDim.y) {
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) acc = mul_add(w[t * k + j], eo[(t * k + j) * width + e], acc);
        y[t * width + e] += acc;
    }
}

}  // namespace

void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width, float* out,
                cudaStream_t stream) {
    if (m <= 0 || width <= 0) return;
    BG_CHECK(ldx >= width);
    BG_CUDA_CHECK(launch_kernel(gather_kernel, rows_grid(width, m), kThreads, 0, stream, x, ldx, rows, m, width, out));
}

void moe_scatter(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst, cudaStream_t stream) {
    if (m <= 0 || width <= 0) return;
    BG_CUDA_CHECK(
        launch_kernel(scatter_kernel, rows_grid(width, m), kThreads, 0, stream, src, rows, m, 0, 0, width, dst));
}

void moe_scatter_join(const float* src, const int32_t* rows, int64_t m, int64_t add0, int64_t n_add, int64_t width,
                      float* dst, cudaStream_t stream) {
    if (m <= 0 || width <= 0) return;
    BG_CHECK(add0 >= 0 && n_add >= 0 && add0 + n_add <= m);
    BG_CUDA_CHECK(
        launch_kernel(scatter_kernel, rows_grid(width, m), kThreads, 0, stream, src, rows, m, add0, n_add, width, dst));
}

void moe_weighted_sum(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width, float* y,
                      cudaStream_t stream) {
    if (n_tok <= 0 || width <= 0) return;
    BG_CHECK(k >= 0);
    BG_CUDA_CHECK(
        launch_kernel(weighted_sum_kernel, rows_grid(width, n_tok), kThreads, 0, stream, eo, w, n_tok, k, width, y));
}

}  // namespace bg::cuda
