// ggml tensor types: hand-written blocks decoded by hand, fp16/bf16 edge cases, and
// quantise -> dequantise round trips on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "random_inputs.h"
#include "tensor/ggml_types.h"
#include "util/check.h"

using namespace bg;

namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Traits and sizes

TEST(Quant, Traits) {
    EXPECT_EQ(type_traits(2u), nullptr);   // q4_0: not supported
    EXPECT_EQ(type_traits(40u), nullptr);
    ASSERT_NE(type_traits(39u), nullptr);
    EXPECT_STREQ(type_traits(39u)->name, "mxfp4");
    EXPECT_EQ(type_traits(39u)->block_elems, 32);
    EXPECT_EQ(type_traits(39u)->block_bytes, 17);
    EXPECT_EQ(type_traits(GgmlType::Q8_0).block_bytes, 34);
    EXPECT_EQ(type_traits(GgmlType::BF16).block_bytes, 2);
    EXPECT_STREQ(type_name(GgmlType::F16), "f16");
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                       GgmlType::MXFP4}) {
        EXPECT_EQ(parse_type_name(type_name(t)), t);
    }
    EXPECT_EQ(parse_type_name("F32"), GgmlType::F32);  // names in any letter case
    EXPECT_EQ(parse_type_name("MXFP4"), GgmlType::MXFP4);
    EXPECT_THROW(parse_type_name("q4_0"), Error);
    EXPECT_THROW(parse_type_name("f32 "), Error);
    EXPECT_THROW(parse_type_name(""), Error);
    try {
        parse_type_name("Q4_0");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'Q4_0'"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << "the message lists the supported names";
    }
}

// I8 (ggml id 24): read as raw bytes (a fork's FP8 Engram table), so it has traits and a row size
// but no name a user may give as a type.
TEST(Quant, I8IsRawBytes) {
    ASSERT_NE(type_traits(24u), nullptr);
    EXPECT_STREQ(type_traits(24u)->name, "i8");
    EXPECT_EQ(type_traits(24u)->block_elems, 1);
    EXPECT_EQ(type_traits(24u)->block_bytes, 1);
    EXPECT_EQ(row_bytes(GgmlType::I8, 256), 256u);
    EXPECT_THROW(parse_type_name("i8"), Error);
}

TEST(Quant, RowBytes) {
    uint64_t b = 99;
    EXPECT_TRUE(row_bytes_checked(GgmlType::F32, 3, &b));
    EXPECT_EQ(b, 12u);
    EXPECT_TRUE(row_bytes_checked(GgmlType::BF16, 5, &b));
    EXPECT_EQ(b, 10u);
    EXPECT_TRUE(row_bytes_checked(GgmlType::Q8_0, 64, &b));
    EXPECT_EQ(b, 68u);
    EXPECT_TRUE(row_bytes_checked(GgmlType::MXFP4, 4096, &b));
    EXPECT_EQ(b, 128u * 17u);
    EXPECT_TRUE(row_bytes_checked(GgmlType::Q8_0, 0, &b));
    EXPECT_EQ(b, 0u);
    b = 99;
    EXPECT_FALSE(row_bytes_checked(GgmlType::Q8_0, 31, &b));
    EXPECT_FALSE(row_bytes_checked(GgmlType::MXFP4, 33, &b));
    EXPECT_FALSE(row_bytes_checked(GgmlType::Q8_0, -32, &b));
    EXPECT_FALSE(row_bytes_checked(GgmlType::F32, -1, &b));
    // 2^62 elements * 4 bytes = 2^64: one past what a u64 holds.
    EXPECT_FALSE(row_bytes_checked(GgmlType::F32, int64_t{1} << 62, &b));
    EXPECT_TRUE(row_bytes_checked(GgmlType::F32, (int64_t{1} << 62) - 1, &b));
    EXPECT_EQ(b, UINT64_MAX - 3);
    EXPECT_EQ(row_bytes(GgmlType::MXFP4, 64), 34u);
}

// ---------------------------------------------------------------------------------------------
// fp16

TEST(Quant, Fp16Decode) {
    EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
    EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
    EXPECT_EQ(fp16_to_fp32(0x3800), 0.5f);
    EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);                     // max finite
    EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));        // min normal
    EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));        // min subnormal
    EXPECT_EQ(fp16_to_fp32(0x03FF), std::ldexp(1023.0f, -24));     // max subnormal
    EXPECT_EQ(fp16_to_fp32(0x8001), -std::ldexp(1.0f, -24));
    EXPECT_EQ(fp16_to_fp32(0x7C00), std::numeric_limits<float>::infinity());
    EXPECT_EQ(fp16_to_fp32(0xFC00), -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7C01)));  // signalling pattern stays NaN
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0xFE00)));
    const float nz = fp16_to_fp32(0x8000);
    EXPECT_EQ(nz, 0.0f);
    EXPECT_TRUE(std::signbit(nz));
    EXPECT_EQ(fp16_to_fp32(0x3555), (1.0f + 0x155 / 1024.0f) * 0.25f);  // exp 13, mant 0x155
}

TEST(Quant, Fp16EncodeSpecial) {
    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
    EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
    // 65520 is halfway between 65504 (mantissa 0x3FF, odd) and 65536 (= inf): even wins -> inf.
    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);
    EXPECT_EQ(fp32_to_fp16(1e6f), 0x7C00);
    EXPECT_EQ(fp32_to_fp16(-1e30f), 0xFC00);
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
    EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
    const uint16_t n1 = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(n1 & 0x7C00, 0x7C00);
    EXPECT_NE(n1 & 0x03FF, 0);
    // A NaN whose payload sits only in the low 13 bits must not collapse into inf.
    const uint16_t n2 = fp32_to_fp16(from_bits(0x7F800001u));
    EXPECT_TRUE(std::isnan(fp16_to_fp32(n2)));
    // Ties in the normal range: 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10.
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // 1 vs 2 -> 2
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
    // Subnormals: 2^-24 exact; 2^-25 is halfway between 0 (even) and 2^-24.
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25) * 1.0000001f), 0x0001);
    EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -25) * 1.0000001f), 0x8001);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);   // 1.5 ulp: 1 vs 2 -> 2
    EXPECT_EQ(fp32_to_fp16(std::ldexp(5.0f, -25)), 0x0002);   // 2.5 ulp: 2 vs 3 -> 2
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
    // 1023.5 * 2^-24 is halfway between the largest subnormal (odd) and the smallest normal.
    EXPECT_EQ(fp32_to_fp16(std::ldexp(2047.0f, -25)), 0x0400);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.0f, -24)), 0x03FF);
}

TEST(Quant, Fp16ExhaustiveRoundTrip) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        const uint16_t back = fp32_to_fp16(f);
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(fp16_to_fp32(back))) << h;
        } else {
            EXPECT_EQ(back, h) << h;
        }
    }
}

// Every random float lands on the nearest half, ties to the even mantissa.
TEST(Quant, Fp16RandomNearest) {
    std::mt19937 rng = bgtest::fresh_rng();
    std::uniform_int_distribution<int> expo(-27, 16);
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    for (int it = 0; it < 200000; ++it) {
        float f = std::ldexp(mant(rng), expo(rng));
        if (it & 1) f = -f;
        const uint16_t h = fp32_to_fp16(f);
        const double got = fp16_to_fp32(h);
        const double err = std::fabs(got - static_cast<double>(f));
        // Neighbouring halves in magnitude (the encoding is monotone in |value|).
        const uint16_t mag = h & 0x7FFF, sign = h & 0x8000;
        for (int d : {-1, 1}) {
            const int nm = mag + d;
            if (nm < 0 || nm > 0x7C00) continue;
            const double other = fp16_to_fp32(static_cast<uint16_t>(sign | nm));
            const double oerr = std::fabs(other - static_cast<double>(f));
            if (std::isinf(got)) {
                // Overflow: f must be at or past the rounding boundary 65520.
                EXPECT_GE(std::fabs(f), 65520.0f);
                continue;
            }
            ASSERT_LE(err, oerr) << "f=" << f << " h=" << h;
            if (err == oerr) {
                EXPECT_EQ(mag & 1, 0) << "tie not to even, f=" << f;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// bf16

TEST(Quant, Bf16) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
    EXPECT_EQ(bf16_to_fp32(0xC040), -3.0f);
    EXPECT_EQ(bf16_to_fp32(0x0001), std::ldexp(1.0f, -133));   // float denormal
    EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
    // 1 + 2^-8 is halfway between 1 (mantissa 0, even) and 1 + 2^-7.
    EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
    EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
    EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
    EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8) - std::ldexp(1.0f, -20)), 0x3F80);
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
    EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
    // FLT_MAX is past the midpoint between bf16's max and 2^128: rounds to inf.
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x7F7F7FFFu)), 0x7F7F);
    // NaN whose payload is only in the truncated half must stay NaN (not become inf).
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0x7F800001u)))));
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0xFFFFFFFFu)))));
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    // Subnormal float input rounds like any other value.
    EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000u)), 0x0000);  // tie, even -> 0
    EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000u)), 0x0002);  // tie, odd -> up
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_fp32(static_cast<uint16_t>(h));
        EXPECT_EQ(bits(f), h << 16);
        if (!std::isnan(f)) {
            EXPECT_EQ(fp32_to_bf16(f), h);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q8_0

TEST(Quant, Q8_0HandBlock) {
    // Two blocks. Block 0: d = f16 0x3800 = 0.5 (little-endian bytes 00 38).
    //   q[0] = 1 -> 0.5, q[1] = 0xFF = -1 -> -0.5, q[2] = 127 -> 63.5,
    //   q[3] = 0x80 = -128 -> -64, q[4] = 10 -> 5, q[5..31] = 0 -> 0.
    // Block 1: d = f16 0xC000 = -2 (bytes 00 C0); q[j] = j - 16 -> -2 * (j - 16) = 32 - 2j.
    uint8_t blk[68] = {};
    blk[0] = 0x00; blk[1] = 0x38;
    blk[2] = 1; blk[3] = 0xFF; blk[4] = 127; blk[5] = 0x80; blk[6] = 10;
    blk[34] = 0x00; blk[35] = 0xC0;
    for (int j = 0; j < 32; ++j) blk[36 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
    float out[64];
    dequantize_row(GgmlType::Q8_0, blk, out, 64);
    EXPECT_EQ(out[0], 0.5f);
    EXPECT_EQ(out[1], -0.5f);
    EXPECT_EQ(out[2], 63.5f);
    EXPECT_EQ(out[3], -64.0f);
    EXPECT_EQ(out[4], 5.0f);
    for (int j = 5; j < 32; ++j) EXPECT_EQ(out[j], 0.0f);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(out[32 + j], 32.0f - 2.0f * j) << j;
}

TEST(Quant, Q8_0HandQuantize) {
    // amax = 63.5 -> d = 63.5 / 127 = 0.5 exactly (f16 0x3800). q = round(x / 0.5), halves
    // away from zero:
    //   63.5 -> 127, -63.5 -> -127, 1.0 -> 2, 0.75 -> 1.5 -> 2, -0.75 -> -2,
    //   0.2 -> 0.4 -> 0, 0.3 -> 0.6 -> 1, -10.1 -> -20.2 -> -20, 0.25 -> 0.5 -> 1
    float x[32] = {};
    x[0] = 63.5f; x[1] = -63.5f; x[2] = 1.0f; x[3] = 0.75f; x[4] = -0.75f;
    x[5] = 0.2f; x[6] = 0.3f; x[7] = -10.1f; x[8] = 0.25f;
    uint8_t blk[34];
    quantize_row(GgmlType::Q8_0, x, blk, 32);
    EXPECT_EQ(blk[0], 0x00);
    EXPECT_EQ(blk[1], 0x38);
    const int8_t want[9] = {127, -127, 2, 2, -2, 0, 1, -20, 1};
    const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
    for (int j = 0; j < 9; ++j) EXPECT_EQ(q[j], want[j]) << j;
    for (int j = 9; j < 32; ++j) EXPECT_EQ(q[j], 0);
    // All-zero block: d = 0, q = 0.
    float z[32] = {};
    quantize_row(GgmlType::Q8_0, z, blk, 32);
    for (int j = 0; j < 34; ++j) EXPECT_EQ(blk[j], 0);
}

// ---------------------------------------------------------------------------------------------
// MXFP4

TEST(Quant, E8M0AndE2M1) {
    EXPECT_EQ(e8m0_to_fp32(127), 1.0f);
    EXPECT_EQ(e8m0_to_fp32(128), 2.0f);
    EXPECT_EQ(e8m0_to_fp32(120), 1.0f / 128);
    EXPECT_EQ(e8m0_to_fp32(254), std::ldexp(1.0f, 127));
    EXPECT_EQ(e8m0_to_fp32(1), std::ldexp(1.0f, -126));
    EXPECT_EQ(e8m0_to_fp32(0), std::ldexp(1.0f, -127));
    EXPECT_TRUE(std::isnan(e8m0_to_fp32(255)));
    const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_to_fp32(static_cast<uint8_t>(c)), want[c]) << c;
}

TEST(Quant, Mxfp4HandBlock) {
    // Block 0: scale byte 128 -> 2^(128-127) = 2.
    //   qs[0] = 0xF7: low nibble 7 -> element 0  =  6 * 2 = 12
    //                 high nibble F -> element 16 = -6 * 2 = -12
    //   qs[1] = 0x21: element 1  = code 1 -> 0.5 * 2 = 1;  element 17 = code 2 -> 1 * 2 = 2
    //   qs[2] = 0x98: element 2  = code 8 -> 0;            element 18 = code 9 -> -0.5 * 2 = -1
    //   qs[3] = 0x53: element 3  = code 3 -> 1.5 * 2 = 3;  element 19 = code 5 -> 3 * 2 = 6
    //   qs[4] = 0xC6: element 4  = code 6 -> 4 * 2 = 8;    element 20 = code C -> -2 * 2 = -4
    //   qs[15] = 0x4E: element 15 = code E -> -4 * 2 = -8; element 31 = code 4 -> 2 * 2 = 4
    //   other bytes 0 -> 0.
    // Block 1: scale byte 125 -> 2^-2 = 0.25; every byte 0x1D:
    //   elements 0..15 = code D -> -3 * 0.25 = -0.75; elements 16..31 = code 1 -> 0.125.
    uint8_t blk[34] = {};
    blk[0] = 128;
    blk[1 + 0] = 0xF7; blk[1 + 1] = 0x21; blk[1 + 2] = 0x98; blk[1 + 3] = 0x53;
    blk[1 + 4] = 0xC6; blk[1 + 15] = 0x4E;
    blk[17] = 125;
    for (int j = 0; j < 16; ++j) blk[18 + j] = 0x1D;
    float out[64];
    dequantize_row(GgmlType::MXFP4, blk, out, 64);
    float want[64] = {};
    want[0] = 12; want[16] = -12;
    want[1] = 1;  want[17] = 2;
    want[2] = 0;  want[18] = -1;
    want[3] = 3;  want[19] = 6;
    want[4] = 8;  want[20] = -4;
    want[15] = -8; want[31] = 4;
    for (int j = 0; j < 16; ++j) {
        want[32 + j] = -0.75f;
        want[48 + j] = 0.125f;
    }
    for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], want[i]) << i;
}

// ggml decodes with the doubled table {0,1,2,3,4,6,8,12} times 2^(e-128) built from bits
// (2^-128 and 2^-127 as float denormals for e = 0, 1); check every (scale, code) against that.
TEST(Quant, Mxfp4MatchesGgmlFormulaExhaustive) {
    const int8_t doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int e = 0; e < 256; ++e) {
        const uint32_t hb = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
        const float half_scale = from_bits(hb);
        for (int code = 0; code < 16; ++code) {
            uint8_t blk[17] = {};
            blk[0] = static_cast<uint8_t>(e);
            blk[1] = static_cast<uint8_t>(code | (code << 4));
            float out[32];
            dequantize_row(GgmlType::MXFP4, blk, out, 32);
            const float want = static_cast<float>(doubled[code]) * half_scale;
            EXPECT_EQ(bits(out[0]), bits(want)) << "e=" << e << " code=" << code;
            EXPECT_EQ(bits(out[16]), bits(want)) << "e=" << e << " code=" << code;
        }
    }
    // Spot values by hand: e = 0, code 1 -> 0.5 * 2^-127 = 2^-128; e = 255, code 7 -> 6 * 2^128
    // overflows to inf, as in ggml.
    uint8_t blk[17] = {};
    blk[1] = 0x71;
    float out[32];
    dequantize_row(GgmlType::MXFP4, blk, out, 32);
    EXPECT_EQ(out[0], std::ldexp(1.0f, -128));
    EXPECT_EQ(out[16], std::ldexp(3.0f, -126));
    blk[0] = 255;
    dequantize_row(GgmlType::MXFP4, blk, out, 32);
    EXPECT_EQ(out[0], std::ldexp(1.0f, 127));
    EXPECT_TRUE(std::isinf(out[16]));
}

TEST(Quant, Mxfp4HandQuantize) {
    // amax = 12 = 0.75 * 2^4: the smallest s with 12 <= 6 * 2^s is 1 -> scale byte 128.
    // Scaled values v = x / 2 and the chosen codes (ties go to the even code):
    //   x[0]  = 12    v = 6     -> code 7
    //   x[16] = -12   v = -6    -> code F
    //   x[1]  = 1     v = 0.5   -> code 1
    //   x[17] = 2.5   v = 1.25  tie 1.0 (code 2) / 1.5 (code 3) -> code 2
    //   x[2]  = 3.5   v = 1.75  tie 1.5 (code 3) / 2.0 (code 4) -> code 4
    //   x[18] = 0.5   v = 0.25  tie 0 (code 0) / 0.5 (code 1)   -> code 0
    //   x[3]  = 5     v = 2.5   tie 2 (code 4) / 3 (code 5)     -> code 4
    //   x[19] = -7    v = -3.5  tie 3 (code 5) / 4 (code 6)     -> code E
    //   x[4]  = 10    v = 5     tie 4 (code 6) / 6 (code 7)     -> code 6
    //   x[20] = -1.5  v = -0.75 tie 0.5 (code 1) / 1 (code 2)   -> code A
    //   x[5]  = 2.6   v = 1.3   nearest 1.5                     -> code 3
    //   x[21] = -0.1  v = -0.05 nearest 0                       -> code 0 (no negative zero)
    float x[32] = {};
    x[0] = 12; x[16] = -12; x[1] = 1; x[17] = 2.5f; x[2] = 3.5f; x[18] = 0.5f;
    x[3] = 5; x[19] = -7; x[4] = 10; x[20] = -1.5f; x[5] = 2.6f; x[21] = -0.1f;
    uint8_t blk[17];
    quantize_row(GgmlType::MXFP4, x, blk, 32);
    EXPECT_EQ(blk[0], 128);
    EXPECT_EQ(blk[1 + 0], 0xF7);
    EXPECT_EQ(blk[1 + 1], 0x21);
    EXPECT_EQ(blk[1 + 2], 0x04);
    EXPECT_EQ(blk[1 + 3], 0xE4);
    EXPECT_EQ(blk[1 + 4], 0xA6);
    EXPECT_EQ(blk[1 + 5], 0x03);
    for (int j = 6; j < 16; ++j) EXPECT_EQ(blk[1 + j], 0);

    // amax = 13 > 12: needs s = 2 -> byte 129. amax = 0.75 exactly = 6 * 2^-3 -> byte 124.
    float y[32] = {};
    y[7] = -13;
    quantize_row(GgmlType::MXFP4, y, blk, 32);
    EXPECT_EQ(blk[0], 129);
    EXPECT_EQ(blk[1 + 7], 0x0D);  // -13 / 4 = -3.25 -> nearest -3 -> code D
    y[7] = 0.75f;
    quantize_row(GgmlType::MXFP4, y, blk, 32);
    EXPECT_EQ(blk[0], 124);
    EXPECT_EQ(blk[1 + 7], 0x07);

    // All zeros: e = 0, codes 0.
    float z[32] = {};
    quantize_row(GgmlType::MXFP4, z, blk, 32);
    for (int j = 0; j < 17; ++j) EXPECT_EQ(blk[j], 0);
    // Tiny values clamp at e = 0 (scale 2^-127): 2^-140 / 2^-127 = 2^-13 -> code 0.
    z[0] = std::ldexp(1.0f, -126);  // v = 2 -> code 4
    z[1] = std::ldexp(1.0f, -140);
    quantize_row(GgmlType::MXFP4, z, blk, 32);
    EXPECT_EQ(blk[0], 0);
    EXPECT_EQ(blk[1], 0x04);
    EXPECT_EQ(blk[2], 0x00);
}

// ---------------------------------------------------------------------------------------------
// Round trips on random inputs

namespace {

std::vector<float> random_row(std::mt19937& rng, int64_t n) {
    // Magnitudes spread over several octaves, with both signs, never all zero.
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<int> oct(-6, 6);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = std::ldexp(u(rng), oct(rng));
    return v;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> y(x.size());
    dequantize_row(t, q.data(), y.data(), n);
    return y;
}

}  // namespace

TEST(Quant, RoundTripFloatTypes) {
    std::mt19937 rng = bgtest::fresh_rng();
    const auto x = random_row(rng, 4096);
    const auto f32 = round_trip(GgmlType::F32, x);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits(f32[i]), bits(x[i]));
    // Half keeps 11 significant bits: relative error <= 2^-11 above the subnormal range
    // (inputs here are >= 2^-7 in magnitude except a few near zero: absolute bound 2^-25).
    const auto f16 = round_trip(GgmlType::F16, x);
    for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LE(std::fabs(f16[i] - x[i]), std::fabs(x[i]) * std::ldexp(1.0f, -11) + std::ldexp(1.0f, -25)) << i;
    // bf16 keeps 8 significant bits: relative error <= 2^-8.
    const auto b16 = round_trip(GgmlType::BF16, x);
    for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LE(std::fabs(b16[i] - x[i]), std::fabs(x[i]) * std::ldexp(1.0f, -8)) << i;
}

TEST(Quant, RoundTripQ8_0) {
    std::mt19937 rng = bgtest::fresh_rng();
    const auto x = random_row(rng, 32 * 200);
    const auto y = round_trip(GgmlType::Q8_0, x);
    for (size_t b = 0; b < x.size() / 32; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const float d = amax / 127;
        // Half a step from rounding q, plus q * (d - f16(d)) <= 127 * d * 2^-11 from storing d
        // as f16: together < 0.57 d.
        for (int j = 0; j < 32; ++j)
            EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), 0.57f * d) << b << "," << j;
    }
}

TEST(Quant, RoundTripMxfp4) {
    std::mt19937 rng = bgtest::fresh_rng();
    const int64_t n = 32 * 300;
    const auto x = random_row(rng, n);
    std::vector<uint8_t> q(row_bytes(GgmlType::MXFP4, n));
    quantize_row(GgmlType::MXFP4, x.data(), q.data(), n);
    std::vector<float> y(x.size());
    dequantize_row(GgmlType::MXFP4, q.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
        const int e = q[b * 17];
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        // The scale is the smallest power of two that fits amax into +-6.
        const float scale = std::ldexp(1.0f, e - 127);
        EXPECT_LE(amax, 6 * scale) << b;
        EXPECT_GT(amax, 3 * scale) << b;
        for (int j = 0; j < 32; ++j) {
            const float xi = x[b * 32 + j], yi = y[b * 32 + j];
            // Nearest representable value: no code does better.
            const float err = std::fabs(yi - xi);
            for (int c = 0; c < 16; ++c) {
                const float alt = e2m1_to_fp32(static_cast<uint8_t>(c)) * scale;
                ASSERT_LE(err, std::fabs(alt - xi)) << "block " << b << " elem " << j;
            }
            // Widest E2M1 gap is 2 (4..6): error at most one scale unit.
            EXPECT_LE(err, scale);
        }
    }
}
