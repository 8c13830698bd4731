#include "cuda/dequant.cuh"
#include "cuda/launch.cuh"

#include <cuda_fp16.h>

#include "tensor/fp8_rows.h"
#include "tensor/qtypes/iq2_xxs.h"
#include "tensor/qtypes/q2_k.h"
#include "tensor/qtypes/q3_k.h"
#include "tensor/qtypes/q4_k.h"
#include "tensor/qtypes/q5_k.h"
#include "tensor/qtypes/q6_k.h"

namespace bg::cuda {

namespace {

__device__ float half_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ float e2m1(uint32_t code) {
    // +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = mag[code & 7];
    return (code & 8) ? -v : v;
}

__global__ void dequant_kernel(uint32_t type, const uint8_t* src, float* dst, int64_t n) {
    grid_dependency_begin();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    switch (type) {
        case static_cast<uint32_t>(GgmlType::F32): dst[i] = reinterpret_cast<const float*>(src)[i]; break;
        case static_cast<uint32_t>(GgmlType::F16):
            dst[i] = half_bits_to_float(reinterpret_cast<const uint16_t*>(src)[i]);
            break;
        case static_cast<uint32_t>(GgmlType::BF16):
            dst[i] = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(src)[i]) << 16);
            break;
        case static_cast<uint32_t>(GgmlType::Q8_0): {
            const uint8_t* blk = src + (i / 32) * 34;
            const uint16_t d = static_cast<uint16_t>(blk[0] | (blk[1] << 8));
            dst[i] = half_bits_to_float(d) * static_cast<float>(static_cast<int8_t>(blk[2 + i % 32]));
            break;
        }
        case static_cast<uint32_t>(GgmlType::MXFP4): {
            const uint8_t* blk = src + (i / 32) * 17;
            const int j = static_cast<int>(i % 32);
            const uint8_t byte = blk[1 + (j & 15)];
            const uint32_t code = j < 16 ? (byte & 0xF) : (byte >> 4);
            // ldexpf is exact wherever the result is representable, as on the CPU.
            dst[i] = ldexpf(e2m1(code), static_cast<int>(blk[0]) - 127);
            break;
        }
        // The 256-weight types through their traits' decoders, the ones dequantize_row calls.
        case static_cast<uint32_t>(GgmlType::Q2_K): dst[i] = qtypes::Q2_K::row_element(src, i); break;
        case static_cast<uint32_t>(GgmlType::Q3_K): dst[i] = qtypes::Q3_K::row_element(src, i); break;
        case static_cast<uint32_t>(GgmlType::Q4_K): dst[i] = qtypes::Q4_K::row_element(src, i); break;
        case static_cast<uint32_t>(GgmlType::Q5_K): dst[i] = qtypes::Q5_K::row_element(src, i); break;
        case static_cast<uint32_t>(GgmlType::Q6_K): dst[i] = qtypes::Q6_K::row_element(src, i); break;
        case static_cast<uint32_t>(GgmlType::IQ2_XXS): dst[i] = qtypes::Iq2_XXS::row_element(src, i); break;
        default: break;
    }
}

// Element i of rows x dim: value i % dim of packed row i / dim, decoded by the function the CPU
// uses (fp8::packed_value).
__global__ void dequant_fp8_rows_kernel(const uint8_t* src, float* dst, int64_t rows, int64_t dim) {
    grid_dependency_begin();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * dim) return;
    const int64_t r = i / dim, j = i % dim;
    dst[i] = fp8::packed_value(src + r * fp8::packed_row_bytes(dim), dim, j);
}

bool kernel_decodes(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16:
        case GgmlType::Q8_0:
        case GgmlType::MXFP4:
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ2_XXS: return true;
        default: return false;
    }
}

}  // namespace

cudaError_t dequantize(GgmlType t, const void* src, float* dst, int64_t n, cudaStream_t stream) {
    // A type the kernel has no case for would leave dst unwritten: refuse it instead.
    if (!kernel_decodes(t)) return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    return launch_kernel(dequant_kernel, static_cast<unsigned>(blocks), threads, 0, stream, static_cast<uint32_t>(t),
                         static_cast<const uint8_t*>(src), dst, n);
}

cudaError_t dequantize_fp8_rows(const void* src, float* dst, int64_t rows, int64_t dim, cudaStream_t stream) {
    if (dim <= 0 || dim % fp8::kGroup != 0 || rows < 0) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    const int threads = 256;
    const int64_t blocks = (rows * dim + threads - 1) / threads;
    return launch_kernel(dequant_fp8_rows_kernel, static_cast<unsigned>(blocks), threads, 0, stream,
                         static_cast<const uint8_t*>(src), dst, rows, dim);
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

}  // namespace bg::cuda
