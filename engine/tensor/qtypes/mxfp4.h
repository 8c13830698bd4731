// MXFP4 (ggml type 39) for the integer matmul path: blocks of 32 weights in 17 bytes, one E8M0
// scale byte e, then 16 bytes of E2M1 codes (byte j: element j in the low nibble, element j+16 in
// the high nibble). As int8: the doubled E2M1 value of each code (ggml's kvalues_mxfp4, exact
// integers -12..12), with the block scale halved to match: value = code2x * 2^(e-128).
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"

namespace bg::qtypes {

struct Mxfp4 {
    static constexpr GgmlType kType = GgmlType::MXFP4;
    static constexpr int kBlockWeights = 32;  // weights a block (the unit rows are made of)
    static constexpr int kBlockBytes = 17;
    static constexpr int kSubK = 32;          // weights sharing one scale
    static constexpr bool kHasMin = false;    // no min term: partial = d_w * d_x * isum

    // 2^(e-128) exactly: ggml's E8M0 "half" (e <= 1 gives the subnormals 2^-128, 2^-127; e = 255
    // gives 2^127 as in ggml's dequantisation, not OCP's NaN, so weights rebuilt from unpack equal
    // dequantize_row's, the overflow to inf included).
    BG_HD static float scale_of(uint8_t e) {
        uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
        float f;
        __builtin_memcpy(&f, &bits, 4);
        return f;
    }
    BG_HD static int value_of(int code) {
        constexpr int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
        return kv[code & 15];
    }

    // Chunk c (weights c*32 .. c*32+31, one block) of a row: int8 values, the block's scale for
    // both 16-halves, no min (tensor/qtypes/all.h has the contract).
    BG_HD static void unpack(const uint8_t* row, int64_t chunk, int8_t v[32], float d[2], float m[2]) {
        const uint8_t* b = row + chunk * kBlockBytes;
        for (int j = 0; j < 16; ++j) {
            v[j] = static_cast<int8_t>(value_of(b[1 + j] & 15));
            v[j + 16] = static_cast<int8_t>(value_of(b[1 + j] >> 4));
        }
        d[0] = d[1] = scale_of(b[0]);
        m[0] = m[1] = 0.0f;
    }

    // The GEMV's decoder (int8_gemv_kernel.cuh): eight codes, one 32-bit word of a block's codes
    // (byte k: the codes of weights 4t+k, low nibble, and 16+4t+k, high nibble), as magnitudes in
    // two int8 words each for the positive codes (pos; 0 where the code is negative) and the
    // negative ones (neg; 0 where positive), so a value is pos - neg and a dot product
    // dp4a(pos, x) - dp4a(neg, x), exactly. Word h holds nibbles 4h..4h+3 in their order: weights
    // 4t+2h, 16+4t+2h, 4t+2h+1, 16+4t+2h+1, the activations' order after interleave_act. One
    // prmt a word in sign mode (tensor/qtypes/hd.h): a code's bit 3 replicates the sign of its
    // magnitude byte, which is 0, so the other sign's codes come out 0 with no mask or select:
    // seven integer instructions for eight weights where decode4 takes about twenty.
    BG_HD static void split8(uint32_t cw, uint32_t (&pos)[2], uint32_t (&neg)[2]) {
        constexpr uint32_t m03 = 0x03020100u, m47 = 0x0C080604u;  // |value| of codes 0..7: 0 1 2 3 | 4 6 8 12
        const uint32_t flip = cw ^ 0x88888888u;
        pos[0] = prmt(m03, m47, cw);
        pos[1] = prmt(m03, m47, cw >> 16);
        neg[0] = prmt(m03, m47, flip);
        neg[1] = prmt(m03, m47, flip >> 16);
    }
    // An activation chunk's words in load_a's order (lo_t: values 4t..4t+3, hi_t: 16+4t..16+4t+3)
    // to split8's: weights 4t, 16+4t, 4t+1, 17+4t, then 4t+2, 18+4t, 4t+3, 19+4t.
    BG_HD static void interleave_act(uint32_t lo, uint32_t hi, uint32_t& w0, uint32_t& w1) {
        w0 = prmt(lo, hi, 0x5140u);
        w1 = prmt(lo, hi, 0x7362u);
    }

#ifdef __CUDACC__
    // Four codes (one per byte, 0..15) -> four int8 values, through the table in byte_perm form.
    __device__ __forceinline__ static int decode4(uint32_t c) {
        constexpr uint32_t t0 = 0x03020100u, t1 = 0x0C080604u;  // 0 1 2 3 | 4 6 8 12
        constexpr uint32_t t2 = 0xFDFEFF00u, t3 = 0xF4F8FAFCu;  // 0 -1 -2 -3 | -4 -6 -8 -12
        const uint32_t x = c | (c >> 4);                  // byte 0: c0 | c1<<4, byte 2: c2 | c3<<4
        const uint32_t sel = __byte_perm(x, 0, 0x0020);   // nibbles c0 c1 c2 c3
        const uint32_t lo3 = sel & 0x7777u;
        const uint32_t pos = __byte_perm(t0, t1, lo3), neg = __byte_perm(t2, t3, lo3);
        return static_cast<int>(__byte_perm(pos, neg, ((sel & 0x8888u) >> 1) | 0x3210u));
    }
    // The A fragment words of one row for lane quad t of chunk c (32 weights) of a run of
    // blocks: lo = values [c*32 + 4t, +4), hi = values [c*32 + 16 + 4t, +4); d[h] the scale and
    // m[h] the min of 16-half h (one scale a block here, no min).
    template <class Load>
    __device__ __forceinline__ static void load_a(const uint8_t* row, int c, int t, const Load& ld, int& lo, int& hi,
                                                  float (&d)[2], float (&m)[2]) {
        const uint8_t* b = row + static_cast<int64_t>(c) * kBlockBytes;
        const uint32_t w = ld.u32(b + 1 + 4 * t);
        lo = decode4(w & 0x0F0F0F0Fu);
        hi = decode4((w >> 4) & 0x0F0F0F0Fu);
        d[0] = d[1] = scale_of(ld.u8(b));
        m[0] = m[1] = 0.0f;
    }
    // The whole of chunk c for one lane in split8's form (the GEMV), from shared memory at any
    // byte address: its 17 bytes lie in five aligned words (the last code byte always in the
    // fifth); code word t is one funnel shift of two of them, and gives words 2t and 2t + 1 of
    // pos and neg; the scale decoded once.
    __device__ __forceinline__ static void load_chunk_split(const uint8_t* row, int c, uint32_t (&pos)[8],
                                                            uint32_t (&neg)[8], float& d) {
        // Pointer arithmetic, not integers: the compiler keeps the shared address space (LDS, not
        // generic loads).
        const uint8_t* bp = row + c * kBlockBytes;
        const uint32_t o = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(bp) & 3);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(bp - o);
        uint32_t x[5];
#pragma unroll
        for (int k = 0; k < 5; ++k) x[k] = w[k];
        d = scale_of(static_cast<uint8_t>(x[0] >> (o * 8)));
        // The codes start at byte o + 1: a shift of 32 (o = 3, the clamped funnel shift gives the
        // next word whole) needs no select.
        const uint32_t sh = (o + 1) * 8;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const uint32_t cw = __funnelshift_rc(x[t], x[t + 1], sh);
            uint32_t p[2], n[2];
            split8(cw, p, n);
            pos[2 * t] = p[0], pos[2 * t + 1] = p[1];
            neg[2 * t] = n[0], neg[2 * t + 1] = n[1];
        }
    }
#endif
};

}  // namespace bg::qtypes
