// The integer MMA and GEMV kernels for q4_k weights
// (int8_matmul_kernel.cuh, int8_gemv_kernel.cuh; traits tensor/qtypes/q4_k.h).
#include "cuda/int8_gemv_kernel.cuh"
#include "cuda/int8_matmul_kernel.cuh"
#include "tensor/qtypes/q4_k.h"

namespace bg::cuda::int8mm {

template <>
void launch_mma<qtypes::Q4_K>(const MmaParams& p, int nt, int mats, int splits, cudaStream_t stream) {
    launch_mma_impl<qtypes::Q4_K>(p, nt, mats, splits, stream);
}

template <>
void launch_gemv<qtypes::Q4_K>(const GemvParams& p, int ntok, int mats, cudaStream_t stream) {
    launch_gemv_impl<qtypes::Q4_K>(p, ntok, mats, stream);
}

}  // namespace bg::cuda::int8mm
