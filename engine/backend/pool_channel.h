// One channel of one block of the compressor's pooling, shared by the CPU op and the CUDA kernel
// so the model's pooling is written once: with scores (gated), the per-channel softmax of the
// block's scores weights its kv values; without, the plain sum. Each backend keeps its own
// float primitives (the CUDA side rounds the product before the add, as nvcc would otherwise
// fuse it), so the CPU numbers are the reference ones.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define BG_HOST_DEVICE __host__ __device__
#else
#define BG_HOST_DEVICE
#endif

namespace bg {

// kv, score: [n_ctx][d] by position; the block covers positions t0 .. t0+ratio-1.
BG_HOST_DEVICE inline float pool_channel(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t t0,
                                         int64_t c) {
#ifdef __CUDA_ARCH__
    auto max_of = [](float a, float b) { return fmaxf(a, b); };
    auto exp_of = [](float x) { return expf(x); };
    auto mul_add = [](float a, float b, float s) { return __fadd_rn(__fmul_rn(a, b), s); };
#else
    auto max_of = [](float a, float b) { return std::max(a, b); };
    auto exp_of = [](float x) { return std::exp(x); };
    auto mul_add = [](float a, float b, float s) { return a * b + s; };
#endif
    if (!score) {
        float s = 0.0f;
        for (int64_t t = t0; t < t0 + ratio; ++t) s += kv[t * d + c];
        return s;
    }
    float mx = -INFINITY;
    for (int64_t t = t0; t < t0 + ratio; ++t) mx = max_of(mx, score[t * d + c]);
    float den = 0.0f, num = 0.0f;
    for (int64_t t = t0; t < t0 + ratio; ++t) {
        const float e = exp_of(score[t * d + c] - mx);
        den += e;
        num = mul_add(e, kv[t * d + c], num);
    }
    return num / den;
}

}  // namespace bg
