// ggml tensor types the engine reads and writes, with their block layouts and exact
// (de)quantisation. Layouts follow ggml so a real GGUF file decodes bit for bit:
//   F32   4 bytes/elem
//   F16   IEEE half, 2 bytes/elem
//   BF16  upper 16 bits of an IEEE float, 2 bytes/elem
//   Q8_0  blocks of 32: f16 scale d, then 32 x int8 q; value = d * q            (34 bytes)
//   MXFP4 blocks of 32: one E8M0 scale byte e, then 16 bytes of E2M1 codes; the low nibble of
//         byte j is element j, the high nibble element j+16; value = e2m1(code) * 2^(e-127)
//                                                                               (17 bytes)
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS  blocks of 256 (84, 110, 144, 176, 210, 66 bytes);
//         layouts and decoding in tensor/qtypes/<type>.h, shared with the CUDA paths
//   I8    1 byte/elem, raw bytes with no value of their own: the engine reads them only as an
//         Engram table in one llama.cpp fork's format (FP8-E4M3 values and their E8M0 scales,
//         tensor/fp8_rows.h), so they neither dequantise nor parse as a type name
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace bg {

// Numeric ids are ggml's (they are what a GGUF file stores).
enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ2_XXS = 16,
    I8 = 24,
    BF16 = 30,
    MXFP4 = 39,
};

struct TypeTraits {
    const char* name;      // ggml's name: "f32", "f16", "bf16", "q8_0", "mxfp4", "q2_K", .., "iq2_xxs"
    int64_t block_elems;   // elements per block (1 for plain float types)
    int64_t block_bytes;   // bytes per block
};

// Traits of a ggml type id, or nullptr when the engine does not support that id.
const TypeTraits* type_traits(uint32_t type_id);
const TypeTraits& type_traits(GgmlType t);
const char* type_name(GgmlType t);
// ggml's name of any type id it defines ("q4_0", "iq1_m", ...), supported or not; nullptr for an
// id ggml does not define (for error messages about files).
const char* ggml_type_name_any(uint32_t type_id);
// Parses a supported type's ggml name, in any letter case ("q4_K", "Q4_K", "q4_k"); throws
// bg::Error naming the text otherwise.
GgmlType parse_type_name(const std::string& name);

// Bytes of a row of n elements; false when n is not a whole number of blocks or overflows.
bool row_bytes_checked(GgmlType t, int64_t n, uint64_t* out);
// Same, aborting on a broken invariant (for sizes already validated).
uint64_t row_bytes(GgmlType t, int64_t n);

// Exact conversion of n elements (n a multiple of the block size) to float32; not for I8.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// Conversion of n float32 values into type t (round to nearest; for MXFP4 the shared exponent
// is chosen so the block's largest magnitude fits in E2M1's range; the 256-weight types by the
// searches of tensor/kquant_quantizers.h); not for I8.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// Scalar helpers.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   // round to nearest even
// A BF16 is the top half of its float32 (inline: the CPU's BF16 rows decode one per weight).
inline float bf16_to_fp32(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint16_t fp32_to_bf16(float f);   // round to nearest even; NaN stays NaN
float e8m0_to_fp32(uint8_t e);    // 2^(e-127), e = 0 gives 2^-127 (denormal), 255 gives NaN
float e2m1_to_fp32(uint8_t code); // code in 0..15: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}

}  // namespace bg
