// BF16 weight rows against float activations, the float matmul's path for BF16 (cpu/ops.h): a
// row's values are decoded in registers (a BF16 is the top half of its float, so decoding is a
// zero extension and a shift) and multiplied straight into the dot product's sixteen partial sums,
// where the generic path wrote each row to a float scratch and read it back. A BF16 expert at one
// token on one core of the development machine: 0.26 of the one-thread read probe that way.
//
// Four rows go together, so four chains of adds are in flight and a load of x serves them all.
// The arithmetic is the generic path's bit for bit on every kernel: partial sum l adds, in column
// order, the products of columns l, l + 16, l + 32, ... (each a multiply, then an add, each rounded
// once: no FMA), then the sixteen fold pairwise (l += l + 8, l += l + 4, l += l + 2, l += l + 1)
// and the columns past the last multiple of 16 are added after, as cpu::matmul's dot does. The
// AVX2 kernel holds the partial sums in two ymm (lanes 0..7, 8..15) and is compiled without FMA;
// the AVX-512 kernel holds them in one zmm and uses the _round intrinsics (a compiler does not
// contract them into FMA; see int8_matmul_avx512.cpp).
#include "cpu/bf16_rows.h"

#include <cstring>

#include "tensor/ggml_types.h"
#include "util/check.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BG_BF16_X86 1
#include "cpu/x86_intrinsics.h"
#endif

namespace bg::cpu {

namespace {

float bf16_value(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_fp32(h);
}

// The sixteen partial sums folded pairwise, then the tail columns [n16, n) added. Not inlined:
// in the AVX-512 kernel (whose target brings FMA) the tail's multiply and add would be contracted
// into one FMA, rounded once where the float path rounds twice.
__attribute__((noinline)) float finish(float (&acc)[16], const uint8_t* w, const float* x, int64_t n16, int64_t n) {
    for (int width = 8; width > 0; width /= 2)
        for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
    float tail = 0.0f;
    for (int64_t i = n16; i < n; ++i) tail += bf16_value(w + 2 * i) * x[i];
    return acc[0] + tail;
}

float dot_portable(const uint8_t* w, const float* x, int64_t n) {
    float acc[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; ++l) acc[l] += bf16_value(w + 2 * (i + l)) * x[i + l];
    return finish(acc, w, x, i, n);
}

// Four rows at a time (kBf16RowsTogether): each row's partial sums are one chain of dependent
// adds, so one row alone runs at the add's latency; four chains keep the adder busy, and each load
// of x serves the four.
constexpr int kRowsTogether = static_cast<int>(kBf16RowsTogether);

void dots_portable(const uint8_t* const* w, const float* x, int64_t n, float* out) {
    for (int k = 0; k < kRowsTogether; ++k) out[k] = dot_portable(w[k], x, n);
}

#ifdef BG_BF16_X86
__attribute__((target("avx2"))) inline __m256 bf16x8(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2"))) void dots_avx2(const uint8_t* const* w, const float* x, int64_t n, float* out) {
    __m256 lo[kRowsTogether], hi[kRowsTogether];
    for (int k = 0; k < kRowsTogether; ++k) lo[k] = hi[k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 x_lo = _mm256_loadu_ps(x + i), x_hi = _mm256_loadu_ps(x + i + 8);
        for (int k = 0; k < kRowsTogether; ++k) {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[k] + 2 * i));
            lo[k] = _mm256_add_ps(lo[k], _mm256_mul_ps(bf16x8(_mm256_castsi256_si128(h)), x_lo));
            hi[k] = _mm256_add_ps(hi[k], _mm256_mul_ps(bf16x8(_mm256_extracti128_si256(h, 1)), x_hi));
        }
    }
    for (int k = 0; k < kRowsTogether; ++k) {
        float acc[16];
        _mm256_storeu_ps(acc, lo[k]);
        _mm256_storeu_ps(acc + 8, hi[k]);
        out[k] = finish(acc, w[k], x, i, n);
    }
}

__attribute__((target("avx512f,avx512bw"))) void dots_avx512(const uint8_t* const* w, const float* x, int64_t n,
                                                             float* out) {
    __m512 acc16[kRowsTogether];
    for (int k = 0; k < kRowsTogether; ++k) acc16[k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 xv = _mm512_loadu_ps(x + i);
        for (int k = 0; k < kRowsTogether; ++k) {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[k] + 2 * i));
            const __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            acc16[k] = _mm512_add_round_ps(acc16[k], _mm512_mul_round_ps(wv, xv, _MM_FROUND_CUR_DIRECTION),
                                           _MM_FROUND_CUR_DIRECTION);
        }
    }
    for (int k = 0; k < kRowsTogether; ++k) {
        float acc[16];
        _mm512_storeu_ps(acc, acc16[k]);
        out[k] = finish(acc, w[k], x, i, n);
    }
}
#endif

using DotsFn = void (*)(const uint8_t* const*, const float*, int64_t, float*);

DotsFn dots_of(CpuIsa isa) {
#ifdef BG_BF16_X86
    if (isa == CpuIsa::kAvx512) return dots_avx512;
    if (isa == CpuIsa::kAvx2) return dots_avx2;
#endif
    BG_CHECK(isa == CpuIsa::kPortable);
    return dots_portable;
}

}  // namespace

void bf16_rows(CpuIsa isa, const MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy,
               int64_t r0, int64_t r1) {
    BG_CHECK(W.type == GgmlType::BF16);
    const DotsFn dots = dots_of(isa);
    auto row = [&](int64_t r) { return W.data + static_cast<uint64_t>(r) * W.row_stride; };
    int64_t r = r0;
    for (; r + kRowsTogether <= r1; r += kRowsTogether) {
        const uint8_t* w[kRowsTogether];
        for (int k = 0; k < kRowsTogether; ++k) w[k] = row(r + k);
        for (int64_t t = 0; t < n_tok; ++t) {
            float out[kRowsTogether];
            dots(w, x + t * ldx, W.cols, out);
            for (int k = 0; k < kRowsTogether; ++k) y[t * ldy + r + k] = out[k];
        }
    }
    // The last rows one at a time, each through a group of copies of itself (cpu::matmul hands
    // out groups of kBf16RowsTogether rows, so this is the matrix's last rows only).
    for (; r < r1; ++r) {
        const uint8_t* w[kRowsTogether];
        for (int k = 0; k < kRowsTogether; ++k) w[k] = row(r);
        for (int64_t t = 0; t < n_tok; ++t) {
            float out[kRowsTogether];
            dots(w, x + t * ldx, W.cols, out);
            y[t * ldy + r] = out[0];
        }
    }
}

}  // namespace bg::cpu
