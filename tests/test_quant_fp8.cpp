// The 8-bit floats of one llama.cpp fork's Engram tables (tensor/fp8.h, tensor/fp8_rows.h):
// every FP8-E4M3 and E8M0 code decoded against float64 definitions written here from the OCP
// formats, and the encoder make-model writes such tables with against a nearest-code search.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/fp8.h"
#include "tensor/fp8_rows.h"

namespace {

// E4M3 ("e4m3fn"): 1 sign, 4 exponent bits with bias 7, 3 mantissa bits; exponent 0 is
// subnormal; the all-ones exponent with all-ones mantissa is NaN, and there is no infinity.
double e4m3_reference(unsigned code) {
    const double sign = (code & 0x80) ? -1.0 : 1.0;
    const unsigned e = (code >> 3) & 0xF, m = code & 0x7;
    if (e == 0xF && m == 0x7) return std::numeric_limits<double>::quiet_NaN();
    if (e == 0) return sign * std::ldexp(m / 8.0, -6);
    return sign * std::ldexp(1.0 + m / 8.0, static_cast<int>(e) - 7);
}

// E8M0: an unsigned exponent with bias 127, 255 NaN.
double e8m0_reference(unsigned e) {
    return e == 255 ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, static_cast<int>(e) - 127);
}

TEST(Fp8, E4M3DecodesEveryCodeExactly) {
    int nans = 0;
    for (unsigned c = 0; c < 256; ++c) {
        const float got = bg::fp8::e4m3_to_float(static_cast<uint8_t>(c));
        const double want = e4m3_reference(c);
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << "code " << c;
            ++nans;
            continue;
        }
        EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
        EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c << ": the sign, zero included";
    }
    EXPECT_EQ(nans, 2) << "only 0x7F and 0xFF are NaN";
    EXPECT_EQ(bg::fp8::e4m3_to_float(0x7E), 448.0f);
    EXPECT_EQ(bg::fp8::e4m3_to_float(0x01), 0x1p-9f);  // the smallest subnormal
    EXPECT_EQ(bg::fp8::e4m3_to_float(0x08), 0x1p-6f);  // the smallest normal
}

TEST(Fp8, E8M0DecodesEveryCodeExactly) {
    for (unsigned e = 0; e < 256; ++e) {
        const float got = bg::fp8::e8m0_to_float(static_cast<uint8_t>(e));
        const double want = e8m0_reference(e);
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got));
        else EXPECT_EQ(static_cast<double>(got), want) << "e " << e;  // 2^-127 is a float denormal
    }
}

// The E4M3 code nearest to x by search over every finite code, ties to the even code, beyond
// 448 the largest: what float_to_e4m3 must give.
uint8_t nearest_e4m3(double x) {
    if (std::fabs(x) >= 448.0) return static_cast<uint8_t>((x < 0 ? 0x80 : 0) | 0x7E);
    unsigned best = 0;
    double best_d = INFINITY;
    for (unsigned c = 0; c < 0x7F; ++c) {  // magnitudes, ascending with the code
        const double d = std::fabs(std::fabs(x) - e4m3_reference(c));
        if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
    return static_cast<uint8_t>(best | (x < 0 ? 0x80 : 0));
}

TEST(Fp8, EncodeRoundsToNearestEvenOnRandomValuesAndEveryMidpoint) {
    std::random_device rd;
    const uint32_t seed = rd();
    std::mt19937 gen(seed);
    std::vector<float> xs;
    // Every midpoint between neighbouring magnitudes, and one float either side of it.
    for (unsigned c = 0; c + 1 < 0x7F; ++c) {
        const float mid = static_cast<float>((e4m3_reference(c) + e4m3_reference(c + 1)) / 2);
        for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) xs.push_back(v), xs.push_back(-v);
    }
    std::uniform_real_distribution<float> expo(-14.0f, 10.0f);
    std::normal_distribution<float> nd;
    for (int i = 0; i < 20000; ++i) xs.push_back(nd(gen) * std::exp2(expo(gen)));
    for (float x : xs) {
        const uint8_t got = bg::fp8::float_to_e4m3(x), want = nearest_e4m3(x);
        // Zero keeps the sign of x in both: compare the values, then the codes.
        ASSERT_EQ(e4m3_reference(got), e4m3_reference(want)) << "x " << x << " seed " << seed;
    }
    EXPECT_EQ(bg::fp8::float_to_e4m3(1e6f), 0x7E);
    EXPECT_EQ(bg::fp8::float_to_e4m3(-INFINITY), 0xFE);
    EXPECT_EQ(bg::fp8::float_to_e4m3(NAN), 0x7F);
}

// A fork-fp8 row made from random floats of widely different magnitudes per group: each group's
// scale is the smallest power of two that fits its largest magnitude in 448, and each value is
// the nearest E4M3 of x / scale.
TEST(Fp8, RowQuantisationPicksTheSmallestFittingScaleAndDecodesBack) {
    std::random_device rd;
    const uint32_t seed = rd();
    std::mt19937 gen(seed);
    const int64_t dim = 256;
    std::normal_distribution<float> nd;
    std::uniform_int_distribution<int> ex(-40, 40);
    std::vector<float> x(dim);
    for (int64_t g = 0; g < dim / 32; ++g) {
        const float s = std::ldexp(1.0f, ex(gen));
        for (int j = 0; j < 32; ++j) x[g * 32 + j] = nd(gen) * s;
    }
    x[5] = 0.0f;
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero group
    for (int j = 96; j < 128; ++j) x[j] = nd(gen);
    x[100] = 448.0f * 1024.0f;  // a group whose max is exactly 448 * 2^10
    std::vector<uint8_t> values(dim), scales(dim / 32), packed(bg::fp8::packed_row_bytes(dim));
    bg::fp8::quantize_row(x.data(), values.data(), scales.data(), dim);
    for (int64_t g = 0; g < dim / 32; ++g) {
        double amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[g * 32 + j])));
        const double scale = e8m0_reference(scales[g]);
        if (amax == 0) {
            EXPECT_EQ(scales[g], 0);
            continue;
        }
        EXPECT_LE(amax / scale, 448.0) << "group " << g << " seed " << seed;
        EXPECT_GT(amax / scale, 224.0) << "group " << g << ": a scale half as large fits too; seed " << seed;
        for (int j = 0; j < 32; ++j) {
            const double q = x[g * 32 + j] / scale;  // exact: a power-of-two division
            EXPECT_EQ(e4m3_reference(values[g * 32 + j]), e4m3_reference(nearest_e4m3(q)))
                << "group " << g << " value " << j << " seed " << seed;
        }
    }
    EXPECT_EQ(scales[100 / 32], 127 + 10);
    std::memcpy(packed.data(), values.data(), dim);
    std::memcpy(packed.data() + dim, scales.data(), dim / 32);
    std::vector<float> out(dim);
    bg::fp8::dequantize_packed_rows(packed.data(), out.data(), 1, dim);
    for (int64_t j = 0; j < dim; ++j)
        EXPECT_EQ(static_cast<double>(out[j]), e4m3_reference(values[j]) * e8m0_reference(scales[j / 32])) << j;
}

}  // namespace
