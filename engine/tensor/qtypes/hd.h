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

// PTX prmt.b32 in its generic mode: byte i of the result is byte (s >> 4i) & 7 of {b, a} (a's
// bytes 0-3, b's 4-7), or, where bit 3 of that selector nibble is set, the sign of that byte
// replicated over all 8 bits. CUDA's __byte_perm masks the selector to three bits first (one
// more instruction) and so has no sign mode; the MXFP4 decoder uses that mode to drop the codes
// of one sign. The host form is the same function, for the decoders' host tests.
BG_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
#else
    const uint64_t src = (static_cast<uint64_t>(b) << 32) | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) {
        const uint32_t sel = (s >> (4 * i)) & 15u;
        uint32_t byte = static_cast<uint32_t>(src >> (8 * (sel & 7u))) & 0xFFu;
        if (sel & 8u) byte = (byte & 0x80u) ? 0xFFu : 0x00u;
        r |= byte << (8 * i);
    }
    return r;
#endif
}

}  // namespace bg::qtypes
