// Q8_0 (ggml type 8) for the integer matmul path: blocks of 32 weights in 34 bytes, an FP16
// scale d then 32 int8 q; value = d * q. The int8 values are the stored bytes.
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/hd.h"

namespace bg::qtypes {

struct Q8_0 {
    static constexpr GgmlType kType = GgmlType::Q8_0;
    static constexpr int kBlockWeights = 32;
    static constexpr int kBlockBytes = 34;
    static constexpr int kSubK = 32;
    static constexpr bool kHasMin = false;

    BG_HD static void unpack(const uint8_t* row, int64_t chunk, int8_t v[32], float d[2], float m[2]) {
        const uint8_t* b = row + chunk * kBlockBytes;
        for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(b[2 + j]);
        d[0] = d[1] = load_half(b);
        m[0] = m[1] = 0.0f;
    }

#ifdef __CUDACC__
    // As Mxfp4::load_a: chunk c is block c.
    template <class Load>
    __device__ __forceinline__ static void load_a(const uint8_t* row, int c, int t, const Load& ld, int& lo, int& hi,
                                                  float (&d)[2], float (&m)[2]) {
        const uint8_t* b = row + static_cast<int64_t>(c) * kBlockBytes;
        lo = static_cast<int>(ld.u32(b + 2 + 4 * t));
        hi = static_cast<int>(ld.u32(b + 18 + 4 * t));
        d[0] = d[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(ld.u8(b) | (ld.u8(b + 1) << 8))));
        m[0] = m[1] = 0.0f;
    }
    // The whole of chunk c for one lane (the GEMV), from shared memory at any byte address: what
    // load_a gives for t = 0..3 (lo[t], hi[t]) and the scale once. Its 34 bytes lie in nine
    // aligned words, a tenth when they start at the word's last byte (only then: past them may
    // be past the window); each value word is one funnel shift of two of them.
    __device__ __forceinline__ static void load_chunk(const uint8_t* row, int c, int (&lo)[4], int (&hi)[4],
                                                      float (&d)[2], float (&m)[2]) {
        const uintptr_t b = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(c) * kBlockBytes;
        const uint32_t o = static_cast<uint32_t>(b & 3);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(b - o);
        uint32_t x[10];
#pragma unroll
        for (int k = 0; k < 9; ++k) x[k] = w[k];
        x[9] = o == 3 ? w[9] : 0u;
        const uint32_t dbits = __funnelshift_r(x[0], x[1], o * 8) & 0xFFFFu;
        d[0] = d[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(dbits)));
        m[0] = m[1] = 0.0f;
        // The values start at byte o + 2 of the words: word (o + 2) / 4, shifted by its remainder.
        const bool next = o >= 2;
        const uint32_t sh = ((o + 2) & 3) * 8;
        uint32_t y[9];
#pragma unroll
        for (int k = 0; k < 9; ++k) y[k] = next ? x[k + 1] : x[k];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            lo[t] = static_cast<int>(__funnelshift_r(y[t], y[t + 1], sh));
            hi[t] = static_cast<int>(__funnelshift_r(y[t + 4], y[t + 5], sh));
        }
    }
#endif
};

}  // namespace bg::qtypes
