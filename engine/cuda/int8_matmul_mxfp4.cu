// The integer MMA and GEMV kernels for mxfp4 weights
// (int8_matmul_kernel.cuh, int8_gemv_kernel.cuh; traits tensor/qtypes/mxfp4.h).
#include "cuda/int8_gemv_kernel.cuh"
#include "cuda/int8_matmul_kernel.cuh"
#include "tensor/qtypes/mxfp4.h"

namespace bg::cuda::int8mm {

template <>
void launch_mma<qtypes::Mxfp4>(const MmaParams& p, int nt, int mats, int splits, cudaStream_t stream) {
    launch_mma_impl<qtypes::Mxfp4>(p, nt, mats, splits, stream);
}

template <>
void launch_gemv<qtypes::Mxfp4>(const GemvParams& p, int ntok, int mats, cudaStream_t stream) {
    launch_gemv_impl<qtypes::Mxfp4>(p, ntok, mats, stream);
}

}  // namespace bg::cuda::int8mm
