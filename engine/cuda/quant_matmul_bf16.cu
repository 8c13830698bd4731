// The fused quantized kernels for bf16 weights (quant_matmul_kernel.cuh), instantiated here alone.
#include "cuda/quant_matmul_kernel.cuh"

namespace bg::cuda::qmm {

template void launch_qmm<static_cast<int>(GgmlType::BF16)>(const KParams&, int, const QuantMatmulWorkspace&, cudaStream_t);

}  // namespace bg::cuda::qmm
