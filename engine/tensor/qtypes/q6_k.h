// Q6_K (ggml type 14, ggml-common.h block_q6_K): 256 weights in 210 bytes,
//   bytes 0..127   ql, low 4 bits: weight i (h = i/128, k = (i%128)/32, l = i%32) is nibble k/2
//                  of ql[64h + 32*(k%2) + l]
//   bytes 128..191 qh, top 2 bits: bits 2k, 2k+1 of qh[32h + l]
//   bytes 192..207 sixteen int8 scales, one per 16 weights
//   bytes 208..209 d  FP16 super-block scale
// weight i = (d * sc) * q, sc of group i/16, q = (low | top << 4) - 32 in -32..31
// (ggml-quants.c dequantize_row_q6_K).
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"
#include "tensor/qtypes/super_block.h"

namespace bg::qtypes {

struct Q6_K : SuperBlock<Q6_K> {
    static constexpr GgmlType kType = GgmlType::Q6_K;
    static constexpr int kBlockBytes = 210;
    static constexpr int kSubK = 16;
    static constexpr bool kHasMin = false;
    static constexpr int kOffQl = 0, kOffQh = 128, kOffScales = 192, kOffD = 208;

    BG_HD static void sub_scale(const uint8_t* blk, int s16, float* d, float* m) {
        *d = mul_rn(load_half(blk + kOffD), static_cast<float>(static_cast<int8_t>(blk[kOffScales + s16])));
        *m = 0.0f;
    }
    BG_HD static int code(const uint8_t* blk, int i) {
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        const int lo = (blk[kOffQl + 64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
        const int top = (blk[kOffQh + 32 * h + l] >> (2 * k)) & 3;
        return (lo | (top << 4)) - 32;
    }
};

}  // namespace bg::qtypes
