// The 6-bit scale and min pairs of Q4_K and Q5_K (ggml's get_scale_min_k4): eight pairs packed
// into 12 bytes. Pairs 0..3 sit in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); pairs
// 4..7 keep their low 4 bits in the nibbles of bytes 8..11 (scale low, min high) and their top 2
// bits in the spare top bits of bytes 0..3 (scales) and 4..7 (mins).
#pragma once

#include <cstdint>

#include "tensor/qtypes/hd.h"
#include "tensor/qtypes/super_block.h"

namespace bg::qtypes {

// Pair j (0..7) of the 12 bytes at q: *sc and *m in 0..63.
BG_HD void k_scale_min(const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Where pair j's scale and min sit in the 12 bytes (ScaleInt: what k_scale_min reads).
BG_HD constexpr ScaleInt k_scale_field(int j) {
    return j < 4 ? ScaleInt{{j, 0, 63}, {}} : ScaleInt{{j + 4, 0, 0x0F}, {j - 4, 6, 3}, 4};
}
BG_HD constexpr ScaleInt k_min_field(int j) {
    return j < 4 ? ScaleInt{{j + 4, 0, 63}, {}} : ScaleInt{{j + 4, 4, 0x0F}, {j, 6, 3}, 4};
}

// The inverse: eight pairs (each 0..63) into 12 bytes.
inline void k_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t q[12]) {
    for (int j = 0; j < 4; ++j) {
        q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
    }
}

}  // namespace bg::qtypes
