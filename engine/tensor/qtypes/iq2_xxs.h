// IQ2_XXS (ggml type 16, ggml-common.h block_iq2_xxs): 256 weights in 66 bytes,
//   bytes 0..1   d  FP16 super-block scale
//   bytes 2..65  eight groups of 32 weights, 8 bytes each: bytes 0..3 the grid indices of the
//                group's four runs of 8 weights (tensor/qtypes/iq2xxs_grid.h), bytes 4..7 a
//                little-endian word w: bits 7r..7r+6 the sign index of run r, bits 28..31 the
//                group's 4-bit scale ls
// weight i (group g = i/32, run r = (i%32)/8, j = i%8)
//   = ((d * (0.5 + ls)) * 0.25) * grid[idx_r] byte j * (bit j of ksigns(sign index r) ? -1 : 1)
// (ggml-quants.c dequantize_row_iq2_xxs). ggml's ksigns_iq2xs table is a rule: entry k is k with
// bit 7 set to the parity of k's seven bits, so every run has an even number of negative weights.
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"
#include "tensor/qtypes/iq2xxs_grid.h"
#include "tensor/qtypes/super_block.h"

namespace bg::qtypes {

// ggml's ksigns_iq2xs[k] for k in 0..127: the eight sign bits of a run.
BG_HD int iq2_signs(uint32_t k) {
#ifdef __CUDA_ARCH__
    const uint32_t parity = __popc(k) & 1u;
#else
    const uint32_t parity = static_cast<uint32_t>(__builtin_popcount(k)) & 1u;
#endif
    return static_cast<int>(k | (parity << 7));
}

struct Iq2_XXS : SuperBlock<Iq2_XXS> {
    static constexpr GgmlType kType = GgmlType::IQ2_XXS;
    static constexpr int kBlockBytes = 66;
    static constexpr int kSubK = 32;
    static constexpr bool kHasMin = false;
    static constexpr int kOffD = 0, kOffGroups = 2, kGroupBytes = 8;

    BG_HD static void sub_scale(const uint8_t* blk, int s16, float* d, float* m) {
        const uint32_t w = load_le32(blk + kOffGroups + kGroupBytes * (s16 / 2) + 4);
        *d = mul_rn(mul_rn(load_half(blk + kOffD), 0.5f + static_cast<float>(w >> 28)), 0.25f);
        *m = 0.0f;
    }
    // A signed grid magnitude: +-8, +-25 or +-43.
    BG_HD static int code(const uint8_t* blk, int i) {
        const uint8_t* g = blk + kOffGroups + kGroupBytes * (i / 32);
        const int r = (i % 32) / 8, j = i % 8;
        const int mag = static_cast<int>((iq2xxs_grid(g[r]) >> (8 * j)) & 0xFF);
        const int signs = iq2_signs((load_le32(g + 4) >> (7 * r)) & 127u);
        return (signs >> j) & 1 ? -mag : mag;
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
        const uint8_t* g = b + kOffGroups + kGroupBytes * k;
        const uint32_t w = ld.u32(g + 4);
        // Runs r = t/2 (lo) and 2 + t/2 (hi) of 8 weights; this quad's 4 of them start at 4 * (t & 1).
        lo = signed_run4(ld.u8(g + (t >> 1)), (w >> (7 * (t >> 1))) & 127u, 4 * (t & 1));
        hi = signed_run4(ld.u8(g + 2 + (t >> 1)), (w >> (7 * (2 + (t >> 1)))) & 127u, 4 * (t & 1));
        sub_scale(b, 2 * k, &d[0], &m[0]);
        d[1] = d[0];
        m[1] = m[0];
    }
    // Weights o..o+3 of a run (grid point idx, sign index s7) as four signed int8.
    __device__ __forceinline__ static int signed_run4(uint32_t idx, uint32_t s7, int o) {
        const uint32_t mag = static_cast<uint32_t>(iq2xxs_grid(static_cast<int>(idx)) >> (8 * o));
        const uint32_t bits = (static_cast<uint32_t>(iq2_signs(s7)) >> o) & 15u;
        const uint32_t neg = ((bits * 0x00204081u) & 0x01010101u) * 0xFFu;  // 0xFF in the bytes to negate
        return static_cast<int>(__vsub4(mag ^ neg, neg));
    }
#endif
};

}  // namespace bg::qtypes
