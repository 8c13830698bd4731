// What the 256-weight types (ggml's K-quants and IQ2_XXS) share: a type names its layout and two
// decoders, and this base builds the rest of the traits contract (tensor/qtypes/all.h) from them:
//   sub_scale(blk, s, &d, &m)  scale and min of 16-weight group s (0..15) of one block, rounded as
//                              ggml rounds them (float products of the FP16 super-scale and the
//                              small integer scale; m = 0 for types without a min). The K-quants
//                              name only the small integers, sub_ints(blk, s, &sc, &mn), and their
//                              FP16 super-scales' offsets kOffD (and kOffDmin with a min); this
//                              base multiplies them out. A kernel that keeps a block's scales
//                              (the AVX2 one) can then convert the two FP16 values once a block
//                              and do the same products in vector form. IQ2_XXS, whose scale is
//                              not such a product, names sub_scale itself.
//   code(blk, i)               the integer value of weight i (0..255), what the int8 path takes.
// The K-quants also describe where a chunk's codes sit, for the SIMD kernels that decode a whole
// chunk at once (ChunkPlanes below): chunk_planes(k), kHighAt and kCodeOffset; and where their
// scale integers sit (ScaleInt below): kScaleBytes, scale_int(g) and, with a min, min_int(g), for
// group g of kSubK weights.
// Every weight is then value = d * code - m, each operation rounded to float, which is ggml's
// dequantize_row_* bit for bit (its expressions are that product and that difference).
#pragma once

#include <cstdint>

#include "tensor/qtypes/hd.h"

namespace bg::qtypes {

// One bit field of a chunk's 32 codes: weight i of the chunk (0..31) has (blk[offset + i] >> shift)
// & mask in it. mask 0: no such field.
struct PlaneBits {
    int offset = 0, shift = 0, mask = 0;
};
// Where chunk k (weights 32k .. 32k + 31) of a K-quant block keeps its codes: weight i's code is
// low's field | high's field << T::kHighAt, less T::kCodeOffset, which equals T::code(blk, 32k + i)
// (tests/test_kquants.cpp checks every type, chunk and weight). A kernel reads each field as one
// 32-byte run, a shift and a mask, and takes the codes as unsigned bytes, value + kCodeOffset.
struct ChunkPlanes {
    PlaneBits low, high;
};

// Where one small integer of a K-quant block's scales sits (a group's scale or min, as sub_ints
// gives it), in the T::kScaleBytes bytes at T::kOffScales (offsets here count from there): low's
// field | high's field << high_at, less `minus`, then, where sign_bits is set, read as a
// two's-complement integer of that many bits. The SIMD kernels decode a block's scales for
// sixteen (eight) rows at once from these, one int32 lane a row; scale_int_of reads one.
struct ScaleInt {
    PlaneBits low, high;
    int high_at = 0, minus = 0, sign_bits = 0;
};

BG_HD constexpr int scale_int_of(const uint8_t* scales, ScaleInt f) {
    int v = (scales[f.low.offset] >> f.low.shift) & f.low.mask;
    if (f.high.mask != 0) v |= ((scales[f.high.offset] >> f.high.shift) & f.high.mask) << f.high_at;
    v -= f.minus;
    if (f.sign_bits != 0) v = (v ^ (1 << (f.sign_bits - 1))) - (1 << (f.sign_bits - 1));
    return v;
}

template <class T>
struct SuperBlock {
    static constexpr int kBlockWeights = 256;
    static constexpr int kChunksPerBlock = kBlockWeights / 32;

    BG_HD static void sub_scale(const uint8_t* blk, int s16, float* d, float* m) {
        int sc, mn;
        T::sub_ints(blk, s16, &sc, &mn);
        *d = mul_rn(load_half(blk + T::kOffD), static_cast<float>(sc));
        if constexpr (T::kHasMin) {
            *m = mul_rn(load_half(blk + T::kOffDmin), static_cast<float>(mn));
        } else {
            *m = 0.0f;
        }
    }

    // n weights from weight i of one block, all inside one 16-weight group (i % 16 + n <= 16),
    // decoded exactly as ggml's dequantize_row does.
    BG_HD static void decode(const uint8_t* blk, int i, int n, float* out) {
        float d, m;
        T::sub_scale(blk, i / 16, &d, &m);
        for (int k = 0; k < n; ++k) {
            const float p = mul_rn(d, static_cast<float>(T::code(blk, i + k)));
            out[k] = T::kHasMin ? sub_rn(p, m) : p;
        }
    }
    // Weight i of a row of these blocks (one at a time: the CUDA generic paths).
    BG_HD static float row_element(const uint8_t* row, int64_t i) {
        float v;
        decode(row + (i / kBlockWeights) * T::kBlockBytes, static_cast<int>(i % kBlockWeights), 1, &v);
        return v;
    }
    // n weights from weight i of a row, inside one 16-weight group.
    BG_HD static void row_decode(const uint8_t* row, int64_t i, int n, float* out) {
        decode(row + (i / kBlockWeights) * T::kBlockBytes, static_cast<int>(i % kBlockWeights), n, out);
    }
    // One whole block: 256 floats.
    BG_HD static void decode_block(const uint8_t* blk, float* out) {
        for (int g = 0; g < 16; ++g) decode(blk, 16 * g, 16, out + 16 * g);
    }
    // The int8 path's view of weights chunk*32 .. chunk*32+31 of a row: v[i] the codes, d[h] and
    // m[h] the scale and min of 16-weight half h, so weight i = d[i/16] * v[i] - m[i/16].
    BG_HD static void unpack(const uint8_t* row, int64_t chunk, int8_t v[32], float d[2], float m[2]) {
        const uint8_t* blk = row + (chunk / kChunksPerBlock) * T::kBlockBytes;
        const int i0 = static_cast<int>(chunk % kChunksPerBlock) * 32;
        T::sub_scale(blk, i0 / 16, &d[0], &m[0]);
        T::sub_scale(blk, i0 / 16 + 1, &d[1], &m[1]);
        for (int i = 0; i < 32; ++i) v[i] = static_cast<int8_t>(T::code(blk, i0 + i));
    }
};

}  // namespace bg::qtypes
