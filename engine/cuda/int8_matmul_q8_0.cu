// The integer MMA kernels for q8_0 weights (int8_matmul_kernel.cuh; traits tensor/qtypes/q8_0.h).
#include "cuda/int8_matmul_kernel.cuh"
#include "tensor/qtypes/q8_0.h"

namespace bg::cuda::int8mm {

template <>
void launch_mma<qtypes::Q8_0>(const MmaParams& p, int nt, int mats, int splits, cudaStream_t stream) {
    launch_mma_impl<qtypes::Q8_0>(p, nt, mats, splits, stream);
}

}  // namespace bg::cuda::int8mm
