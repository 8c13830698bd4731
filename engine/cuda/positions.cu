// Token positions on the device: fill_positions writes the run start, start + step, .. as int32
// (the positions rope reads, the compressor's block positions), so no position array crosses
// from the host.
#include <cstdint>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

__global__ void fill_positions_kernel(int32_t* pos, int64_t n, int64_t start, int64_t step) {
    grid_dependency_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        pos[i] = static_cast<int32_t>(start + i * step);
}

}  // namespace

void fill_positions(int32_t* pos, int64_t n, int64_t start, int64_t step, cudaStream_t stream) {
    if (n <= 0) return;
    BG_CHECK(start >= 0 && start + (n - 1) * step <= INT32_MAX && start + (n - 1) * step >= 0);
    BG_CUDA_CHECK(launch_kernel(fill_positions_kernel, blocks_for(n), kThreads, 0, stream, pos, n, start, step));
}

}  // namespace bg::cuda
