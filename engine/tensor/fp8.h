// OCP 8-bit floats as one llama.cpp fork stores an Engram table (tensor/fp8_rows.h): FP8-E4M3
// values ("e4m3fn": torch.float8_e4m3fn) and E8M0 power-of-two scales (torch.float8_e8m0fnu).
// Decoding is compiled by the host compiler and by nvcc from these definitions (BG_HD), so the
// CPU and CUDA paths give the same floats bit for bit.
//
//   E4M3  s eeee mmm, exponent bias 7: e = 0 is subnormal, m/8 * 2^-6; e = 1..15 is
//         (1 + m/8) * 2^(e-7); no infinities: 0x7F and 0xFF (e = 15, m = 7) are NaN, so the
//         largest magnitude is 1.75 * 2^8 = 448.
//   E8M0  eeeeeeee, no sign, no mantissa: 2^(e-127), e = 255 is NaN (torch.float8_e8m0fnu's
//         reading; ggml's E8M0 helper gives inf there: either way no group decodes to numbers,
//         and e8m0_for_max never writes it).
#pragma once

#include <cstdint>

#include "tensor/qtypes/hd.h"

namespace bg::fp8 {

constexpr float kE4M3Max = 448.0f;

BG_HD float bits_to_float(uint32_t bits) {
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

// Exact: every E4M3 value is a float. Subnormals are built as m * 2^-9 (an exact product of
// small integers and a power of two), not from float denormals, so no flush-to-zero mode can
// change them.
BG_HD float e4m3_to_float(uint8_t code) {
    const uint32_t mag = code & 0x7Fu;
    float v;
    if (mag == 0x7Fu) v = bits_to_float(0x7FC00000u);
    else if (mag < 0x08u) v = static_cast<float>(mag) * 0x1p-9f;
    // e in 1..15 rebiased from 7 to 127 (+120 in the exponent field), the 3 mantissa bits on top.
    else v = bits_to_float((mag + (120u << 3)) << 20);
    return (code & 0x80u) ? -v : v;
}

// 2^(e-127) exactly; e = 0 is 2^-127, a float denormal, built from its bits.
BG_HD float e8m0_to_float(uint8_t e) {
    if (e == 255) return bits_to_float(0x7FC00000u);
    if (e == 0) return bits_to_float(0x00400000u);
    return bits_to_float(static_cast<uint32_t>(e) << 23);
}

// The E4M3 code nearest to x (ties to the even code, as IEEE rounding), saturating to +-448
// beyond the range; NaN gives 0x7F. Host only: make-model writes tables with it.
inline uint8_t float_to_e4m3(float x) {
    uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return 0x7F;
    if (abs >= 0x43E00000u) return sign | 0x7E;  // >= 448 (and inf): the largest finite code
    const int exp = static_cast<int>(abs >> 23) - 127;
    if (exp < -6) {
        // Subnormal E4M3: a multiple of 2^-9. x * 2^9 is exact in float (no rounding), and
        // nearbyint rounds it to nearest even; 8 (a carry into the smallest normal) is the code
        // 0x08, which the same value encodes.
        const float q = __builtin_nearbyintf(bits_to_float(abs) * 0x1p9f);
        return sign | static_cast<uint8_t>(q);
    }
    // Normal: keep 3 of the 23 mantissa bits, round the other 20 to nearest even; a carry
    // out of the mantissa bumps the exponent, which stays below 448's code (checked above).
    uint32_t r = (static_cast<uint32_t>(exp + 7) << 3) | ((abs >> 20) & 7u);
    const uint32_t rem = abs & 0xFFFFFu;
    if (rem > 0x80000u || (rem == 0x80000u && (r & 1u))) ++r;
    return sign | static_cast<uint8_t>(r);
}

// The E8M0 scale of a group whose largest magnitude is amax: the smallest 2^(e-127) with
// amax / 2^(e-127) <= 448, so no value of the group saturates (DeepSeek's act_quant with ue8m0
// scales: 2^ceil(log2(amax / 448))). A zero group gets e = 0; e stays within 0..254.
inline uint8_t e8m0_for_max(float amax) {
    if (!(amax > 0.0f)) return 0;
    if (!(amax <= 3.4028234663852886e38f)) return 254;
    // 448 = 1.75 * 2^8. With amax = f * 2^E (f in [0.5, 1)): 2^(E-9) suffices when f <= 0.875
    // (amax <= 448 * 2^(E-9)), else 2^(E-8).
    int E;
    const float f = __builtin_frexpf(amax, &E);
    int s = f <= 0.875f ? E - 9 : E - 8;
    if (s < -127) s = -127;
    if (s > 127) s = 127;
    return static_cast<uint8_t>(s + 127);
}

}  // namespace bg::fp8
