// The integer matmul path's activations (`--matmul fast`, issue 22): each token's input row is
// quantised once per call into blocks of 32 int8 with one float scale, as llama.cpp's q8_1:
//   amax = max |x_i| over the block, d = amax / 127,
//   q_i = amax == 0 ? 0 : round(x_i / d)      (round half away from zero; IEEE division),
//   s = sum q_i                                (the block sum, for weight types with a min term).
// The CPU (engine/cpu/int8_matmul.cpp) and CUDA (engine/cuda/int8_matmul*.cu) quantise with this
// one function, so both see the same int8 activations for the same float input; every weight
// block's dot product with them is then an exact integer sum, and the two backends differ only in
// the order of the float sum of block partials dw * d * isum (+ dmin * d * s for min types).
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

}  // namespace bg::qtypes
