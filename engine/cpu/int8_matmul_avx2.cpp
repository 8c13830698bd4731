// The integer matmul's AVX2 row kernel (engine/cpu/int8_rows.h). Only the functions marked
// BG_AVX2 here are compiled for AVX2 (a target attribute, not -mavx2 on the file): the inline
// functions this file shares with the rest of the engine (the traits' unpack, visit) keep the
// build's baseline instructions, so the linker's one copy of each still runs on CPUs without
// AVX2, where matmul_int8 never calls this kernel. AVX2 alone, without FMA: the float part of each
// chunk rounds every product and sum as chunk_partial does, so this kernel and the portable one
// give the same y bit for bit.
//
// Layout of the work: eight rows of W at a time (one ymm lane a row in the float part), a token
// tile of up to kTokTile tokens whose accumulators stay in registers, and the chunks of 32
// weights in order. A chunk of the eight rows is decoded once per tile into int8 (and its
// absolute values, for pmaddubsw's unsigned operand) and reused by every token of the tile.
#include "cpu/int8_rows.h"

#include "util/check.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include "cpu/x86_intrinsics.h"

#include <algorithm>

#include "tensor/qtypes/all.h"
#include "tensor/qtypes/int8_act.h"

#define BG_AVX2 __attribute__((target("avx2")))

namespace bg::cpu {

namespace {

constexpr int kTokTile = 8;

// One chunk of the eight rows as the dot products need it.
struct Chunk8 {
    __m256i w[kAvx2Rows];   // int8 weights of row i (Decode<T>::kUnsigned: w + kOffset as unsigned bytes, wa unused)
    __m256i wa[kAvx2Rows];  // |w| (as unsigned bytes: -128 gives 128)
    __m256 d0, d1, m0, m1;  // per-row scale and min of each 16-weight half
};

// Decoders: chunk c of nb (the row's chunks) of the eight rows (row pointers rows[i]) into k.
template <class T>
struct Decode {
    static constexpr bool kUnsigned = false;  // k.w signed: products through |w| and q * sign(w)
    static constexpr int kOffset = 0;
    BG_AVX2 static void chunk(const uint8_t* const* rows, int64_t c, int64_t /*nb*/, Chunk8& k) {
        alignas(32) int8_t v[32];
        alignas(32) float d[4][kAvx2Rows];
        for (int i = 0; i < kAvx2Rows; ++i) {
            float dd[2], mm[2];
            T::unpack(rows[i], c, v, dd, mm);
            k.w[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
            k.wa[i] = _mm256_abs_epi8(k.w[i]);
            d[0][i] = dd[0], d[1][i] = dd[1], d[2][i] = mm[0], d[3][i] = mm[1];
        }
        k.d0 = _mm256_load_ps(d[0]), k.d1 = _mm256_load_ps(d[1]);
        k.m0 = _mm256_load_ps(d[2]), k.m1 = _mm256_load_ps(d[3]);
    }
};

// MXFP4's eight block scales, Mxfp4::scale_of in vector form: e >= 2 gives the float whose bits
// are (e - 1) << 23, e = 0 and 1 the subnormals whose bits are 0x00200000 << e.
BG_AVX2 inline __m256 mxfp4_scales8(const uint8_t* const* rows, int64_t c) {
    const int64_t o = c * qtypes::Mxfp4::kBlockBytes;
    const __m256i e = _mm256_setr_epi32(rows[0][o], rows[1][o], rows[2][o], rows[3][o], rows[4][o], rows[5][o],
                                        rows[6][o], rows[7][o]);
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

// MXFP4's 16 code bytes through a 16-entry table (pshufb), low nibbles then high nibbles, as the
// values plus 12 (0..24): unsigned, so pmaddubsw takes them as they are, and the 12 x (sum of q)
// this adds is taken off the exact integer sums (dot8).
BG_AVX2 inline __m256i mxfp4_plus12(const uint8_t* b) {
    const __m128i table = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(codes, low4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(codes, 4), low4));
    return _mm256_set_m128i(hi, lo);
}

template <>
struct Decode<qtypes::Mxfp4> {
    static constexpr bool kUnsigned = true;  // k.w = value + kOffset
    static constexpr int kOffset = 12;
    BG_AVX2 static void chunk(const uint8_t* const* rows, int64_t c, int64_t /*nb*/, Chunk8& k) {
#pragma GCC unroll 8
        for (int i = 0; i < kAvx2Rows; ++i) k.w[i] = mxfp4_plus12(rows[i] + c * qtypes::Mxfp4::kBlockBytes);
        k.d0 = k.d1 = mxfp4_scales8(rows, c);
        k.m0 = k.m1 = _mm256_setzero_ps();
    }
};

// Q8_0: the 32 stored bytes are the int8 weights.
// Q8_0's eight block scales (FP16, converted as the traits convert them).
BG_AVX2 inline __m256 q8_0_scales8(const uint8_t* const* rows, int64_t c) {
    const int64_t o = c * qtypes::Q8_0::kBlockBytes;
    alignas(32) float d[kAvx2Rows];
    for (int i = 0; i < kAvx2Rows; ++i) d[i] = qtypes::load_half(rows[i] + o);
    return _mm256_load_ps(d);
}

template <>
struct Decode<qtypes::Q8_0> {
    static constexpr bool kUnsigned = false;
    static constexpr int kOffset = 0;
    BG_AVX2 static void chunk(const uint8_t* const* rows, int64_t c, int64_t /*nb*/, Chunk8& k) {
        for (int i = 0; i < kAvx2Rows; ++i) {
            k.w[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + c * qtypes::Q8_0::kBlockBytes + 2));
            k.wa[i] = _mm256_abs_epi8(k.w[i]);
        }
        k.d0 = k.d1 = q8_0_scales8(rows, c);
        k.m0 = k.m1 = _mm256_setzero_ps();
    }
};

// IQ2_XXS: chunk k of a block is its group k, four runs of 8 weights, each run a grid point's
// eight magnitudes (one 64-bit entry of iq2xxs_grid) with the signs ksigns gives its 7-bit index.
// A row's chunk is four table loads and its 32 sign bits spread over the bytes (each byte tests
// its bit), the eight rows' sign words computed together in vector form, rather than unpack's 32
// code() calls: the weights as int8 (k.w) and their magnitudes (k.wa) for the signed product
// path. At one token 19 times the generic decoder's rate, 27 with the sign words in vector form
// (bench_cpu BM_CpuRowsInt8; bench/KERNELS.md). The grid loads as one vpgatherdq a row were
// slower on the development machine's Zen 4 (2.6 GB/s cached against 3.0).
// Stateful, like KDecode below: it keeps the block's FP16 super-scales between chunks, so a chunk
// loop must visit a block's chunks in order from its first (rows8 does).
template <>
struct Decode<qtypes::Iq2_XXS> {
    static constexpr bool kUnsigned = false;
    static constexpr int kOffset = 0;
    __m256 block_d;  // lane i: row i's super-scale d, of the block the last chunk was in

    BG_AVX2 void chunk(const uint8_t* const* rows, int64_t c, int64_t /*nb*/, Chunk8& k) {
        using T = qtypes::Iq2_XXS;
        const int64_t at = (c / 8) * T::kBlockBytes;                         // the block
        const int64_t group = at + T::kOffGroups + T::kGroupBytes * (c % 8);  // the chunk's group
        if (c % 8 == 0) {
            alignas(32) float d[kAvx2Rows];
            for (int i = 0; i < kAvx2Rows; ++i) d[i] = qtypes::load_half(rows[i] + at + T::kOffD);
            block_d = _mm256_load_ps(d);
        }
        // Byte j of the 32 takes sign byte j / 8 (a 128-bit lane holds two of them) and tests bit j % 8.
        const __m256i sign_byte = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                   2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
        // The group's word of each row (bits 7r..7r+6: run r's sign index, 28..31: ls), lane i row i.
        alignas(32) uint32_t words[kAvx2Rows];
        for (int i = 0; i < kAvx2Rows; ++i) words[i] = qtypes::load_le32(rows[i] + group + 4);
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(words));
        // ksigns of the four indices, byte r of lane i: the seven bits moved to byte r, then bit 7
        // set to their parity (the xor of each byte's bits folded into its bit 0).
        const __m256i seven = _mm256_set1_epi32(0x7F);
        __m256i idx = _mm256_and_si256(w, seven);
        for (int r = 1; r < 4; ++r)
            idx = _mm256_or_si256(idx, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 7 * r), seven), 8 * r));
        __m256i par = _mm256_xor_si256(idx, _mm256_srli_epi32(idx, 4));
        par = _mm256_xor_si256(par, _mm256_srli_epi32(par, 2));
        par = _mm256_xor_si256(par, _mm256_srli_epi32(par, 1));
        const __m256i signs = _mm256_or_si256(idx, _mm256_slli_epi32(_mm256_and_si256(par, _mm256_set1_epi32(0x01010101)), 7));
        for (int i = 0; i < kAvx2Rows; ++i) {
            const uint8_t* g = rows[i] + group;
            const __m256i mag = _mm256_setr_epi64x(
                static_cast<long long>(qtypes::iq2xxs_grid(g[0])), static_cast<long long>(qtypes::iq2xxs_grid(g[1])),
                static_cast<long long>(qtypes::iq2xxs_grid(g[2])), static_cast<long long>(qtypes::iq2xxs_grid(g[3])));
            const __m256i row_signs = _mm256_permutevar8x32_epi32(signs, _mm256_set1_epi32(i));
            const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(row_signs, sign_byte), bit), bit);
            k.w[i] = _mm256_sub_epi8(_mm256_xor_si256(mag, neg), neg);  // -mag where neg is 0xFF
            k.wa[i] = mag;
        }
        // The traits' sub_scale in vector form: (d * (0.5 + ls)) * 0.25, 0.5 + ls exact.
        const __m256 ls = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 28));
        k.d0 = k.d1 = _mm256_mul_ps(_mm256_mul_ps(block_d, _mm256_add_ps(_mm256_set1_ps(0.5f), ls)), _mm256_set1_ps(0.25f));
        k.m0 = k.m1 = _mm256_setzero_ps();
    }
};

// The K-quants: chunk k (0..7) of a 256-weight block holds 32 weights whose codes sit in one
// 32-byte run of each bit plane, lane l the weight 32k + l (the traits' chunk_planes, in ggml's
// layouts), so a chunk's codes are a few loads, shifts and masks, as unsigned bytes (value +
// T::kCodeOffset); the scales and mins come from the block's (KBlockScales below).
BG_AVX2 inline __m256i bits_at(const uint8_t* p, int shift, int mask) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(static_cast<char>(mask)));
}

// Chunk k of the block at b, as value + T::kCodeOffset.
template <class T>
BG_AVX2 inline __m256i k_codes(const uint8_t* b, int k) {
    const qtypes::ChunkPlanes p = T::chunk_planes(k);
    const __m256i lo = bits_at(b + p.low.offset, p.low.shift, p.low.mask);
    if constexpr (T::kHighAt == 0) return lo;
    else return _mm256_or_si256(lo, _mm256_slli_epi16(bits_at(b + p.high.offset, p.high.shift, p.high.mask), T::kHighAt));
}

// Bytes at..at+15 of each of the eight rows, transposed: b[j] lane i = row i's
// byte j, as int32. Three rounds of interleaves on the eight 16-byte loads.
BG_AVX2 inline void bytes_by_row8(const uint8_t* const* rows, int64_t at, __m256i (&b)[16]) {
    __m128i r[kAvx2Rows];
    for (int i = 0; i < kAvx2Rows; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + at));
    __m128i p[8], q[8];
    for (int i = 0; i < 4; ++i) {  // row pairs: bytes 0..7 (p[2i]) and 8..15 (p[2i + 1]) of rows 2i, 2i + 1
        p[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
        p[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
    }
    // Row quads: q[4h + k] holds bytes 8h + 4k .. 8h + 4k + 3 of rows 0..3, four a 32-bit
    // element, and q[4h + 2 + k] the same bytes of rows 4..7.
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 2; ++k) {
            q[4 * h + k] = k == 0 ? _mm_unpacklo_epi16(p[h], p[2 + h]) : _mm_unpackhi_epi16(p[h], p[2 + h]);
            q[4 * h + 2 + k] = k == 0 ? _mm_unpacklo_epi16(p[4 + h], p[6 + h]) : _mm_unpackhi_epi16(p[4 + h], p[6 + h]);
        }
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 2; ++k) {
            // Bytes j0 = 8h + 4k .. j0 + 3 of all eight rows, two bytes a 128-bit register.
            const __m128i lo = _mm_unpacklo_epi32(q[4 * h + k], q[4 * h + 2 + k]);
            const __m128i hi = _mm_unpackhi_epi32(q[4 * h + k], q[4 * h + 2 + k]);
            const int j0 = 8 * h + 4 * k;
            b[j0] = _mm256_cvtepu8_epi32(lo);
            b[j0 + 1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
            b[j0 + 2] = _mm256_cvtepu8_epi32(hi);
            b[j0 + 3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
        }
}

// One small integer of the eight rows' scales (the traits' ScaleInt), lane i row i, from their
// scale bytes transposed (b[j] lane i: row i's scale byte j - at, as int32).
BG_AVX2 inline __m256i field8(const __m256i (&b)[16], int at, qtypes::PlaneBits p) {
    return _mm256_and_si256(_mm256_srl_epi32(b[p.offset - at], _mm_cvtsi32_si128(p.shift)), _mm256_set1_epi32(p.mask));
}
BG_AVX2 inline __m256i scale_int8(const __m256i (&b)[16], int at, qtypes::ScaleInt f) {
    __m256i v = field8(b, at, f.low);
    if (f.high.mask != 0) v = _mm256_or_si256(v, _mm256_sll_epi32(field8(b, at, f.high), _mm_cvtsi32_si128(f.high_at)));
    v = _mm256_sub_epi32(v, _mm256_set1_epi32(f.minus));
    if (f.sign_bits != 0) {
        const __m256i sign = _mm256_set1_epi32(1 << (f.sign_bits - 1));
        v = _mm256_sub_epi32(_mm256_xor_si256(v, sign), sign);
    }
    return v;
}

// The scale and min integers of every group of the eight rows' block, lane i row i: the traits'
// scale_int and min_int on all eight rows at once, from one 16-byte load a row (a window inside
// the block that holds the kScaleBytes scale bytes) transposed by bytes_by_row8. Q2_K, Q3_K and
// Q6_K went through sub_ints row by row before: one thread of the development machine, one token,
// W in the caches (bench_cpu BM_CpuRowsInt8), Q2_K 3.2-3.4 -> 5.0-5.1 GB/s, Q3_K 4.9 -> 6.5-6.7,
// Q6_K 10.6 -> 12.9 (measurements/ci-machine/bench-cpu/kquant-memory/).
template <class T, int kGroups>
BG_AVX2 inline void sub_ints8(const uint8_t* const* rows, int64_t block, __m256i (&sc)[kGroups], __m256i (&mn)[kGroups]) {
    static_assert(T::kScaleBytes <= 16 && T::kBlockBytes >= 16, "the scales fit one 16-byte window of the block");
    constexpr int window = T::kOffScales + 16 <= T::kBlockBytes ? T::kOffScales : T::kBlockBytes - 16;
    constexpr int at = window - T::kOffScales;  // the scales' byte j is the window's byte j - at
    __m256i b[16];
    bytes_by_row8(rows, block * T::kBlockBytes + window, b);
#pragma GCC unroll 16
    for (int g = 0; g < kGroups; ++g) {
        sc[g] = scale_int8(b, at, T::scale_int(g));
        if constexpr (T::kHasMin) mn[g] = scale_int8(b, at, T::min_int(g));
        else mn[g] = _mm256_setzero_si256();
    }
}

// The scales and mins of one block of the eight rows, for every group sharing one (kSubK
// weights), decoded when a chunk loop enters the block and read by its eight chunks: each FP16
// super-scale is converted once a block rather than twice a chunk. The products are the traits'
// sub_scale (super_block.h) in vector form: each operand is exact, so one rounded multiply gives
// the same float.
template <class T>
struct KBlockScales {
    static constexpr int kGroups = qtypes::SuperBlock<T>::kBlockWeights / T::kSubK;  // 8 or 16
    __m256 d[kGroups], m[kGroups];  // lane i: row i

    BG_AVX2 void load(const uint8_t* const* rows, int64_t block) {
        alignas(32) float dh[kAvx2Rows], mh[kAvx2Rows];
        for (int i = 0; i < kAvx2Rows; ++i) {
            const uint8_t* blk = rows[i] + block * T::kBlockBytes;
            dh[i] = qtypes::load_half(blk + T::kOffD);
            if constexpr (T::kHasMin) mh[i] = qtypes::load_half(blk + T::kOffDmin);
        }
        __m256i sc[kGroups], mn[kGroups];
        sub_ints8<T, kGroups>(rows, block, sc, mn);
        const __m256 vd = _mm256_load_ps(dh);
        for (int g = 0; g < kGroups; ++g) d[g] = _mm256_mul_ps(vd, _mm256_cvtepi32_ps(sc[g]));
        if constexpr (T::kHasMin) {
            const __m256 vm = _mm256_load_ps(mh);
            for (int g = 0; g < kGroups; ++g) m[g] = _mm256_mul_ps(vm, _mm256_cvtepi32_ps(mn[g]));
        }
    }
};

// Stateful, unlike the other decoders: it keeps the block's scales between chunks, so a chunk
// loop must visit a block's chunks in order from its first (rows8 does).
template <class T>
struct KDecode {
    static constexpr bool kUnsigned = true;
    static constexpr int kOffset = T::kCodeOffset;
    KBlockScales<T> scales;

    BG_AVX2 void chunk(const uint8_t* const* rows, int64_t c, int64_t nb, Chunk8& k) {
        const int in_block = static_cast<int>(c % 8);
        if (in_block == 0) {
            const int64_t block = c / 8;
            if ((block + 1) * 8 < nb)  // the next block of each row (int8_rows.h says why)
                for (int i = 0; i < kAvx2Rows; ++i) prefetch_to_l2(rows[i] + (block + 1) * T::kBlockBytes, T::kBlockBytes);
            scales.load(rows, block);
        }
        for (int i = 0; i < kAvx2Rows; ++i) k.w[i] = k_codes<T>(rows[i] + (c / 8) * T::kBlockBytes, in_block);
        // The groups of the chunk's two 16-weight halves (one group for both when kSubK is 32).
        const int g0 = T::kSubK == 32 ? in_block : 2 * in_block, g1 = T::kSubK == 32 ? in_block : 2 * in_block + 1;
        k.d0 = scales.d[g0], k.d1 = scales.d[g1];
        k.m0 = T::kHasMin ? scales.m[g0] : _mm256_setzero_ps();
        k.m1 = T::kHasMin ? scales.m[g1] : _mm256_setzero_ps();
    }
};
template <>
struct Decode<qtypes::Q2_K> : KDecode<qtypes::Q2_K> {};
template <>
struct Decode<qtypes::Q3_K> : KDecode<qtypes::Q3_K> {};
template <>
struct Decode<qtypes::Q4_K> : KDecode<qtypes::Q4_K> {};
template <>
struct Decode<qtypes::Q5_K> : KDecode<qtypes::Q5_K> {};
template <>
struct Decode<qtypes::Q6_K> : KDecode<qtypes::Q6_K> {};

// Eight rows' int32 lanes (lane 0 half: weights 0..15, lane 1 half: 16..31) to each half's sums.
BG_AVX2 inline void halves8(const __m256i (&p)[kAvx2Rows], __m256i& h0, __m256i& h1) {
    // Within each 128-bit lane, two rounds of hadd leave rows 0..3 (resp. 4..7) side by side; the
    // lane swap then gathers each half's eight rows.
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    h0 = _mm256_permute2x128_si256(a, b, 0x20);
    h1 = _mm256_permute2x128_si256(a, b, 0x31);
}

// The eight rows' exact integer dot products with one activation block q[32] (s: its two half
// sums): h0 lane i = row i's sum over weights 0..15, h1 over 16..31. pmaddubsw cannot saturate:
// |w| <= 128 (or, unsigned, w + offset <= 63), |q| <= 127, so a pair is at most 2 * 128 * 127.
template <bool kUnsigned, int kOffset>
BG_AVX2 inline void dot8(const Chunk8& k, __m256i q, const int32_t* s, __m256i& h0, __m256i& h1) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p[kAvx2Rows];
#pragma GCC unroll 8
    for (int i = 0; i < kAvx2Rows; ++i)
        p[i] = kUnsigned ? _mm256_madd_epi16(_mm256_maddubs_epi16(k.w[i], q), ones)
                         : _mm256_madd_epi16(_mm256_maddubs_epi16(k.wa[i], _mm256_sign_epi8(q, k.w[i])), ones);
    halves8(p, h0, h1);
    if constexpr (kOffset != 0) {
        h0 = _mm256_sub_epi32(h0, _mm256_set1_epi32(kOffset * s[0]));
        h1 = _mm256_sub_epi32(h1, _mm256_set1_epi32(kOffset * s[1]));
    }
}

// chunk_partial<T> for the eight rows at once: the same operations in the same order, one lane a row.
template <class T>
BG_AVX2 inline __m256 partial8(const Chunk8& k, __m256i h0, __m256i h1, float dx, const int32_t* s) {
    const __m256 vdx = _mm256_set1_ps(dx);
    __m256 p;
    if constexpr (T::kSubK == 32) {
        p = _mm256_mul_ps(_mm256_mul_ps(k.d0, vdx), _mm256_cvtepi32_ps(_mm256_add_epi32(h0, h1)));
        if constexpr (T::kHasMin)
            p = _mm256_sub_ps(p, _mm256_mul_ps(_mm256_mul_ps(k.m0, vdx), _mm256_set1_ps(static_cast<float>(s[0] + s[1]))));
    } else {
        p = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(k.d0, vdx), _mm256_cvtepi32_ps(h0)),
                          _mm256_mul_ps(_mm256_mul_ps(k.d1, vdx), _mm256_cvtepi32_ps(h1)));
        if constexpr (T::kHasMin)
            p = _mm256_sub_ps(p, _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(k.m0, vdx), _mm256_set1_ps(static_cast<float>(s[0]))),
                                               _mm256_mul_ps(_mm256_mul_ps(k.m1, vdx), _mm256_set1_ps(static_cast<float>(s[1])))));
    }
    return p;
}

// One token (decode): the types whose chunk decodes in a few instructions are decoded straight
// into the product, with nothing stored. MXFP4's table gives the values plus 12 (0..24, unsigned,
// so pmaddubsw takes them as they are), and the 12 * (block sum of q) this adds is taken off the
// exact integer sum afterwards; Q8_0 goes through |w| and q * sign(w).
template <class T>
struct OneToken {
    static constexpr bool kDirect = false;
};
template <>
struct OneToken<qtypes::Mxfp4> {
    static constexpr bool kDirect = true;
    static constexpr int kOffset = 12;
    BG_AVX2 static __m256i product(const uint8_t* row, int64_t c, __m256i q) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(mxfp4_plus12(row + c * qtypes::Mxfp4::kBlockBytes), q),
                                 _mm256_set1_epi16(1));
    }
    BG_AVX2 static __m256 scales(const uint8_t* const* rows, int64_t c) { return mxfp4_scales8(rows, c); }
};
template <>
struct OneToken<qtypes::Q8_0> {
    static constexpr bool kDirect = true;
    static constexpr int kOffset = 0;
    BG_AVX2 static __m256i product(const uint8_t* row, int64_t c, __m256i q) {
        const uint8_t* b = row + c * qtypes::Q8_0::kBlockBytes;
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w)), _mm256_set1_epi16(1));
    }
    BG_AVX2 static __m256 scales(const uint8_t* const* rows, int64_t c) { return q8_0_scales8(rows, c); }
};

template <class T>
BG_AVX2 void rows8_one_token(const Int8RowsArgs& a, int64_t g, int n_rows, const uint8_t* const* rows) {
    static_assert(T::kSubK == 32 && !T::kHasMin, "one scale a block, no min");
    const int64_t nb = a.W->cols / 32;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < nb; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + c * 32));
        __m256i p[kAvx2Rows];
#pragma GCC unroll 8
        for (int i = 0; i < kAvx2Rows; ++i) p[i] = OneToken<T>::product(rows[i], c, q);
        __m256i h0, h1;
        halves8(p, h0, h1);
        __m256i isum = _mm256_add_epi32(h0, h1);
        if constexpr (OneToken<T>::kOffset != 0)
            isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(OneToken<T>::kOffset * (a.xs[2 * c] + a.xs[2 * c + 1])));
        // chunk_partial: (d * dx) * float(isum), then added in chunk order.
        const __m256 d = OneToken<T>::scales(rows, c);
        const __m256 part = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(a.xd[c])), _mm256_cvtepi32_ps(isum));
        acc = _mm256_add_ps(acc, part);
    }
    if (n_rows == kAvx2Rows) {
        _mm256_storeu_ps(a.y + g, acc);
    } else {
        alignas(32) float lanes[kAvx2Rows];
        _mm256_store_ps(lanes, acc);
        for (int i = 0; i < n_rows; ++i) a.y[g + i] = lanes[i];
    }
}

// The eight rows' y for tokens t0 .. t0 + n_t - 1 (n_t <= kTokTile): each chunk decoded once and
// used by every token of the tile. kFixedTok, where not 0, is n_t known at compile time: one token
// (decode) then runs with no loop over the tile, the decoded chunk kept in registers rather than
// stored and read back (one thread of the development machine, W from memory: Q4_K 8.2 -> 9.6
// GB/s, Q2_K 4.4 -> 5.0, Q3_K 5.3 -> 5.8; bench/KERNELS.md).
template <class T, int kFixedTok>
BG_AVX2 void rows8_tile(const Int8RowsArgs& a, int64_t g, int n_rows, const uint8_t* const* rows, int64_t t0, int n_t_arg) {
    const MatView& W = *a.W;
    const int64_t nb = W.cols / 32;
    const int n_t = kFixedTok != 0 ? kFixedTok : n_t_arg;
    __m256 acc[kTokTile];
    for (int t = 0; t < kTokTile; ++t) acc[t] = _mm256_setzero_ps();
    Chunk8 k;
    Decode<T> decode;
    for (int64_t c = 0; c < nb; ++c) {
        decode.chunk(rows, c, nb, k);
        for (int t = 0; t < n_t; ++t) {
            const int64_t tok = t0 + t;
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + tok * W.cols + c * 32));
            const int32_t* s = a.xs + tok * 2 * nb + 2 * c;
            __m256i h0, h1;
            dot8<Decode<T>::kUnsigned, Decode<T>::kOffset>(k, q, s, h0, h1);
            acc[t] = _mm256_add_ps(acc[t], partial8<T>(k, h0, h1, a.xd[tok * nb + c], s));
        }
    }
    for (int t = 0; t < n_t; ++t) {
        float* y = a.y + (t0 + t) * a.ldy + g;
        if (n_rows == kAvx2Rows) {
            _mm256_storeu_ps(y, acc[t]);
        } else {
            alignas(32) float lanes[kAvx2Rows];
            _mm256_store_ps(lanes, acc[t]);
            for (int i = 0; i < n_rows; ++i) y[i] = lanes[i];
        }
    }
}

template <class T>
BG_AVX2 void rows8(const Int8RowsArgs& a, int64_t r0, int64_t r1) {
    const MatView& W = *a.W;
    for (int64_t g = r0; g < r1; g += kAvx2Rows) {
        const int n_rows = static_cast<int>(std::min<int64_t>(kAvx2Rows, r1 - g));
        const uint8_t* rows[kAvx2Rows];
        // A short last group decodes its last row again in the spare lanes and stores none of them.
        for (int i = 0; i < kAvx2Rows; ++i)
            rows[i] = W.data + static_cast<uint64_t>(g + std::min(i, n_rows - 1)) * W.row_stride;
        if (a.n_tok == 1) {
            if constexpr (OneToken<T>::kDirect) rows8_one_token<T>(a, g, n_rows, rows);
            else rows8_tile<T, 1>(a, g, n_rows, rows, 0, 1);
            continue;
        }
        for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokTile)
            rows8_tile<T, 0>(a, g, n_rows, rows, t0, static_cast<int>(std::min<int64_t>(kTokTile, a.n_tok - t0)));
    }
}

}  // namespace

bool int8_avx2_built() { return true; }

void int8_rows_avx2(const Int8RowsArgs& a, int64_t r0, int64_t r1) {
    qtypes::visit(a.W->type, [&](auto traits) { rows8<decltype(traits)>(a, r0, r1); });
}

}  // namespace bg::cpu

#else  // not an x86-64 GCC or Clang build: the portable kernel serves alone

namespace bg::cpu {

bool int8_avx2_built() { return false; }

void int8_rows_avx2(const Int8RowsArgs&, int64_t, int64_t) {
    BG_CHECK_MSG(false, "int8_rows_avx2: this build has no AVX2 kernel (int8_avx2_built() is false)");
}

}  // namespace bg::cpu

#endif
