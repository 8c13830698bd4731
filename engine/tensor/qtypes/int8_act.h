// The integer matmul path's activations (`--matmul fast`, issue 22): each token's input row is
// quantised once per call into blocks of 32 int8 with one float scale, as llama.cpp's q8_1:
//   amax = max |x_i| over the block, d = amax / 127,
//   q_i = amax == 0 ? 0 : round(x_i / d)      (round half away from zero; IEEE division),
//   s = sum q_i                                (the block sum, for weight types with a min term).
// The CPU (engine/cpu/int8_matmul.cpp) and CUDA (engine/cuda/int8_matmul*.cu) quantise with this
// one function, so both see the same int8 activations for the same float input; every weight
// chunk's dot product with them is then an exact integer sum, and chunk_partial below turns the
// sums into one float; the two backends differ only in the order of the float sum of the chunk
// partials. Weight types whose min is per 16 weights (Q2_K) need the block's two half sums
// s_0 + s_1 = s instead of s alone; they are the sums of q_0..q_15 and q_16..q_31.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/qtypes/hd.h"

namespace bg::qtypes {

constexpr int kActBlock = 32;

// One block: x[32] -> q[32], returns d; *sum gets sum q.
BG_HD float quantize_act_block(const float* x, int8_t* q, int32_t* sum) {
    float amax = 0.0f;
    for (int i = 0; i < kActBlock; ++i) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f;
    int32_t s = 0;
    for (int i = 0; i < kActBlock; ++i) {
        const int v = amax == 0.0f ? 0 : static_cast<int>(roundf(x[i] / d));
        q[i] = static_cast<int8_t>(v);
        s += v;
    }
    *sum = s;
    return d;
}

// One weight chunk (T::unpack's d[2], m[2]) against one activation block of scale dx:
// isum[h] = sum over 16-half h of v_i * q_i, s[h] = sum over half h of q_i (exact integers).
//   kSubK 32:  (d0 dx) * (isum0 + isum1)  [- (m0 dx) * (s0 + s1)]
//   kSubK 16:  (d0 dx) * isum0 + (d1 dx) * isum1  [- ((m0 dx) * s0 + (m1 dx) * s1)]
// the bracket only where T::kHasMin; each operation rounded to float in the order written.
template <class T>
BG_HD float chunk_partial(const float d[2], const float m[2], float dx, const int32_t isum[2], const int32_t s[2]) {
    float p;
    if constexpr (T::kSubK == 32) {
        p = mul_rn(mul_rn(d[0], dx), static_cast<float>(isum[0] + isum[1]));
        if constexpr (T::kHasMin) p = sub_rn(p, mul_rn(mul_rn(m[0], dx), static_cast<float>(s[0] + s[1])));
    } else {
        static_assert(T::kSubK == 16, "sub-blocks of 16 or 32 weights");
        p = add_rn(mul_rn(mul_rn(d[0], dx), static_cast<float>(isum[0])),
                   mul_rn(mul_rn(d[1], dx), static_cast<float>(isum[1])));
        if constexpr (T::kHasMin)
            p = sub_rn(p, add_rn(mul_rn(mul_rn(m[0], dx), static_cast<float>(s[0])),
                                 mul_rn(mul_rn(m[1], dx), static_cast<float>(s[1]))));
    }
    return p;
}

}  // namespace bg::qtypes
