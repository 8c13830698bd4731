#include "tensor/ggml_types.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <iterator>

#include "tensor/kquant_quantizers.h"
#include "tensor/qtypes/iq2_xxs.h"
#include "tensor/qtypes/q2_k.h"
#include "tensor/qtypes/q3_k.h"
#include "tensor/qtypes/q4_k.h"
#include "tensor/qtypes/q5_k.h"
#include "tensor/qtypes/q6_k.h"
#include "util/check.h"

namespace bg {

namespace {

constexpr TypeTraits kF32{"f32", 1, 4};
constexpr TypeTraits kF16{"f16", 1, 2};
constexpr TypeTraits kBF16{"bf16", 1, 2};
constexpr TypeTraits kQ8_0{"q8_0", 32, 34};
constexpr TypeTraits kMXFP4{"mxfp4", 32, 17};
constexpr TypeTraits kQ2_K{"q2_K", 256, qtypes::Q2_K::kBlockBytes};
constexpr TypeTraits kQ3_K{"q3_K", 256, qtypes::Q3_K::kBlockBytes};
constexpr TypeTraits kQ4_K{"q4_K", 256, qtypes::Q4_K::kBlockBytes};
constexpr TypeTraits kQ5_K{"q5_K", 256, qtypes::Q5_K::kBlockBytes};
constexpr TypeTraits kQ6_K{"q6_K", 256, qtypes::Q6_K::kBlockBytes};
constexpr TypeTraits kIQ2_XXS{"iq2_xxs", 256, qtypes::Iq2_XXS::kBlockBytes};

constexpr GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                  GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                  GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS};
constexpr TypeTraits kI8{"i8", 1, 1};

constexpr int kQK = 32;  // elements per block of Q8_0 and MXFP4

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// E2M1 magnitudes of codes 0..7. Code 8 (negative zero) decodes to +0 as in ggml, whose
// int8 table holds 0 there; keeping the sign would still compare equal but not bit-equal.
constexpr float kE2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f,  3.0f,  4.0f,  6.0f,
                             0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Magnitude code (0..7) of the E2M1 value nearest to a >= 0. Ties go to the even code, i.e.
// round-half-to-even on E2M1's one mantissa bit, as IEEE rounding would do: 0.25 -> 0,
// 0.75 -> 2 (1.0), 1.25 -> 2, 1.75 -> 4 (2.0), 2.5 -> 4, 3.5 -> 6 (4.0), 5 -> 6.
// Anything above 5 (including values past 6 and NaN, which fails every test) saturates to 6.
inline uint8_t e2m1_magnitude_code(float a) {
    // Thresholds are the midpoints of {0, 0.5, 1, 1.5, 2, 3, 4, 6}, inclusive on the side of
    // the even code (ties to even). Counting the thresholds passed, without branches, keeps
    // random weights from mispredicting on every element.
    return static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                (a >= 3.5f) + (a > 5.0f));
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + b * 34;  // [f16 d][32 x int8]
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float d = fp16_to_fp32(dh);
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * static_cast<float>(q[j]);
    }
}

void quant_q8_0(const float* src, uint8_t* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        const float* x = src + b * kQK;
        uint8_t* blk = dst + b * 34;
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const uint16_t dh = fp32_to_fp16(d);
        std::memcpy(blk, &dh, 2);
        int8_t* q = reinterpret_cast<int8_t*>(blk + 2);
        for (int j = 0; j < kQK; ++j) {
            float v = d != 0.0f ? std::round(x[j] / d) : 0.0f;
            // x/d is within [-127, 127] up to rounding of d; the clamp guards that edge.
            v = std::fmin(127.0f, std::fmax(-127.0f, v));
            q[j] = static_cast<int8_t>(v);
        }
    }
}

// ggml's decoding: doubled E2M1 values (integers) times 2^(e-128). The same numbers as
// e2m1(code) * 2^(e-127), but 2^(e-128) is a float for every e (2^-128 a denormal, 2^127 the
// top), where 2^(e-127) is not at e = 255. Products are exact wherever representable, so this
// matches ggml bit for bit, overflow to inf at e = 255 included.
constexpr float kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline float e8m0_half(uint8_t e) {
    return bits_f32(e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23));
}

void dequant_mxfp4(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + b * 17;  // [e8m0 e][16 bytes: lo nibble = j, hi = j+16]
        const float d = e8m0_half(blk[0]);
        for (int j = 0; j < kQK / 2; ++j) {
            const uint8_t byte = blk[1 + j];
            dst[b * kQK + j] = kE2M1Doubled[byte & 0x0F] * d;
            dst[b * kQK + j + kQK / 2] = kE2M1Doubled[byte >> 4] * d;
        }
    }
}

void quant_mxfp4(const float* src, uint8_t* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        const float* x = src + b * kQK;
        uint8_t* blk = dst + b * 17;
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) {
            const float a = std::fabs(x[j]);
            amax = a > amax ? a : amax;  // a NaN compares false and is ignored, as with fmax
        }
        if (amax == 0.0f) {
            std::memset(blk, 0, 17);
            continue;
        }
        // Smallest s with amax <= 6 * 2^s. With amax = m * 2^E, m in [0.5, 1):
        // 6 * 2^(E-3) = 0.75 * 2^E covers m <= 0.75; otherwise 6 * 2^(E-2) = 1.5 * 2^E does,
        // and 6 * 2^(E-4) = 0.375 * 2^E never does.
        int s;
        if (std::isfinite(amax)) {
            int E;
            const float m = std::frexp(amax, &E);
            s = m <= 0.75f ? E - 3 : E - 2;
        } else {
            s = 127;  // inf in the block: largest scale, every finite value is ~0 next to it
        }
        // e = 255 means NaN in OCP MX; finite float inputs never need s > 127 anyway.
        int e = s + 127;
        if (e < 0) e = 0;
        if (e > 254) e = 254;
        s = e - 127;
        blk[0] = static_cast<uint8_t>(e);
        // 2^-s is exactly representable for s in [-127, 127], and multiplying by it is exact
        // wherever the product is normal, which covers the rounding thresholds (0.25 .. 5);
        // one multiply instead of an ldexp per element makes generating models much faster.
        const float inv_scale = std::ldexp(1.0f, -s);
        for (int j = 0; j < kQK / 2; ++j) {
            uint8_t codes[2];
            for (int h = 0; h < 2; ++h) {
                const float v = x[j + h * (kQK / 2)];
                const uint8_t mag = e2m1_magnitude_code(std::fabs(v * inv_scale));
                codes[h] = static_cast<uint8_t>(mag | ((std::signbit(v) && mag != 0) ? 8 : 0));
            }
            blk[1 + j] = static_cast<uint8_t>(codes[0] | (codes[1] << 4));
        }
    }
}

// The 256-weight types, through their traits' decoders (the ones the CUDA paths call too).
template <class T>
void dequant_super_blocks(const uint8_t* src, float* dst, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) T::decode_block(src + b * T::kBlockBytes, dst + b * T::kBlockWeights);
}

}  // namespace

const TypeTraits* type_traits(uint32_t type_id) {
    switch (type_id) {
        case static_cast<uint32_t>(GgmlType::F32): return &kF32;
        case static_cast<uint32_t>(GgmlType::F16): return &kF16;
        case static_cast<uint32_t>(GgmlType::Q8_0): return &kQ8_0;
        case static_cast<uint32_t>(GgmlType::BF16): return &kBF16;
        case static_cast<uint32_t>(GgmlType::MXFP4): return &kMXFP4;
        case static_cast<uint32_t>(GgmlType::Q2_K): return &kQ2_K;
        case static_cast<uint32_t>(GgmlType::Q3_K): return &kQ3_K;
        case static_cast<uint32_t>(GgmlType::Q4_K): return &kQ4_K;
        case static_cast<uint32_t>(GgmlType::Q5_K): return &kQ5_K;
        case static_cast<uint32_t>(GgmlType::Q6_K): return &kQ6_K;
        case static_cast<uint32_t>(GgmlType::IQ2_XXS): return &kIQ2_XXS;
        case static_cast<uint32_t>(GgmlType::I8): return &kI8;
        default: return nullptr;
    }
}

const TypeTraits& type_traits(GgmlType t) {
    const TypeTraits* tr = type_traits(static_cast<uint32_t>(t));
    BG_CHECK_MSG(tr != nullptr, "GgmlType value outside the supported set");
    return *tr;
}

const char* type_name(GgmlType t) { return type_traits(t).name; }

const char* ggml_type_name_any(uint32_t type_id) {
    // ggml.h's enum ggml_type; ids 4, 5, 31..33 and 36..38 are retired.
    static constexpr const char* kNames[] = {
        "f32",    "f16",    "q4_0",   "q4_1",    nullptr, nullptr, "q5_0",  "q5_1",  "q8_0",     "q8_1",
        "q2_K",   "q3_K",   "q4_K",   "q5_K",    "q6_K",  "q8_K",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
        "iq4_nl", "iq3_s",  "iq2_s",  "iq4_xs",  "i8",    "i16",   "i32",   "i64",   "f64",      "iq1_m",
        "bf16",   nullptr,  nullptr,  nullptr,   "tq1_0", "tq2_0", nullptr, nullptr, nullptr,    "mxfp4",
        "nvfp4",  "q1_0",   "q2_0"};
    return type_id < std::size(kNames) ? kNames[type_id] : nullptr;
}

GgmlType parse_type_name(const std::string& name) {
    auto same = [](const std::string& a, const char* b) {
        if (a.size() != std::strlen(b)) return false;
        for (size_t i = 0; i < a.size(); ++i)
            if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
                return false;
        return true;
    };
    std::string names;
    for (GgmlType t : kAllTypes) {
        if (same(name, type_traits(t).name)) return t;
        names += names.empty() ? "" : ", ";
        names += type_traits(t).name;
    }
    fail("unknown tensor type '%s' (supported: %s)", name.c_str(), names.c_str());
}

bool row_bytes_checked(GgmlType t, int64_t n, uint64_t* out) {
    const TypeTraits* tr = type_traits(static_cast<uint32_t>(t));
    if (tr == nullptr || n < 0 || n % tr->block_elems != 0) return false;
    const uint64_t blocks = static_cast<uint64_t>(n / tr->block_elems);
    uint64_t bytes;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(tr->block_bytes), &bytes)) return false;
    *out = bytes;
    return true;
}

uint64_t row_bytes(GgmlType t, int64_t n) {
    uint64_t bytes = 0;
    BG_CHECK_MSG(row_bytes_checked(t, n, &bytes), "row size is not a whole number of blocks");
    return bytes;
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
    const TypeTraits& tr = type_traits(t);
    BG_CHECK(n >= 0 && n % tr.block_elems == 0);
    const uint8_t* s = static_cast<const uint8_t*>(src);
    switch (t) {
        case GgmlType::F32:
            std::memcpy(dst, s, static_cast<size_t>(n) * 4);
            return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                dst[i] = fp16_to_fp32(h);
            }
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                dst[i] = bf16_to_fp32(h);
            }
            return;
        case GgmlType::Q8_0: dequant_q8_0(s, dst, n / kQK); return;
        case GgmlType::MXFP4: dequant_mxfp4(s, dst, n / kQK); return;
        case GgmlType::Q2_K: dequant_super_blocks<qtypes::Q2_K>(s, dst, n / 256); return;
        case GgmlType::Q3_K: dequant_super_blocks<qtypes::Q3_K>(s, dst, n / 256); return;
        case GgmlType::Q4_K: dequant_super_blocks<qtypes::Q4_K>(s, dst, n / 256); return;
        case GgmlType::Q5_K: dequant_super_blocks<qtypes::Q5_K>(s, dst, n / 256); return;
        case GgmlType::Q6_K: dequant_super_blocks<qtypes::Q6_K>(s, dst, n / 256); return;
        case GgmlType::IQ2_XXS: dequant_super_blocks<qtypes::Iq2_XXS>(s, dst, n / 256); return;
        case GgmlType::I8: break;  // raw bytes: see ggml_types.h
    }
    BG_CHECK_MSG(false, "no float conversion for this GgmlType (i8 is raw bytes)");
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
    const TypeTraits& tr = type_traits(t);
    BG_CHECK(n >= 0 && n % tr.block_elems == 0);
    uint8_t* d = static_cast<uint8_t*>(dst);
    switch (t) {
        case GgmlType::F32:
            std::memcpy(d, src, static_cast<size_t>(n) * 4);
            return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = fp32_to_fp16(src[i]);
                std::memcpy(d + 2 * i, &h, 2);
            }
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = fp32_to_bf16(src[i]);
                std::memcpy(d + 2 * i, &h, 2);
            }
            return;
        case GgmlType::Q8_0: quant_q8_0(src, d, n / kQK); return;
        case GgmlType::MXFP4: quant_mxfp4(src, d, n / kQK); return;
        case GgmlType::Q2_K: quantize_q2_k(src, d, n / 256); return;
        case GgmlType::Q3_K: quantize_q3_k(src, d, n / 256); return;
        case GgmlType::Q4_K: quantize_q4_k(src, d, n / 256); return;
        case GgmlType::Q5_K: quantize_q5_k(src, d, n / 256); return;
        case GgmlType::Q6_K: quantize_q6_k(src, d, n / 256); return;
        case GgmlType::IQ2_XXS: quantize_iq2_xxs(src, d, n / 256); return;
        case GgmlType::I8: break;  // raw bytes: see ggml_types.h
    }
    BG_CHECK_MSG(false, "no float conversion for this GgmlType (i8 is raw bytes)");
}

float fp16_to_fp32(uint16_t h) {
    // Branch-free so row conversion vectorises: shift exponent and mantissa into float position
    // (exponent still biased by 15) and multiply by 2^112 to rebias. The multiply is exact, and
    // it also normalises half subnormals, which land as float denormals m * 2^-136 before it.
    // Inf/NaN (exponent 31) instead get the float's all-ones exponent, payload kept.
    // (Assumes denormals are not flushed: no -ffast-math / DAZ in this process.)
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t em = static_cast<uint32_t>(h & 0x7FFF) << 13;
    const float scaled = bits_f32(em) * 0x1p112f;
    const uint32_t finite = f32_bits(scaled);
    const uint32_t special = em | 0x7F800000u;
    const uint32_t is_special = 0u - static_cast<uint32_t>((h & 0x7C00) == 0x7C00);  // all ones or 0
    return bits_f32(sign | (special & is_special) | (finite & ~is_special));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
    const int exp = static_cast<int>((u >> 23) & 0xFF);
    const uint32_t mant = u & 0x7FFFFF;
    if (exp == 255) {
        if (mant == 0) return sign | 0x7C00;
        // Keep the top payload bits and force the quiet bit so a NaN never becomes inf.
        return static_cast<uint16_t>(sign | 0x7C00 | 0x200 | (mant >> 13));
    }
    const int e = exp - 127;
    if (e > 15) return sign | 0x7C00;
    if (e >= -14) {
        // Normal half. A carry out of the mantissa bumps the exponent, up to inf: still correct.
        uint32_t r = (static_cast<uint32_t>(e + 15) << 10) | (mant >> 13);
        const uint32_t rem = mant & 0x1FFF;
        if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
        return static_cast<uint16_t>(sign | r);
    }
    if (e >= -25) {
        // Subnormal half (unit 2^-24); a carry into bit 10 yields the smallest normal.
        const uint32_t m = mant | 0x800000;  // value m * 2^(e-23)
        const int shift = -e - 1;            // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) ++r;
        return static_cast<uint16_t>(sign | r);
    }
    return sign;
}

uint16_t fp32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

float e8m0_to_fp32(uint8_t e) {
    if (e == 255) return bits_f32(0x7FC00000u);
    if (e == 0) return bits_f32(0x00400000u);  // 2^-127 is a float denormal
    return bits_f32(static_cast<uint32_t>(e) << 23);
}

float e2m1_to_fp32(uint8_t code) {
    BG_CHECK(code < 16);
    return kE2M1[code];
}

}  // namespace bg
