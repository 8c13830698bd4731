// The Engram gate (cpu::engram_gate): per token and residual copy, a sigmoid gate from the
// normalised key and copy, then the copy plus the gated value row. One block per (token, copy).
#include <climits>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

// One block per (token, copy).
__global__ void engram_kernel(const float* kv, const float* wk, const float* wq, int64_t n_embd, float eps,
                              float* H, float* gates) {
    grid_dependency_begin();
    __shared__ float red[33];
    const int64_t t = blockIdx.x / 4;
    const int c = static_cast<int>(blockIdx.x % 4);
    const float* key = kv + (t * 5 + c) * n_embd;
    const float* v = kv + (t * 5 + 4) * n_embd;
    const float* wkc = wk + c * n_embd;
    const float* wqc = wq + c * n_embd;
    float* h = H + (t * 4 + c) * n_embd;
    float sk = 0.0f, sh = 0.0f, raw = 0.0f;
    for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) {
        const float k = key[i], hv = h[i];
        sk += k * k;
        sh += hv * hv;
        raw += (k * wkc[i]) * (hv * wqc[i]);
    }
    sk = block_sum(sk, red);
    sh = block_sum(sh, red);
    raw = block_sum(raw, red);
    const float n = static_cast<float>(n_embd);
    const float rk = 1.0f / sqrtf(sk / n + eps);
    const float rh = 1.0f / sqrtf(sh / n + eps);
    const float s = raw * rk * rh / sqrtf(n);
    const float sgn = s > 0.0f ? 1.0f : (s < 0.0f ? -1.0f : 0.0f);
    const float g = sigmoid_dev(sgn * sqrtf(fmaxf(fabsf(s), 1e-6f)));
    // The reads of h above all precede block_sum's barriers.
    for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) h[i] = mul_add(g, v[i], h[i]);
    if (gates && threadIdx.x == 0) gates[t * 4 + c] = g;
}

}  // namespace

void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n_tok, int64_t n_embd, float eps,
                     float* H, float* gates, cudaStream_t stream) {
    if (n_tok <= 0) return;
    BG_CHECK(n_embd > 0 && n_tok * 4 <= INT_MAX);
    BG_CUDA_CHECK(launch_kernel(engram_kernel, static_cast<unsigned>(n_tok * 4), kThreads, 0, stream, kv, wk, wq,
                                n_embd, eps, H, gates));
}

}  // namespace bg::cuda
