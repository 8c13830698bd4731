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
#endif
};

}  // namespace bg::qtypes
