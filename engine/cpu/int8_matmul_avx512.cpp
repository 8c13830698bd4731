// The integer matmul's AVX-512 row kernel (engine/cpu/int8_rows.h), for CPUs with AVX-512 F, BW,
// VL and VNNI. Only the functions marked BG_AVX512 or BG_AVX512_INLINE here are compiled for
// those (a target attribute, not -m flags on the file), for the reason int8_matmul_avx2.cpp
// gives: the inline functions this file shares with the rest of the engine (the traits, visit)
// keep the build's baseline instructions, so the linker's one copy of each still runs everywhere.
//
// What it adds is the decode hot path: one token (n_tok == 1) of MXFP4, Q8_0, a K-quant (Q2_K to
// Q6_K) or IQ2_XXS, sixteen rows at a time, one zmm lane a row in the float part. Several tokens go
// to the AVX2 kernel, which every CPU with AVX-512 also runs (cpu_isa_usable checks).
//
// The arithmetic stays the portable kernel's bit for bit:
//  - each block's integer sum is exact: vpdpbusd multiplies unsigned bytes by signed bytes and
//    adds each four products into an int32 without saturating, so the weights go in as unsigned
//    bytes offset by a constant (MXFP4: value + 12, as in the AVX2 kernel; Q8_0: w + 128, its sign
//    bit flipped) and the offset times the block sum of q (from Int8RowsArgs::xs) is taken off;
//  - the float part is chunk_partial's, (d * dx) * float(isum), added to the row's sum in chunk
//    order, each operation rounded once. AVX-512F brings FMA with it, and GCC's _mm512_mul_ps and
//    _mm512_add_ps are plain vector arithmetic that -ffp-contract=fast (GCC's default) may fuse
//    into one FMA, rounded once where chunk_partial rounds twice: the float operations here are
//    the _round forms with _MM_FROUND_CUR_DIRECTION, builtins the compiler does not contract,
//    which are the same instructions under the same MXCSR rounding.
//
// Layout of one chunk (32 weights) of the sixteen rows, the block's products summed in vpdpbusd's
// int32 lanes and then across lanes by a transposing tree (sum4x4), which leaves lane j holding
// row j's sum:
//  - MXFP4: a row's 16 code bytes fill one 128-bit lane, four rows a zmm (vector k holds rows k,
//    4 + k, 8 + k, 12 + k); the low nibbles (weights 0..15) and the high ones (16..31) go through
//    the vpshufb table against q[0..15] and q[16..31] broadcast to every lane;
//  - Q8_0: a row's 32 weight bytes fill one 256-bit half, two rows a zmm, against q[0..31]
//    broadcast to both halves;
//  - the sixteen rows' scales (MXFP4's E8M0 byte, Q8_0's FP16) are put together in general
//    registers and widened once, rather than inserted lane by lane: on Intel's cores one port does
//    every 512-bit shuffle, and the decode and the sum tree already keep it busy.
#include "cpu/int8_rows.h"

#include "util/check.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include "cpu/x86_intrinsics.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "tensor/qtypes/all.h"
#include "tensor/qtypes/int8_act.h"

#define BG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
// The pieces of one chunk's work, inlined into the chunk loop whatever the compiler's estimate of
// their size: a call would spill the accumulator and reload the constants every chunk.
#define BG_AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline

namespace bg::cpu {

namespace {

constexpr int kRows = static_cast<int>(kAvx512Rows);
static_assert(kRows == 16, "one zmm lane a row");

// chunk_partial's multiply and add, each rounded once (see the top of the file for why not
// _mm512_mul_ps and _mm512_add_ps).
BG_AVX512_INLINE __m512 mul16(__m512 a, __m512 b) { return _mm512_mul_round_ps(a, b, _MM_FROUND_CUR_DIRECTION); }
BG_AVX512_INLINE __m512 add16(__m512 a, __m512 b) { return _mm512_add_round_ps(a, b, _MM_FROUND_CUR_DIRECTION); }

// Sixteen consecutive rows of W, at the current block: row 4m + k at p[m] + k * stride. Four
// bases and two strides (s, 3s) make every row an address mode of its own ([p + s], [p + 2s],
// [p + s3]), where sixteen row pointers would not fit the general registers.
struct Rows16 {
    const uint8_t* p[4];
    int64_t s, s3;

    BG_AVX512_INLINE const uint8_t* row(int i) const {
        const uint8_t* b = p[i / 4];
        switch (i % 4) {
            case 0: return b;
            case 1: return b + s;
            case 2: return b + 2 * s;
            default: return b + s3;
        }
    }
    BG_AVX512_INLINE void advance(int64_t bytes) {
        for (const uint8_t*& b : p) b += bytes;
    }
};

// Four vectors of four rows to the sixteen rows' sums: vector k's 128-bit lane L holds four int32
// parts of row 4L + k; the result's lane 4L + k is their sum, so lane j is row j. Two rounds of
// interleave and add, each halving the parts a row has and doubling the rows a lane holds.
BG_AVX512_INLINE __m512i sum4x4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
    // Per 128-bit lane, with a0's parts x0..x3 and a1's y0..y3: (x0+x2, y0+y2, x1+x3, y1+y3).
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    // (x0+x2, y0+y2, z0+z2, w0+w2) + (x1+x3, y1+y3, z1+z3, w1+w3): each row's whole sum.
    return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// Stops GCC's SLP vectoriser from pairing the independent general-register chains below into
// two-lane vectors, which it builds through the stack (a store-forwarding stall each time).
#define BG_KEEP_IN_GPR(v) __asm__("" : "+r"(v))

// The byte at offset o of each of the sixteen rows, lane i row i.
BG_AVX512_INLINE __m512i bytes16(const Rows16& r, int64_t o) {
    uint64_t half[2];
    for (int h = 0; h < 2; ++h) {
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(r.row(8 * h + i)[o]) << (8 * i);
        BG_KEEP_IN_GPR(v);
        half[h] = v;
    }
    return _mm512_cvtepu8_epi32(_mm_set_epi64x(static_cast<long long>(half[1]), static_cast<long long>(half[0])));
}

// The FP16 value at offset o of each of the sixteen rows, lane i row i. vcvtph2ps converts every
// half exactly, as qtypes::load_half does (it also quiets a signalling NaN, which the first
// multiply of chunk_partial quiets in the portable kernel all the same).
BG_AVX512_INLINE __m512 halves16(const Rows16& r, int64_t o) {
    uint64_t quarter[4];
    for (int h = 0; h < 4; ++h) {
        uint64_t v = 0;
        for (int i = 0; i < 4; ++i) v |= static_cast<uint64_t>(qtypes::load_le16(r.row(4 * h + i) + o)) << (16 * i);
        BG_KEEP_IN_GPR(v);
        quarter[h] = v;
    }
    return _mm512_cvtph_ps(_mm256_set_epi64x(static_cast<long long>(quarter[3]), static_cast<long long>(quarter[2]),
                                             static_cast<long long>(quarter[1]), static_cast<long long>(quarter[0])));
}

// One token's block sums of the sixteen rows, per type, r at the block: sums() gives lane j = row
// j's exact sum of (weight + kOffset) * q over the block, scales() lane j = row j's block scale as
// the traits give it.
template <class T>
struct OneToken16 {
    static constexpr bool kDirect = false;  // not here: the AVX2 kernel takes it
};

template <>
struct OneToken16<qtypes::Mxfp4> {
    static constexpr bool kDirect = true;
    static constexpr int kOffset = 12;

    // Row i's 16 code bytes.
    BG_AVX512_INLINE static __m128i codes(const Rows16& r, int i) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(r.row(i) + 1));
    }
    // Those of rows k, 4 + k, 8 + k, 12 + k, in that order of 128-bit lanes.
    BG_AVX512_INLINE static __m512i codes4(const Rows16& r, int k) {
        __m512i z = _mm512_castsi128_si512(codes(r, k));
        z = _mm512_inserti32x4(z, codes(r, 4 + k), 1);
        z = _mm512_inserti32x4(z, codes(r, 8 + k), 2);
        return _mm512_inserti32x4(z, codes(r, 12 + k), 3);
    }

    BG_AVX512_INLINE static __m512i sums(const Rows16& r, const int8_t* q) {
        // The AVX2 kernel's table: each code's value plus 12 (0..24), so vpdpbusd's unsigned
        // operand takes it as it is.
        const __m512i table =
            _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const __m512i q_lo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
        const __m512i q_hi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
        __m512i p[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i codes = codes4(r, k);
            const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(codes, low4));
            const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(codes, 4), low4));
            // Operand order: the unsigned bytes (the weights) first, the signed (q) second.
            p[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, q_lo), hi, q_hi);
        }
        return sum4x4(p[0], p[1], p[2], p[3]);
    }

    // Mxfp4::scale_of in vector form (as the AVX2 kernel's mxfp4_scales8): e >= 2 gives the float
    // whose bits are (e - 1) << 23, e = 0 and 1 the subnormals whose bits are 0x00200000 << e.
    BG_AVX512_INLINE static __m512 scales(const Rows16& r) {
        const __m512i e = bytes16(r, 0);
        const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        // The blend takes its third operand where the mask is set.
        return _mm512_castsi512_ps(
            _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), subnormal, normal));
    }
};

template <>
struct OneToken16<qtypes::Q8_0> {
    static constexpr bool kDirect = true;
    static constexpr int kOffset = 128;

    // Row i's 32 weight bytes.
    BG_AVX512_INLINE static __m256i weights(const Rows16& r, int i) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.row(i) + 2));
    }

    BG_AVX512_INLINE static __m512i sums(const Rows16& r, const int8_t* q) {
        const __m512i q2 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
        // w xor 0x80 is w + 128 as an unsigned byte (0..255; the stored -128 gives 0).
        const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
        __m512i p[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            // Vector i holds rows j and j + 4 (j = 0..3, then 8..11), the order the tree below wants.
            const int j = i < 4 ? i : i + 4;
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(weights(r, j)), weights(r, j + 4), 1);
            p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(w, sign), q2);
        }
        // sum4x4 of vectors 0..3 leaves, 128-bit lane by lane, rows 0..3's sums over weights 0..15,
        // then over 16..31, then rows 4..7's two; of vectors 4..7 rows 8..15's. Adding each pair of
        // neighbouring 128-bit lanes finishes the rows in order.
        const __m512i t0 = sum4x4(p[0], p[1], p[2], p[3]), t1 = sum4x4(p[4], p[5], p[6], p[7]);
        return _mm512_add_epi32(_mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    }

    BG_AVX512_INLINE static __m512 scales(const Rows16& r) { return halves16(r, 0); }
};

// Rows g .. g + 15 of W at one token; y gets the lanes of `store` (lane i: row g + i).
template <class T>
BG_AVX512 void rows16_one_token(const Int8RowsArgs& a, int64_t g, __mmask16 store) {
    static_assert(T::kSubK == 32 && !T::kHasMin, "one scale a block, no min");
    const MatView& W = *a.W;
    const int64_t nb = W.cols / 32;
    const int64_t s = static_cast<int64_t>(W.row_stride);
    const uint8_t* base = W.data + static_cast<uint64_t>(g) * W.row_stride;
    Rows16 r{{base, base + 4 * s, base + 8 * s, base + 12 * s}, s, 3 * s};
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < nb; ++c, r.advance(T::kBlockBytes)) {
        __m512i isum = OneToken16<T>::sums(r, a.xq + c * 32);
        isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(OneToken16<T>::kOffset * (a.xs[2 * c] + a.xs[2 * c + 1])));
        // chunk_partial: (d * dx) * float(isum), then added in chunk order.
        const __m512 d = OneToken16<T>::scales(r);
        acc = add16(acc, mul16(mul16(d, _mm512_set1_ps(a.xd[c])), _mm512_cvtepi32_ps(isum)));
    }
    // Lanes outside `store` are not written (nor can they fault).
    _mm512_mask_storeu_ps(a.y + g, store, acc);
}

// ---- The K-quants at one token: 256-weight blocks of eight chunks ----
//
// A chunk's codes sit in one 32-byte run of each bit plane (the traits' chunk_planes, in ggml's
// layouts), and several chunks share a run (Q2_K's four chunks take the four 2-bit fields of the
// same bytes, Q5_K's eight its high-bit run). So each run a block uses is loaded once for the
// sixteen rows and transposed to dwords by row (run_by_row16: vector u, lane i holds row i's bytes
// 4u .. 4u + 3), and every chunk of the block takes its codes from those vectors with shifts and
// masks that act inside each byte, as before. vpdpbusd then sums each lane's four products into
// that row's lane directly, against a dword of q broadcast, so a 16-weight half's sum is four
// vpdpbusd with no sum tree after: the transposes cost 24 shuffles a run, where the tree cost 20
// a chunk. The codes go in unsigned (value + kCodeOffset), the offset times the half's sum of q
// taken off after; where a chunk has one field (kHighAt 0), the field is taken in place, masked
// but not shifted down, and the exact sums are shifted down after (each is 2^shift times the
// field's). A block's scales and mins are decoded for the sixteen rows when the chunk loop
// enters it, from 16 bytes of each row transposed the same way (bytes16_by_row; the FP16
// super-scales from there too where they fit, else from one dword gather), then the traits'
// scale_int and min_int fields on int32 lanes. On the development machine's Zen 4 core (bench_cpu
// BM_CpuRowsInt8, cached, one thread) this took Q2_K from 9.8 to 15.4 GB/s, Q3_K 10.9 to 16.3, Q4_K
// 19.5 to 27.9, Q5_K 18.8 to 24.6, Q6_K 19.6 to 24.3, the same y bit for bit.

// The 32 bytes at offset o of the sixteen rows' block, by row: t[u] lane i = row i's bytes 4u ..
// 4u + 3 (one dword). Rows j and j + 4 share a load (j = 0..3, then 8..11); a 4x4 dword transpose
// inside each 128-bit lane gathers four rows' dwords u (and 4 + u), and the 128-bit lanes of the
// two groups of eight rows are then put in row order.
BG_AVX512_INLINE void run_by_row16(const Rows16& r, int64_t o, __m512i (&t)[8]) {
    __m512i y[2][4];
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
        __m512i a[4];
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
            const int j = 8 * g + m;
            a[m] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.row(j) + o))),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.row(j + 4) + o)), 1);
        }
        // Per 128-bit lane (row j's dwords 0..3, 4..7, row j + 4's 0..3, 4..7), a[m]'s element e:
        // x01l = (a0.e0, a1.e0, a0.e1, a1.e1), x01h the same of e2 and e3.
        const __m512i x01l = _mm512_unpacklo_epi32(a[0], a[1]), x01h = _mm512_unpackhi_epi32(a[0], a[1]);
        const __m512i x23l = _mm512_unpacklo_epi32(a[2], a[3]), x23h = _mm512_unpackhi_epi32(a[2], a[3]);
        // y[g][u]: element u of each 128-bit lane of the four a[m], in row order.
        y[g][0] = _mm512_unpacklo_epi64(x01l, x23l);
        y[g][1] = _mm512_unpackhi_epi64(x01l, x23l);
        y[g][2] = _mm512_unpacklo_epi64(x01h, x23h);
        y[g][3] = _mm512_unpackhi_epi64(x01h, x23h);
    }
    // y[g][u]'s 128-bit lanes: rows 8g..8g+3 dword u, the same rows' dword 4 + u, rows 8g+4..8g+7
    // dword u, their dword 4 + u.
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
        t[u] = _mm512_shuffle_i32x4(y[0][u], y[1][u], _MM_SHUFFLE(2, 0, 2, 0));
        t[4 + u] = _mm512_shuffle_i32x4(y[0][u], y[1][u], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

// The K-quants this kernel takes at one token: those whose traits say where a chunk's codes sit.
template <class T>
concept HasChunkPlanes = requires { T::chunk_planes(0); };

// The distinct 32-byte runs the eight chunks of T's block read, in the order chunks first use them.
template <class T>
struct KRuns {
    static constexpr int kMax = 16;
    struct List {
        int offset[kMax] = {};
        int count = 0;
        constexpr void add(int o) {
            for (int i = 0; i < count; ++i)
                if (offset[i] == o) return;
            offset[count++] = o;
        }
    };
    static constexpr List kList = [] {
        List l;
        for (int k = 0; k < 8; ++k) {
            l.add(T::chunk_planes(k).low.offset);
            if (T::kHighAt != 0) l.add(T::chunk_planes(k).high.offset);
        }
        return l;
    }();
    static constexpr int kCount = kList.count;
    static constexpr int index_of(int offset) {
        for (int i = 0; i < kCount; ++i)
            if (kList.offset[i] == offset) return i;
        return -1;
    }
};

// (v >> shift) & mask in each byte of v (the 16-bit shift's bits from the neighbouring byte fall
// outside the mask).
BG_AVX512_INLINE __m512i field_of(__m512i v, qtypes::PlaneBits p) {
    return _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(p.shift)), _mm512_set1_epi8(static_cast<char>(p.mask)));
}

// ((v >> shift) & mask) << at in each byte, in two operations: one shift by the difference, then
// the mask in place (what the shift brings in from the neighbouring byte falls outside it).
BG_AVX512_INLINE __m512i field_at(__m512i v, qtypes::PlaneBits p, int at) {
    const __m512i m = _mm512_set1_epi8(static_cast<char>(p.mask << at));
    if (p.shift <= at) return _mm512_and_si512(_mm512_sll_epi16(v, _mm_cvtsi32_si128(at - p.shift)), m);
    return _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(p.shift - at)), m);
}

// The 16 bytes at offset o of the sixteen rows' block, by row: dw[u] lane i = row i's bytes 4u ..
// 4u + 3. Each vector takes four rows' 16 bytes (128-bit lane L: row 4L + k, Rows16's p[L] + k * s),
// then a 4x4 dword transpose inside each 128-bit lane. Loads and shuffles, rather than one dword
// gather per u: on Zen 4 the gathers cost a fifth of a Q2_K block's time.
BG_AVX512_INLINE __m128i bytes16_of(const Rows16& r, int i, int64_t o) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(r.row(i) + o));
}
BG_AVX512_INLINE void bytes16_by_row(const Rows16& r, int64_t o, __m512i (&dw)[4]) {
    __m512i a[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        __m512i v = _mm512_castsi128_si512(bytes16_of(r, k, o));
        v = _mm512_inserti32x4(v, bytes16_of(r, 4 + k, o), 1);
        v = _mm512_inserti32x4(v, bytes16_of(r, 8 + k, o), 2);
        a[k] = _mm512_inserti32x4(v, bytes16_of(r, 12 + k, o), 3);
    }
    const __m512i x01l = _mm512_unpacklo_epi32(a[0], a[1]), x01h = _mm512_unpackhi_epi32(a[0], a[1]);
    const __m512i x23l = _mm512_unpacklo_epi32(a[2], a[3]), x23h = _mm512_unpackhi_epi32(a[2], a[3]);
    dw[0] = _mm512_unpacklo_epi64(x01l, x23l);
    dw[1] = _mm512_unpackhi_epi64(x01l, x23l);
    dw[2] = _mm512_unpacklo_epi64(x01h, x23h);
    dw[3] = _mm512_unpackhi_epi64(x01h, x23h);
}

// One bit field at byte b of those 16 bytes (lane i row i), moved to bit `at` of an int32: one
// shift by the difference and the mask in place (a field never leaves its byte, so nothing else
// falls inside the mask).
BG_AVX512_INLINE __m512i field16(const __m512i* dw, int b, int shift, int mask, int at) {
    const int from = 8 * (b & 3) + shift;  // the field's lowest bit in its dword
    __m512i v = dw[b >> 2];
    if (from > at) v = _mm512_srl_epi32(v, _mm_cvtsi32_si128(from - at));
    else if (from < at) v = _mm512_sll_epi32(v, _mm_cvtsi32_si128(at - from));
    return _mm512_and_si512(v, _mm512_set1_epi32(mask << at));
}

// One small integer of the sixteen rows' scales (the traits' ScaleInt, whose offsets count from
// the scales, which lie at byte `delta` of dw's 16), lane i row i.
BG_AVX512_INLINE __m512i scale_int16(const __m512i* dw, int delta, qtypes::ScaleInt f) {
    __m512i v = field16(dw, delta + f.low.offset, f.low.shift, f.low.mask, 0);
    if (f.high.mask != 0) v = _mm512_or_si512(v, field16(dw, delta + f.high.offset, f.high.shift, f.high.mask, f.high_at));
    if (f.minus != 0) v = _mm512_sub_epi32(v, _mm512_set1_epi32(f.minus));
    if (f.sign_bits != 0) {
        const __m512i sign = _mm512_set1_epi32(1 << (f.sign_bits - 1));
        v = _mm512_sub_epi32(_mm512_xor_si512(v, sign), sign);
    }
    return v;
}

// The FP16 values in the low or high half of each lane's dword, as floats. vpmovdw keeps each
// lane's low half, and vcvtph2ps converts every half exactly, as qtypes::load_half does (it also
// quiets a signalling NaN, which the first multiply of chunk_partial quiets in the portable
// kernel all the same).
BG_AVX512_INLINE __m512 halves_of(__m512i dw, bool high_half) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(high_half ? _mm512_srli_epi32(dw, 16) : dw));
}

// Where a K-quant block's scales and FP16 super-scales are read from: the 16 bytes at kBase, which
// hold the scales and, where they fit in the same 16 (Q3_K, Q4_K, Q5_K), the super-scales too;
// else (Q2_K, Q6_K) the super-scales come from one dword gather at kDword.
template <class T>
constexpr int dmin_offset() {  // d's where there is no min
    if constexpr (T::kHasMin) return T::kOffDmin;
    else return T::kOffD;
}
template <class T>
struct KScaleBytes {
    static constexpr int kOffDmin = dmin_offset<T>();
    static constexpr int kLo = std::min({T::kOffScales, T::kOffD, kOffDmin});
    static constexpr int kHi = std::max({T::kOffScales + T::kScaleBytes, T::kOffD + 2, kOffDmin + 2});
    static constexpr bool kOne = kHi - kLo <= 16;  // one 16-byte read has them all
    static constexpr int kBase = std::min(kOne ? kLo : T::kOffScales, T::kBlockBytes - 16);
    static constexpr int kDword = std::min(T::kOffD, T::kBlockBytes - 4);  // where not kOne: d (and dmin)
    static_assert(kBase >= 0 && kBase <= T::kOffScales && T::kOffScales + T::kScaleBytes <= kBase + 16, "the scales in the 16");
    static_assert(kOne || !T::kHasMin || kOffDmin == T::kOffD + 2, "dmin in d's dword");
    static_assert(kOne ? (T::kOffD - kBase) % 2 == 0 : (T::kOffD - kDword) % 2 == 0, "a half a dword's half");
};

// One block's scales and mins of the sixteen rows, group by group (kSubK weights a group), as
// the traits' sub_scale gives them: the product of two exact operands, rounded once.
template <class T>
struct KScales16 {
    static constexpr int kGroups = qtypes::SuperBlock<T>::kBlockWeights / T::kSubK;  // 8 or 16
    __m512 d[kGroups], m[kGroups];

    // offs: lane i = i * the row stride (the gather's indices from row 0).
    BG_AVX512_INLINE void load(const Rows16& r, __m512i offs) {
        using B = KScaleBytes<T>;
        __m512i dw[4];
        bytes16_by_row(r, B::kBase, dw);
        __m512 vd, vm = _mm512_setzero_ps();
        if constexpr (B::kOne) {
            vd = halves_of(dw[(T::kOffD - B::kBase) / 4], (T::kOffD - B::kBase) % 4 != 0);
            if constexpr (T::kHasMin) vm = halves_of(dw[(B::kOffDmin - B::kBase) / 4], (B::kOffDmin - B::kBase) % 4 != 0);
        } else {
            const __m512i sup = _mm512_i32gather_epi32(offs, r.p[0] + B::kDword, 1);
            vd = halves_of(sup, T::kOffD != B::kDword);
            if constexpr (T::kHasMin) vm = halves_of(sup, true);
        }
        constexpr int kDelta = T::kOffScales - B::kBase;
#pragma GCC unroll 16
        for (int g = 0; g < kGroups; ++g) d[g] = mul16(vd, _mm512_cvtepi32_ps(scale_int16(dw, kDelta, T::scale_int(g))));
        if constexpr (T::kHasMin) {
#pragma GCC unroll 16
            for (int g = 0; g < kGroups; ++g) m[g] = mul16(vm, _mm512_cvtepi32_ps(scale_int16(dw, kDelta, T::min_int(g))));
        }
    }
};

// How many blocks ahead of the one it computes the K-quant and IQ2_XXS kernels ask for each row's
// bytes: a block of sixteen rows takes 0.1-0.3 us at one token, about what a read from memory
// takes, and the reads of sixteen rows wait in line. One thread of the development machine, W from
// memory (bench_cpu BM_CpuRowsInt8): 1 -> 4 -> 8 blocks gave Q2_K 8.0 -> 11.8 -> 14.0 GB/s, Q4_K
// 13.8 -> 18.9 -> 23.5; Q5_K and Q6_K gained from 1 to 4 only.
constexpr int64_t kPrefetchBlocks = 8;

// Where a call's groups of sixteen rows come from: whether this group is the call's first (no
// earlier group prefetched its first blocks) and whether the call goes on into the next sixteen
// rows (which this group then prefetches). The prefetch stays inside the call: the expert job
// (cpu/expert_job.h) hands its members one group a call, claimed in turn, so the rows after a
// group are most often another core's, and a prefetch into them put the first 8 of Q4_K's 20
// blocks a row into the wrong core's L2 (a full-width Q4_K expert on the H200's 16-core host:
// 235 us before the prefetch went past the rows, 289 with it; bench_cpu of 0abe8e9 and c34636f).
struct GroupInCall {
    bool first, more;
};

// The super-block kernels' walk over sixteen rows of W from row g: the rows, the gathers' offsets
// from the first (lane i: i * the row stride), and the reads asked ahead of the blocks computed.
template <int kBlockBytes>
struct BlockWalk16 {
    Rows16 r;
    __m512i offs;
    int64_t nblk;
    bool next_rows;  // sixteen more rows of this call after these, to prefetch into

    BG_AVX512_INLINE BlockWalk16(const MatView& W, int64_t g, int64_t block_weights, GroupInCall in_call)
        : nblk(W.cols / block_weights), next_rows(in_call.more) {
        const int64_t s = static_cast<int64_t>(W.row_stride);
        const uint8_t* base = W.data + static_cast<uint64_t>(g) * W.row_stride;
        r = Rows16{{base, base + 4 * s, base + 8 * s, base + 12 * s}, s, 3 * s};
        offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                  _mm512_set1_epi32(static_cast<int32_t>(s)));
        if (in_call.first)  // the call's first rows' first blocks, which no earlier group prefetched
            for (int64_t e = 0; e < std::min<int64_t>(kPrefetchBlocks, nblk); ++e)
                for (int i = 0; i < kRows; ++i) prefetch_to_l2(r.row(i) + e * kBlockBytes, kBlockBytes);
    }
    // On entering block b (r at it): the sixteen rows' block kPrefetchBlocks ahead, counted on
    // into the next sixteen rows' first blocks where this call computes them (int8_rows.h says why
    // these kernels prefetch at all).
    BG_AVX512_INLINE void prefetch(int64_t b) const {
        if (b + kPrefetchBlocks < nblk) {
            for (int i = 0; i < kRows; ++i) prefetch_to_l2(r.row(i) + kPrefetchBlocks * kBlockBytes, kBlockBytes);
        } else if (next_rows && b + kPrefetchBlocks - nblk < nblk) {  // rows shorter than the distance: none
            const int64_t at = (b + kPrefetchBlocks - nblk) * kBlockBytes + kRows * r.s;
            for (int i = 0; i < kRows; ++i) prefetch_to_l2(r.row(i) - b * kBlockBytes + at, kBlockBytes);
        }
    }
    BG_AVX512_INLINE void advance() { r.advance(kBlockBytes); }  // on to the rows' next block
};

// Rows g .. g + 15 of a K-quant W at one token; y gets the lanes of `store` (lane i: row g + i).
// Each chunk's partial is chunk_partial's (the AVX2 kernel's partial8, one lane a row), added to
// the row's sum in chunk order.
template <class T>
BG_AVX512 void rows16_one_token_k(const Int8RowsArgs& a, int64_t g, __mmask16 store, GroupInCall in_call) {
    BlockWalk16<T::kBlockBytes> walk(*a.W, g, 256, in_call);
    const Rows16& r = walk.r;
    __m512 acc = _mm512_setzero_ps();
    KScales16<T> ks;
    using Runs = KRuns<T>;
    // A single field is taken in place and its sums shifted down after (see above).
    constexpr bool kInPlace = T::kHighAt == 0;
    for (int64_t b = 0; b < walk.nblk; ++b, walk.advance()) {
        walk.prefetch(b);
        ks.load(r, walk.offs);
        __m512i run[Runs::kCount][8];  // run[x][u] lane i: row i's bytes 4u .. 4u + 3 of run x
#pragma GCC unroll 8
        for (int x = 0; x < Runs::kCount; ++x) run_by_row16(r, Runs::kList.offset[x], run[x]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const int64_t c = b * 8 + k;
            const int8_t* q = a.xq + c * 32;
            const qtypes::ChunkPlanes p = T::chunk_planes(k);
            const __m512i* lo = run[Runs::index_of(p.low.offset)];
            const __m512i* hi = run[Runs::index_of(kInPlace ? p.low.offset : p.high.offset)];
            const __m512i in_place = _mm512_set1_epi8(static_cast<char>(p.low.mask << p.low.shift));
            __m512i h[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // lane i: row i, weights 0..15, 16..31
#pragma GCC unroll 8
            for (int u = 0; u < 8; ++u) {
                __m512i codes;
                if constexpr (kInPlace) codes = _mm512_and_si512(lo[u], in_place);
                else codes = _mm512_or_si512(field_of(lo[u], p.low), field_at(hi[u], p.high, T::kHighAt));
                // Operand order: the unsigned bytes (the codes) first, the signed (q's dword u) second.
                int32_t q4;
                std::memcpy(&q4, q + 4 * u, 4);  // one load, which the broadcast takes as its operand
                h[u / 4] = _mm512_dpbusd_epi32(h[u / 4], codes, _mm512_set1_epi32(q4));
            }
            __m512i h0 = h[0], h1 = h[1];
            if constexpr (kInPlace) {
                h0 = _mm512_sra_epi32(h0, _mm_cvtsi32_si128(p.low.shift));
                h1 = _mm512_sra_epi32(h1, _mm_cvtsi32_si128(p.low.shift));
            }
            const int32_t s0 = a.xs[2 * c], s1 = a.xs[2 * c + 1];
            if constexpr (T::kCodeOffset != 0) {
                h0 = _mm512_sub_epi32(h0, _mm512_set1_epi32(T::kCodeOffset * s0));
                h1 = _mm512_sub_epi32(h1, _mm512_set1_epi32(T::kCodeOffset * s1));
            }
            const __m512 vdx = _mm512_set1_ps(a.xd[c]);
            __m512 part;
            if constexpr (T::kSubK == 32) {
                part = mul16(mul16(ks.d[k], vdx), _mm512_cvtepi32_ps(_mm512_add_epi32(h0, h1)));
                if constexpr (T::kHasMin)
                    part = _mm512_sub_round_ps(part, mul16(mul16(ks.m[k], vdx), _mm512_set1_ps(static_cast<float>(s0 + s1))),
                                               _MM_FROUND_CUR_DIRECTION);
            } else {
                part = add16(mul16(mul16(ks.d[2 * k], vdx), _mm512_cvtepi32_ps(h0)),
                             mul16(mul16(ks.d[2 * k + 1], vdx), _mm512_cvtepi32_ps(h1)));
                if constexpr (T::kHasMin)
                    part = _mm512_sub_round_ps(
                        part,
                        add16(mul16(mul16(ks.m[2 * k], vdx), _mm512_set1_ps(static_cast<float>(s0))),
                              mul16(mul16(ks.m[2 * k + 1], vdx), _mm512_set1_ps(static_cast<float>(s1)))),
                        _MM_FROUND_CUR_DIRECTION);
            }
            acc = add16(acc, part);
        }
    }
    _mm512_mask_storeu_ps(a.y + g, store, acc);
}

// ---- IQ2_XXS at one token: 256-weight blocks of eight groups ----
//
// A group (32 weights) is four grid indices and a word of four 7-bit sign indices and a 4-bit
// scale (tensor/qtypes/iq2_xxs.h). Both 32-byte halves of a block's groups are transposed by row
// as the K-quants' runs are (run_by_row16), so a chunk's indices and sign word are one vector each,
// lane i row i. Each grid point's eight magnitudes (8, 25 or 43) are kept here as eight 2-bit
// codes (Iq2Codes), 256 16-bit words in eight zmm, looked up with vpermt2w, 32 at a time, which
// leaves dword lane i holding the codes of two runs of row i. Masks of those dwords give four
// vectors of one 2-bit field a byte, weights j, 4 + j of the first run and j, 4 + j of the second
// (j = 0..3), with no shuffle; one vpshufb maps each field to its magnitude plus 43 (51, 68 or
// 86: unsigned, for vpdpbusd), and a negative weight's byte becomes 86 less that (43 - the
// magnitude). q's 32 bytes are put in the same order once a chunk, and the 43 times the chunk's
// sum of q is taken off the exact sum. The AVX2 kernel's decoder, which this replaces at one
// token, loads each run's 8 bytes from the 2 KiB grid as a 64-bit element: 3.1 GB/s on one Zen 4
// core with W cached.

// The grid's points as 2-bit codes: weight j of point k at bits 2j of code[k] (8 -> 0, 25 -> 1, 43 -> 2).
struct Iq2Codes {
    uint16_t code[256];
};
constexpr Iq2Codes make_iq2_codes() {
    Iq2Codes t{};
    for (int k = 0; k < 256; ++k) {
        uint32_t c = 0;
        for (int j = 0; j < 8; ++j) {
            const uint64_t mag = (qtypes::kIq2xxsGrid[k] >> (8 * j)) & 0xFF;
            c |= (mag == 8 ? 0u : mag == 25 ? 1u : mag == 43 ? 2u : 3u) << (2 * j);
        }
        t.code[k] = static_cast<uint16_t>(c);
    }
    return t;
}
constexpr bool iq2_codes_cover_the_grid(const Iq2Codes& t) {
    for (int k = 0; k < 256; ++k)
        for (int j = 0; j < 8; ++j)
            if (((t.code[k] >> (2 * j)) & 3) == 3) return false;
    return true;
}
alignas(64) constexpr Iq2Codes kIq2Codes = make_iq2_codes();
static_assert(iq2_codes_cover_the_grid(kIq2Codes), "every magnitude of the grid is 8, 25 or 43");

// The code word of each word of idx (a grid index, 0..255): four two-table permutes of 64 words
// each, chosen between by the index's bits 6 and 7.
BG_AVX512_INLINE __m512i iq2_codes_of(__m512i idx, const __m512i (&t)[8]) {
    const __m512i c0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);  // points 0..63 (index bits 0..5)
    const __m512i c1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);  // 64..127
    const __m512i c2 = _mm512_permutex2var_epi16(t[4], idx, t[5]);  // 128..191
    const __m512i c3 = _mm512_permutex2var_epi16(t[6], idx, t[7]);  // 192..255
    const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
    const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
    // The blend takes its third operand where the mask is set.
    return _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, c0, c1), _mm512_mask_blend_epi16(b6, c2, c3));
}

// The sign bytes of a group's four runs (ggml's ksigns: the 7-bit index, bit 7 its parity), byte r
// of lane i for run r of row i, from the group's word (bits 7r..7r+6 the indices).
BG_AVX512_INLINE __m512i iq2_sign_bytes(__m512i w) {
    const __m512i seven = _mm512_set1_epi32(0x7F);
    __m512i idx = _mm512_and_si512(w, seven);
#pragma GCC unroll 3
    for (int r = 1; r < 4; ++r)
        idx = _mm512_or_si512(idx, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w, 7 * r), seven), 8 * r));
    __m512i par = _mm512_xor_si512(idx, _mm512_srli_epi32(idx, 4));
    par = _mm512_xor_si512(par, _mm512_srli_epi32(par, 2));
    par = _mm512_xor_si512(par, _mm512_srli_epi32(par, 1));
    return _mm512_or_si512(idx, _mm512_slli_epi32(_mm512_and_si512(par, _mm512_set1_epi32(0x01010101)), 7));
}

// Rows g .. g + 15 of an IQ2_XXS W at one token; y gets the lanes of `store` (lane i: row g + i).
// Each chunk's partial is chunk_partial's, added to the row's sum in chunk order, as the AVX2
// kernel's are.
BG_AVX512 void rows16_one_token_iq2(const Int8RowsArgs& a, int64_t g, __mmask16 store, GroupInCall in_call) {
    using T = qtypes::Iq2_XXS;
    static_assert(T::kOffD == 0 && T::kOffGroups == 2 && T::kGroupBytes == 8 && T::kBlockBytes == 66, "the layout above");
    BlockWalk16<T::kBlockBytes> walk(*a.W, g, 256, in_call);
    const Rows16& r = walk.r;
    __m512i table[8];
    for (int m = 0; m < 8; ++m) table[m] = _mm512_load_si512(kIq2Codes.code + 32 * m);
    // A field at bits 0..1 or 2..3 of a byte to the magnitude plus 43: 0 -> 8 + 43, 1 and 4 ->
    // 25 + 43, 2 and 8 -> 43 + 43.
    const __m512i plus43 = _mm512_broadcast_i32x4(_mm_setr_epi8(51, 68, 86, 0, 68, 0, 0, 0, 86, 0, 0, 0, 0, 0, 0, 0));
    // Grid indices 0, 1 (resp. 2, 3) of each dword to its two words.
    const __m512i pair_lo = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1));
    const __m512i pair_hi = _mm512_broadcast_i32x4(_mm_setr_epi8(2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1));
    // Sign bytes 0, 0, 1, 1 (resp. 2, 2, 3, 3) of each dword: the runs of each byte's weight below.
    const __m512i signs_lo = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 1, 1, 4, 4, 5, 5, 8, 8, 9, 9, 12, 12, 13, 13));
    const __m512i signs_hi = _mm512_broadcast_i32x4(_mm_setr_epi8(2, 2, 3, 3, 6, 6, 7, 7, 10, 10, 11, 11, 14, 14, 15, 15));
    // q in the weights' order: dword j of each 16: q[j], q[4 + j], q[8 + j], q[12 + j].
    const __m256i q_order = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < walk.nblk; ++b, walk.advance()) {
        walk.prefetch(b);
        const __m512 vd = halves_of(_mm512_i32gather_epi32(walk.offs, r.p[0] + T::kOffD, 1), false);
        __m512i run[2][8];  // run[x][u]: group 4x + u / 2's indices (u even) or word (u odd), lane i row i
        run_by_row16(r, T::kOffGroups, run[0]);
        run_by_row16(r, T::kOffGroups + 32, run[1]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const int64_t c = b * 8 + k;
            alignas(32) int32_t qd[8];  // q's 32 bytes in the weights' order
            _mm256_store_si256(reinterpret_cast<__m256i*>(qd),
                               _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + c * 32)), q_order));
            const __m512i idx = run[k / 4][2 * (k % 4)], word = run[k / 4][2 * (k % 4) + 1];
            const __m512i signs = iq2_sign_bytes(word);
            __m512i part[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // each half's: two chains of vpdpbusd
#pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {  // runs 2 half and 2 half + 1: weights 16 half .. + 15
                // Dword lane i: the codes of the two runs, one a 16-bit word (weight m at bits 2m).
                const __m512i codes = iq2_codes_of(_mm512_shuffle_epi8(idx, half == 0 ? pair_lo : pair_hi), table);
                const __m512i run_signs = _mm512_shuffle_epi8(signs, half == 0 ? signs_lo : signs_hi);
#pragma GCC unroll 4
                for (int j = 0; j < 4; ++j) {
                    // Bytes: weights j, 4 + j of the first run, j, 4 + j of the second, as fields
                    // at bits 0..1 (j even) or 2..3 (j odd).
                    const __m512i from = j < 2 ? codes : _mm512_srli_epi32(codes, 4);
                    const __m512i f = _mm512_and_si512(from, _mm512_set1_epi32(j % 2 == 0 ? 0x03030303 : 0x0C0C0C0C));
                    __m512i w = _mm512_shuffle_epi8(plus43, f);
                    // Each byte's sign: bit j or 4 + j of its run's sign byte (run_signs).
                    const __m512i sign_of = _mm512_set1_epi32(
                        static_cast<int32_t>((1u << j) | (1u << (12 + j)) | (1u << (16 + j)) | (1u << (28 + j))));
                    w = _mm512_mask_sub_epi8(w, _mm512_test_epi8_mask(run_signs, sign_of), _mm512_set1_epi8(86), w);
                    part[half] = _mm512_dpbusd_epi32(part[half], w, _mm512_set1_epi32(qd[4 * half + j]));
                }
            }
            const __m512i isum =
                _mm512_sub_epi32(_mm512_add_epi32(part[0], part[1]), _mm512_set1_epi32(43 * (a.xs[2 * c] + a.xs[2 * c + 1])));
            // The traits' sub_scale: (d * (0.5 + ls)) * 0.25, 0.5 + ls exact; then chunk_partial.
            const __m512 ls = _mm512_cvtepi32_ps(_mm512_srli_epi32(word, 28));
            const __m512 sd = mul16(mul16(vd, add16(_mm512_set1_ps(0.5f), ls)), _mm512_set1_ps(0.25f));
            acc = add16(acc, mul16(mul16(sd, _mm512_set1_ps(a.xd[c])), _mm512_cvtepi32_ps(isum)));
        }
    }
    _mm512_mask_storeu_ps(a.y + g, store, acc);
}

// Whether the AVX-512 kernel computes one token of type T itself (else the AVX2 kernel does).
template <class T>
constexpr bool one_token_here() {
    return OneToken16<T>::kDirect || HasChunkPlanes<T> || std::is_same_v<T, qtypes::Iq2_XXS>;
}

template <class T>
BG_AVX512 void rows16(const Int8RowsArgs& a, int64_t r0, int64_t r1) {
    // The K-quants' and IQ2_XXS's gathers index the sixteen rows by 32-bit offsets from the first.
    if (!OneToken16<T>::kDirect && static_cast<uint64_t>(a.W->row_stride) * (kRows - 1) > 0x7FFFFFFFull) {
        int8_rows_avx2(a, r0, r1);
        return;
    }
    for (int64_t g = r0; g < r1; g += kRows) {
        const int n_rows = static_cast<int>(std::min<int64_t>(kRows, r1 - g));
        // The group after this one, when the call has it, is always a whole one at g + 16.
        const GroupInCall in_call{g == r0, g + 2 * kRows <= r1};
        auto one = [&](int64_t first, __mmask16 store) {
            if constexpr (OneToken16<T>::kDirect) rows16_one_token<T>(a, first, store);
            else if constexpr (std::is_same_v<T, qtypes::Iq2_XXS>) rows16_one_token_iq2(a, first, store, in_call);
            else rows16_one_token_k<T>(a, first, store, in_call);
        };
        if (n_rows == kRows) {
            one(g, 0xFFFF);
        } else if (r1 >= kRows) {
            // A short last group takes the sixteen rows that end with it, the ones before it
            // (another group's, maybe another thread's) read again and not stored.
            one(r1 - kRows, static_cast<__mmask16>(0xFFFFu << (kRows - n_rows)));
        } else {
            int8_rows_avx2(a, g, r1);  // fewer than sixteen rows in all
        }
    }
}

}  // namespace

bool int8_avx512_built() { return true; }

int64_t int8_avx512_rows(GgmlType type, int64_t n_tok) {
    return qtypes::visit(type, [&](auto traits) {
        return one_token_here<decltype(traits)>() && n_tok == 1 ? kAvx512Rows : kAvx2Rows;
    });
}

void int8_rows_avx512(const Int8RowsArgs& a, int64_t r0, int64_t r1) {
    qtypes::visit(a.W->type, [&](auto traits) {
        using T = decltype(traits);
        if constexpr (one_token_here<T>()) {
            if (a.n_tok == 1) {
                rows16<T>(a, r0, r1);
                return;
            }
        }
        int8_rows_avx2(a, r0, r1);
    });
}

}  // namespace bg::cpu

#else  // not an x86-64 GCC or Clang build: the portable kernel serves alone

namespace bg::cpu {

bool int8_avx512_built() { return false; }

int64_t int8_avx512_rows(GgmlType, int64_t) { return kAvx2Rows; }

void int8_rows_avx512(const Int8RowsArgs&, int64_t, int64_t) {
    BG_CHECK_MSG(false, "int8_rows_avx512: this build has no AVX-512 kernel (int8_avx512_built() is false)");
}

}  // namespace bg::cpu

#endif
