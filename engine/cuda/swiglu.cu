// SwiGLU with its clamp in either form (SwigluClamp, cpu::swiglu), elementwise.
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/swiglu_dev.cuh"
#include "cuda/launch.cuh"

namespace bg::cuda {

namespace {

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float limit, int llama_form,
                              float* out) {
    grid_dependency_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        out[i] = swiglu_dev(gate[i], up[i], limit, llama_form);
    }
}

}  // namespace

void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form, float* out,
            cudaStream_t stream) {
    if (n <= 0) return;
    BG_CUDA_CHECK(launch_kernel(swiglu_kernel, blocks_for(n), kThreads, 0, stream, gate, up, n, limit,
                                form == SwigluClamp::kLlamaCpp ? 1 : 0, out));
}

}  // namespace bg::cuda
