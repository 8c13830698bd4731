// Ops::argmax on the device: a decode step's greedy token from its logits where they are, so the
// host takes 4 bytes instead of the vocabulary's logits (129,280 floats, 517 KB) and its own
// pass over them.
//
// One block: each thread keeps the best (value, index) of a strided share, then the block
// reduces the pairs. A pair beats another with a larger value, or an equal value at a smaller
// index, so the result is the first index of the largest value whatever the order of the
// reduction: the host's answer (runtime/sampler.h). NaN never compares larger or equal, so it
// is never taken; the start (-inf, none) takes the first -inf, as the host's second pass does.
#include <climits>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

constexpr int kThreads = 1024;

struct Best {
    float v;
    int i;  // INT_MAX: none yet
};

__device__ __forceinline__ Best better(Best a, Best b) {
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
}

__global__ void argmax_kernel(const float* x, int n, TokenBan ban, int32_t* out) {
    __shared__ Best warp_best[kThreads / 32];
    Best best{-INFINITY, INT_MAX};
    for (int i = threadIdx.x; i < n; i += kThreads) {
        float v = x[i];
        for (int b = 0; b < ban.n; ++b)
            if (ban.ids[b] == i) v = -INFINITY;
        best = better(best, Best{v, i});
    }
    for (int o = 16; o > 0; o >>= 1) {
        const Best other{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
        best = better(best, other);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (warp == 0) {
        best = lane < kThreads / 32 ? warp_best[lane] : Best{-INFINITY, INT_MAX};
        for (int o = 16; o > 0; o >>= 1) {
            const Best other{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
            best = better(best, other);
        }
        if (lane == 0) out[0] = best.i == INT_MAX ? 0 : best.i;
    }
}

}  // namespace

void argmax(const float* x, int64_t n, const TokenBan& ban, int32_t* out, cudaStream_t stream) {
    BG_CHECK(n >= 1 && n <= INT_MAX && ban.n >= 0 && ban.n <= TokenBan::kMax);
    argmax_kernel<<<1, kThreads, 0, stream>>>(x, static_cast<int>(n), ban, out);
    BG_CUDA_CHECK_LAUNCH();
}

}  // namespace bg::cuda
