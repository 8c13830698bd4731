// Q3_K (ggml type 11, ggml-common.h block_q3_K): 256 weights in 110 bytes,
//   bytes 0..31   hmask: the high bit of weight i is bit 4*(i/128) + (i%128)/32 of hmask[i%32]
//   bytes 32..95  low 2 bits: bits 2j, 2j+1 of byte 32*(i/128) + i%32, j = (i%128)/32
//   bytes 96..107 sixteen 6-bit scales, stored + 32: scale s has its low 4 bits in nibble s/8 of
//                 byte s%8 and its top 2 bits at bit 2*(s/4) of byte 8 + s%4
//   bytes 108..109 d    FP16 super-block scale
// weight i = (d * (sc - 32)) * q, sc of group i/16, q = low - (high bit ? 0 : 4) in -4..3
// (ggml-quants.c dequantize_row_q3_K).
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"
#include "tensor/qtypes/super_block.h"

namespace bg::qtypes {

struct Q3_K : SuperBlock<Q3_K> {
    static constexpr GgmlType kType = GgmlType::Q3_K;
    static constexpr int kBlockBytes = 110;
    static constexpr int kSubK = 16;
    static constexpr bool kHasMin = false;
    static constexpr int kOffHmask = 0, kOffQs = 32, kOffScales = 96, kOffD = 108;

    // Chunk k: 2-bit plane k & 3 of the 32 bytes at qs + 32 (k >> 2), the high bit (bit k) of hmask.
    static constexpr int kHighAt = 2, kCodeOffset = 4;
    BG_HD static constexpr ChunkPlanes chunk_planes(int k) {
        return {{kOffQs + 32 * (k >> 2), 2 * (k & 3), 3}, {kOffHmask, 4 * (k >> 2) + (k & 3), 1}};
    }

    // Group g's scale (scale6): the low 4 bits from nibble g / 8 of byte g % 8, the top 2 from
    // 2-bit field g / 4 of byte 8 + g % 4, less 32.
    static constexpr int kScaleBytes = 12;
    BG_HD static constexpr ScaleInt scale_int(int g) {
        return {{g % 8, 4 * (g / 8), 0x0F}, {8 + g % 4, 2 * (g / 4), 3}, 4, 32};
    }

    // The signed 6-bit scale of group s (-32..31).
    BG_HD static int scale6(const uint8_t* blk, int s) {
        const uint8_t* sc = blk + kOffScales;
        const int lo = (sc[s % 8] >> (4 * (s / 8))) & 0x0F;
        const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        return (lo | (hi << 4)) - 32;
    }
    BG_HD static void sub_ints(const uint8_t* blk, int s16, int* sc, int* mn) {
        *sc = scale6(blk, s16);
        *mn = 0;
    }
    BG_HD static int code(const uint8_t* blk, int i) {
        const int j = (i % 128) / 32, l = i % 32;
        const int lo = (blk[kOffQs + 32 * (i / 128) + l] >> (2 * j)) & 3;
        const int high = (blk[kOffHmask + l] >> (4 * (i / 128) + j)) & 1;
        return lo - (high ? 0 : 4);
    }
#ifdef __CUDACC__
    // The int8 kernel's A fragment words (engine/cuda/int8_matmul_kernel.cuh) of one row for lane
    // quad t of chunk c (32 weights) of a run of blocks: lo = codes [c*32 + 4t, +4), hi = codes
    // [c*32 + 16 + 4t, +4), one per byte; d[h], m[h] the scale and min of 16-half h (unpack's).
    template <class Load>
    __device__ __forceinline__ static void load_a(const uint8_t* row, int c, int t, const Load& ld, int& lo, int& hi,
                                                  float (&d)[2], float (&m)[2]) {
        const uint8_t* b = row + static_cast<int64_t>(c >> 3) * kBlockBytes;
        const int k = c & 7;  // chunk of the block
        const uint8_t* q = b + kOffQs + 32 * (k >> 2);
        const int sh = 2 * (k & 3), bit = k;  // high-mask bit 4 * (k / 4) + k % 4
        const uint32_t l0 = (ld.u32(q + 4 * t) >> sh) & 0x03030303u, l1 = (ld.u32(q + 16 + 4 * t) >> sh) & 0x03030303u;
        const uint32_t h0 = (ld.u32(b + kOffHmask + 4 * t) >> bit) & 0x01010101u;
        const uint32_t h1 = (ld.u32(b + kOffHmask + 16 + 4 * t) >> bit) & 0x01010101u;
        lo = static_cast<int>(__vsub4(l0 | (h0 << 2), 0x04040404u));  // code - 4, plus 4 where the bit is set
        hi = static_cast<int>(__vsub4(l1 | (h1 << 2), 0x04040404u));
        sub_scale(b, 2 * k, &d[0], &m[0]);
        sub_scale(b, 2 * k + 1, &d[1], &m[1]);
    }
#endif
};

}  // namespace bg::qtypes
