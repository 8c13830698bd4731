// Q5_K (ggml type 13, ggml-common.h block_q5_K): 256 weights in 176 bytes,
//   bytes 0..1    d     FP16 super-block scale of the sub-block scales
//   bytes 2..3    dmin  FP16 super-block scale of the sub-block mins
//   bytes 4..15   eight 6-bit (scale, min) pairs, one per 32 weights (tensor/qtypes/k_scales.h)
//   bytes 16..47  qh: the fifth bit of weight i is bit i/32 of qh[i%32]
//   bytes 48..175 low 4 bits: weight i is nibble (i/32)%2 of byte 32*(i/64) + i%32
// weight i = (d * sc) * q - (dmin * m), (sc, m) the pair of sub-block i/32, q in 0..31
// (ggml-quants.c dequantize_row_q5_K).
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"
#include "tensor/qtypes/k_scales.h"
#include "tensor/qtypes/super_block.h"

namespace bg::qtypes {

struct Q5_K : SuperBlock<Q5_K> {
    static constexpr GgmlType kType = GgmlType::Q5_K;
    static constexpr int kBlockBytes = 176;
    static constexpr int kSubK = 32;
    static constexpr bool kHasMin = true;
    static constexpr int kOffD = 0, kOffDmin = 2, kOffScales = 4, kOffQh = 16, kOffQs = 48;

    BG_HD static void sub_scale(const uint8_t* blk, int s16, float* d, float* m) {
        int sc, mn;
        k_scale_min(blk + kOffScales, s16 / 2, &sc, &mn);
        *d = mul_rn(load_half(blk + kOffD), static_cast<float>(sc));
        *m = mul_rn(load_half(blk + kOffDmin), static_cast<float>(mn));
    }
    BG_HD static int code(const uint8_t* blk, int i) {
        const int lo = (blk[kOffQs + 32 * (i / 64) + i % 32] >> (4 * ((i / 32) & 1))) & 0x0F;
        const int hi = (blk[kOffQh + i % 32] >> (i / 32)) & 1;
        return lo | (hi << 4);
    }
};

}  // namespace bg::qtypes
