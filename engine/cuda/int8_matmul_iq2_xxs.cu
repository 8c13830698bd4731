// The integer MMA and GEMV kernels for iq2_xxs weights
// (int8_matmul_kernel.cuh, int8_gemv_kernel.cuh; traits tensor/qtypes/iq2_xxs.h).
#include "cuda/int8_gemv_kernel.cuh"
#include "cuda/int8_matmul_kernel.cuh"
#include "tensor/qtypes/iq2_xxs.h"

namespace bg::cuda::int8mm {

template <>
void launch_mma<qtypes::Iq2_XXS>(const MmaParams& p, int nt, int mats, int splits, cudaStream_t stream) {
    launch_mma_impl<qtypes::Iq2_XXS>(p, nt, mats, splits, stream);
}

template <>
void launch_gemv<qtypes::Iq2_XXS>(const GemvParams& p, int ntok, int mats, cudaStream_t stream) {
    launch_gemv_impl<qtypes::Iq2_XXS>(p, ntok, mats, stream);
}

}  // namespace bg::cuda::int8mm
