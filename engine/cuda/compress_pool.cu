// The compressor's pooling of blocks of ratio tokens into one row each: per channel, the
// score-softmax-weighted sum of kv (or the plain sum), through backend/pool_channel.h, which
// the CPU op shares.
#include "backend/pool_channel.h"
#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

__global__ void compress_pool_kernel(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0,
                                     int64_t n_blocks, float* out) {
    grid_dependency_begin();
    const int64_t total = n_blocks * d;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t j = idx / d, c = idx % d;
        out[idx] = pool_channel(kv, score, d, ratio, (b0 + j) * ratio, c);
    }
}

}  // namespace

void compress_pool(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0, int64_t n_blocks,
                   float* out, cudaStream_t stream) {
    BG_CHECK(ratio >= 1 && b0 >= 0);
    if (n_blocks <= 0 || d <= 0) return;
    BG_CUDA_CHECK(launch_kernel(compress_pool_kernel, blocks_for(n_blocks * d), kThreads, 0, stream, kv, score, d,
                                ratio, b0, n_blocks, out));
}

}  // namespace bg::cuda
