#include "tensor/fp8_rows.h"

#include <cmath>

#include "util/check.h"

namespace bg::fp8 {

void dequantize_packed_rows(const uint8_t* src, float* dst, int64_t rows, int64_t dim) {
    BG_CHECK(dim > 0 && dim % kGroup == 0 && rows >= 0);
    const int64_t stride = packed_row_bytes(dim);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < dim; ++j) dst[r * dim + j] = packed_value(src + r * stride, dim, j);
}

void quantize_row(const float* x, uint8_t* values, uint8_t* scales, int64_t n) {
    BG_CHECK(n >= 0 && n % kGroup == 0);
    for (int64_t g = 0; g < n / kGroup; ++g) {
        const float* xg = x + g * kGroup;
        float amax = 0.0f;
        for (int64_t j = 0; j < kGroup; ++j) {
            const float a = std::fabs(xg[j]);
            amax = a > amax ? a : amax;  // a NaN compares false and is ignored
        }
        const uint8_t e = e8m0_for_max(amax);
        scales[g] = e;
        // 2^(127-e) is a float for e in 0..254, and x * 2^(127-e) is exact wherever it is normal,
        // which covers every value that does not round to zero.
        const float inv_scale = std::ldexp(1.0f, 127 - static_cast<int>(e));
        for (int64_t j = 0; j < kGroup; ++j) values[g * kGroup + j] = float_to_e4m3(xg[j] * inv_scale);
    }
}

}  // namespace bg::fp8
