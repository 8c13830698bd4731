// Ops::argmax on the device: a decode step's greedy token from its logits where they are, so the
// host takes 4 bytes instead of the vocabulary's logits (129,280 floats, 517 KB) and its own
// pass over them.
//
// Every candidate is a 64-bit key: its value in an order-keeping unsigned form (-0 taken as +0,
// which the host's comparisons do not tell apart) above its index complemented, so the largest
// key is the largest value at its first index, whatever the order keys meet in: the host's answer
// (runtime/sampler.h). NaN makes no key (never the largest); -inf does (a banned id counts as
// -inf: the first -inf is the choice where nothing else is there, as the host's second pass
// finds it). The blocks of a grid reduce their keys and each takes the maximum into one word
// (atomicMax); a one-thread kernel then writes the index and clears the word for the next call,
// so nothing but the word is kept between calls. A single block read the vocabulary at about
// 10 GB/s (54 us a step on an H100, 2026-12-06 07:57).
#include <algorithm>
#include <climits>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 264;
constexpr int kPerThread = 4;  // values a thread reads at least before the grid grows

__device__ __forceinline__ unsigned long long key_of(float v, int i) {
    const unsigned bits = v == 0.0f ? 0u : __float_as_uint(v);  // -0 as +0
    const unsigned ordered = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
    return (static_cast<unsigned long long>(ordered) << 32) | (0xFFFFFFFFu - static_cast<unsigned>(i));
}

__global__ void argmax_keys_kernel(const float* x, int n, TokenBan ban, unsigned long long* best) {
    grid_dependency_begin();
    __shared__ unsigned long long warp_best[kThreads / 32];
    unsigned long long k = 0;  // none
    for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
        float v = x[i];
        for (int b = 0; b < ban.n; ++b)
            if (ban.ids[b] == i) v = -INFINITY;
        if (v == v) k = max(k, key_of(v, i));  // NaN: no key
    }
    for (int o = 16; o > 0; o >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, o));
    if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = k;
    __syncthreads();
    if (threadIdx.x < 32) {
        k = threadIdx.x < kThreads / 32 ? warp_best[threadIdx.x] : 0;
        for (int o = 16; o > 0; o >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, o));
        if (threadIdx.x == 0 && k != 0) atomicMax(best, k);
    }
}

__global__ void argmax_take_kernel(unsigned long long* best, int32_t* out) {
    grid_dependency_begin();
    const unsigned long long k = *best;
    out[0] = k == 0 ? 0 : static_cast<int32_t>(0xFFFFFFFFu - static_cast<unsigned>(k & 0xFFFFFFFFu));
    *best = 0;
}

}  // namespace

void argmax(const float* x, int64_t n, const TokenBan& ban, unsigned long long* word, int32_t* out, cudaStream_t stream) {
    BG_CHECK(n >= 1 && n <= INT_MAX && ban.n >= 0 && ban.n <= TokenBan::kMax && word != nullptr);
    const int64_t want = (n + kThreads * kPerThread - 1) / (kThreads * kPerThread);
    const int blocks = static_cast<int>(std::min<int64_t>(want, kMaxBlocks));
    BG_CUDA_CHECK(launch_kernel(argmax_keys_kernel, blocks, kThreads, 0, stream, x, static_cast<int>(n), ban, word));
    BG_CUDA_CHECK(launch_kernel(argmax_take_kernel, 1, 1, 0, stream, word, out));
}

}  // namespace bg::cuda
