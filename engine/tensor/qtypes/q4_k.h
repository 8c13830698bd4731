// Q4_K (ggml type 12, ggml-common.h block_q4_K): 256 weights in 144 bytes,
//   bytes 0..1    d     FP16 super-block scale of the sub-block scales
//   bytes 2..3    dmin  FP16 super-block scale of the sub-block mins
//   bytes 4..15   eight 6-bit (scale, min) pairs, one per 32 weights (tensor/qtypes/k_scales.h)
//   bytes 16..143 4-bit codes: weight i is nibble (i/32)%2 of byte 32*(i/64) + i%32
// weight i = (d * sc) * q - (dmin * m), (sc, m) the pair of sub-block i/32, q in 0..15
// (ggml-quants.c dequantize_row_q4_K).
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"
#include "tensor/qtypes/k_scales.h"
#include "tensor/qtypes/super_block.h"

namespace bg::qtypes {

struct Q4_K : SuperBlock<Q4_K> {
    static constexpr GgmlType kType = GgmlType::Q4_K;
    static constexpr int kBlockBytes = 144;
    static constexpr int kSubK = 32;       // weights sharing one scale and min
    static constexpr bool kHasMin = true;
    static constexpr int kOffD = 0, kOffDmin = 2, kOffScales = 4, kOffQs = 16;

    // Chunk k: nibble k & 1 of the 32 bytes at qs + 32 (k >> 1).
    static constexpr int kHighAt = 0, kCodeOffset = 0;
    BG_HD static constexpr ChunkPlanes chunk_planes(int k) { return {{kOffQs + 32 * (k >> 1), 4 * (k & 1), 0x0F}, {}}; }

    // Group g's scale and min: k_scale_min's pair g.
    static constexpr int kScaleBytes = 12;
    BG_HD static constexpr ScaleInt scale_int(int g) { return k_scale_field(g); }
    BG_HD static constexpr ScaleInt min_int(int g) { return k_min_field(g); }

    BG_HD static void sub_ints(const uint8_t* blk, int s16, int* sc, int* mn) {
        k_scale_min(blk + kOffScales, s16 / 2, sc, mn);
    }
    BG_HD static int code(const uint8_t* blk, int i) {
        return (blk[kOffQs + 32 * (i / 64) + i % 32] >> (4 * ((i / 32) & 1))) & 0x0F;
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
        const uint8_t* q = b + kOffQs + 32 * (k >> 1);  // nibble k & 1 of 32 bytes
        lo = static_cast<int>((ld.u32(q + 4 * t) >> (4 * (k & 1))) & 0x0F0F0F0Fu);
        hi = static_cast<int>((ld.u32(q + 16 + 4 * t) >> (4 * (k & 1))) & 0x0F0F0F0Fu);
        sub_scale(b, 2 * k, &d[0], &m[0]);
        d[1] = d[0];
        m[1] = m[0];
    }
#endif
};

}  // namespace bg::qtypes
