// GPU dequantisation of ggml blocks (F32, F16, BF16, Q8_0, MXFP4, and the 256-weight types
// Q2_K..Q6_K, IQ2_XXS through their traits' decoders, tensor/qtypes/) and of FP8 Engram rows to
// float32, bit-exact with the CPU's dequantize_row and fp8::dequantize_packed_rows. One thread
// per output element; a block's scale is read by the threads that share it.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "tensor/ggml_types.h"

namespace bg::cuda {

// Converts n elements (a whole number of blocks) at device pointer src into float32 at dst;
// cudaErrorInvalidValue for a type it has no decoder for.
cudaError_t dequantize(GgmlType t, const void* src, float* dst, int64_t n, cudaStream_t stream);
// rows packed FP8-E4M3 rows with their E8M0 scales (tensor/fp8_rows.h) into rows x dim float32,
// bit-exact with fp8::dequantize_packed_rows.
cudaError_t dequantize_fp8_rows(const void* src, float* dst, int64_t rows, int64_t dim, cudaStream_t stream);

// Number of CUDA devices (0 when no driver or no GPU; never fails).
int device_count();

}  // namespace bg::cuda
