// Functions of the weight-type traits are compiled by the host compiler (CPU kernels, tests)
// and by nvcc (CUDA kernels) from one definition, so both backends decode a block the same way.
// The scalar helpers here are what those shared decoders build on.
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define BG_HD __host__ __device__ __forceinline__
#else
#define BG_HD inline
#endif

namespace bg::qtypes {

// Products and differences rounded one at a time, as the CPU build computes them (it has no FMA
// contraction without -march): nvcc would otherwise fuse d * q - m into one FMA and the GPU's
// dequantised weights would differ in the last bit from the CPU's (and from ggml's).
BG_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
BG_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
BG_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// IEEE half bits to float, exactly (subnormals, inf and NaN included).
BG_HD float half_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    return fp16_to_fp32(h);
#endif
}

// Little-endian loads from byte addresses: ggml blocks sit at any byte offset of a row.
BG_HD uint32_t load_le16(const uint8_t* p) { return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8); }
BG_HD uint32_t load_le32(const uint8_t* p) { return load_le16(p) | (load_le16(p + 2) << 16); }
BG_HD float load_half(const uint8_t* p) { return half_to_float(static_cast<uint16_t>(load_le16(p))); }

}  // namespace bg::qtypes
