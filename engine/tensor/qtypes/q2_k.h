// Q2_K (ggml type 10, ggml-common.h block_q2_K): 256 weights in 84 bytes,
//   bytes 0..15   one byte per 16 weights: low nibble the scale sc, high nibble the min m
//   bytes 16..79  2-bit codes: weight i is bits 2j, 2j+1 of byte 32*(i/128) + i%32, j = (i%128)/32
//   bytes 80..81  d     FP16 super-block scale of the scales
//   bytes 82..83  dmin  FP16 super-block scale of the mins
// weight i = (d * sc) * q - (dmin * m), (sc, m) of group i/16, q in 0..3
// (ggml-quants.c dequantize_row_q2_K).
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"
#include "tensor/qtypes/super_block.h"

namespace bg::qtypes {

struct Q2_K : SuperBlock<Q2_K> {
    static constexpr GgmlType kType = GgmlType::Q2_K;
    static constexpr int kBlockBytes = 84;
    static constexpr int kSubK = 16;
    static constexpr bool kHasMin = true;
    static constexpr int kOffScales = 0, kOffQs = 16, kOffD = 80, kOffDmin = 82;

    // Chunk k: 2-bit plane k & 3 of the 32 bytes at qs + 32 (k >> 2).
    static constexpr int kHighAt = 0, kCodeOffset = 0;
    BG_HD static constexpr ChunkPlanes chunk_planes(int k) { return {{kOffQs + 32 * (k >> 2), 2 * (k & 3), 3}, {}}; }

    // Group g's scale and min: the low and high nibbles of scale byte g.
    static constexpr int kScaleBytes = 16;
    BG_HD static constexpr ScaleInt scale_int(int g) { return {{g, 0, 0x0F}, {}}; }
    BG_HD static constexpr ScaleInt min_int(int g) { return {{g, 4, 0x0F}, {}}; }

    BG_HD static void sub_ints(const uint8_t* blk, int s16, int* sc, int* mn) {
        const int sm = blk[kOffScales + s16];
        *sc = sm & 0x0F;
        *mn = sm >> 4;
    }
    BG_HD static int code(const uint8_t* blk, int i) {
        return (blk[kOffQs + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
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
        const uint8_t* q = b + kOffQs + 32 * (k >> 2);  // 2-bit plane k & 3 of 32 bytes
        lo = static_cast<int>((ld.u32(q + 4 * t) >> (2 * (k & 3))) & 0x03030303u);
        hi = static_cast<int>((ld.u32(q + 16 + 4 * t) >> (2 * (k & 3))) & 0x03030303u);
        sub_scale(b, 2 * k, &d[0], &m[0]);
        sub_scale(b, 2 * k + 1, &d[1], &m[1]);
    }
#endif
};

}  // namespace bg::qtypes
