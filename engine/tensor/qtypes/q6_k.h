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

    // Chunk k = 4h + j: nibble j >> 1 of the 32 bytes at ql + 64h + 32 (j & 1), the top two bits
    // from 2-bit plane j of the 32 bytes at qh + 32h.
    static constexpr int kHighAt = 4, kCodeOffset = 32;
    BG_HD static constexpr ChunkPlanes chunk_planes(int k) {
        return {{kOffQl + 64 * (k >> 2) + 32 * (k & 1), 4 * ((k & 3) >> 1), 0x0F}, {kOffQh + 32 * (k >> 2), 2 * (k & 3), 3}};
    }

    // Group g's scale: scale byte g as an int8.
    static constexpr int kScaleBytes = 16;
    BG_HD static constexpr ScaleInt scale_int(int g) { return {{g, 0, 0xFF}, {}, 0, 0, 8}; }

    BG_HD static void sub_ints(const uint8_t* blk, int s16, int* sc, int* mn) {
        *sc = static_cast<int8_t>(blk[kOffScales + s16]);
        *mn = 0;
    }
    BG_HD static int code(const uint8_t* blk, int i) {
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        const int lo = (blk[kOffQl + 64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
        const int top = (blk[kOffQh + 32 * h + l] >> (2 * k)) & 3;
        return (lo | (top << 4)) - 32;
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
        const int h = k >> 2, j = k & 3;  // 128-half of the block, quarter of it
        const uint8_t* ql = b + kOffQl + 64 * h + 32 * (j & 1);
        const uint8_t* qh = b + kOffQh + 32 * h;
        const int sh = 4 * (j >> 1);
        const uint32_t t0 = (ld.u32(qh + 4 * t) >> (2 * j)) & 0x03030303u;
        const uint32_t t1 = (ld.u32(qh + 16 + 4 * t) >> (2 * j)) & 0x03030303u;
        lo = static_cast<int>(__vsub4(((ld.u32(ql + 4 * t) >> sh) & 0x0F0F0F0Fu) | (t0 << 4), 0x20202020u));
        hi = static_cast<int>(__vsub4(((ld.u32(ql + 16 + 4 * t) >> sh) & 0x0F0F0F0Fu) | (t1 << 4), 0x20202020u));
        sub_scale(b, 2 * k, &d[0], &m[0]);
        sub_scale(b, 2 * k + 1, &d[1], &m[1]);
    }
#endif
};

}  // namespace bg::qtypes
