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

    // Chunk k: nibble k & 1 of the 32 bytes at qs + 32 (k >> 1), the fifth bit (bit k) of qh.
    static constexpr int kHighAt = 4, kCodeOffset = 0;
    BG_HD static constexpr ChunkPlanes chunk_planes(int k) {
        return {{kOffQs + 32 * (k >> 1), 4 * (k & 1), 0x0F}, {kOffQh, k, 1}};
    }

    // Group g's scale and min: k_scale_min's pair g.
    static constexpr int kScaleBytes = 12;
    BG_HD static constexpr ScaleInt scale_int(int g) { return k_scale_field(g); }
    BG_HD static constexpr ScaleInt min_int(int g) { return k_min_field(g); }

    BG_HD static void sub_ints(const uint8_t* blk, int s16, int* sc, int* mn) {
        k_scale_min(blk + kOffScales, s16 / 2, sc, mn);
    }
    BG_HD static int code(const uint8_t* blk, int i) {
        const int lo = (blk[kOffQs + 32 * (i / 64) + i % 32] >> (4 * ((i / 32) & 1))) & 0x0F;
        const int hi = (blk[kOffQh + i % 32] >> (i / 32)) & 1;
        return lo | (hi << 4);
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
        const uint8_t* q = b + kOffQs + 32 * (k >> 1);
        const uint32_t h0 = (ld.u32(b + kOffQh + 4 * t) >> k) & 0x01010101u;
        const uint32_t h1 = (ld.u32(b + kOffQh + 16 + 4 * t) >> k) & 0x01010101u;
        lo = static_cast<int>(((ld.u32(q + 4 * t) >> (4 * (k & 1))) & 0x0F0F0F0Fu) | (h0 << 4));
        hi = static_cast<int>(((ld.u32(q + 16 + 4 * t) >> (4 * (k & 1))) & 0x0F0F0F0Fu) | (h1 << 4));
        sub_scale(b, 2 * k, &d[0], &m[0]);
        d[1] = d[0];
        m[1] = m[0];
    }
#endif
};

}  // namespace bg::qtypes
