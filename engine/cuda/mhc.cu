// mHC over the 4 residual copies: hc_mix turns each token's 24 projections into its HcMix (pre
// and post weights, the Sinkhorn-normalised comb matrix; cpu::hc_mix), hc_collapse sums the
// copies into one row weighted by pre, hc_expand writes the copies back as post times the
// block's output plus comb times the old copies.
#include <cmath>
#include <cstddef>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "util/check.h"

namespace bg::cuda {

static_assert(sizeof(HcMix) == kMixWidth * sizeof(float), "HcMix must be 24 packed floats");
static_assert(offsetof(HcMix, post) == kMixPost * sizeof(float), "HcMix layout");
static_assert(offsetof(HcMix, comb) == kMixComb * sizeof(float), "HcMix layout");

namespace {

// One thread per token: a straight port of cpu::hc_mix, operation for operation.
__global__ void hc_mix_kernel(const float* m_all, const float* base, const float* scale, int64_t n_tok,
                              int n_iter, float eps, float* mix_all) {
    const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (t >= n_tok) return;
    const float* m = m_all + t * kMixWidth;
    float* out = mix_all + t * kMixWidth;
    for (int i = 0; i < 4; ++i) {
        out[kMixPre + i] = sigmoid_dev(mul_add(scale[0], m[i], base[i])) + eps;
        out[kMixPost + i] = 2.0f * sigmoid_dev(mul_add(scale[1], m[4 + i], base[4 + i]));
    }
    float c[4][4];  // c[dst][src]
#pragma unroll
    for (int dst = 0; dst < 4; ++dst)
#pragma unroll
        for (int src = 0; src < 4; ++src) c[dst][src] = mul_add(scale[2], m[8 + dst + 4 * src], base[8 + dst + 4 * src]);
#pragma unroll
    for (int src = 0; src < 4; ++src) {
        float mx = c[0][src];
        for (int dst = 1; dst < 4; ++dst) mx = fmaxf(mx, c[dst][src]);
        float sum = 0.0f;
#pragma unroll
        for (int dst = 0; dst < 4; ++dst) {
            c[dst][src] = expf(c[dst][src] - mx);
            sum += c[dst][src];
        }
#pragma unroll
        for (int dst = 0; dst < 4; ++dst) c[dst][src] = c[dst][src] / sum + eps;
    }
    for (int it = 0; it < n_iter; ++it) {
        if (it > 0) {  // each src over its destinations; the first round starts with the dsts
#pragma unroll
            for (int src = 0; src < 4; ++src) {
                const float s = c[0][src] + c[1][src] + c[2][src] + c[3][src] + eps;
#pragma unroll
                for (int dst = 0; dst < 4; ++dst) c[dst][src] /= s;
            }
        }
#pragma unroll
        for (int dst = 0; dst < 4; ++dst) {
            const float s = c[dst][0] + c[dst][1] + c[dst][2] + c[dst][3] + eps;
#pragma unroll
            for (int src = 0; src < 4; ++src) c[dst][src] /= s;
        }
    }
#pragma unroll
    for (int dst = 0; dst < 4; ++dst)
#pragma unroll
        for (int src = 0; src < 4; ++src) out[kMixComb + 4 * dst + src] = c[dst][src];
}

__global__ void hc_collapse_kernel(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok,
                                   int64_t n_embd, float* x) {
    const int64_t total = n_tok * n_embd;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / n_embd, e = idx % n_embd;
        const float* h = H + t * 4 * n_embd + e;
        const float* pr = pre + t * pre_stride;
        float s = 0.0f;
        for (int c = 0; c < 4; ++c) s = mul_add(pr[c], h[c * n_embd], s);
        x[idx] = s;
    }
}

__global__ void hc_expand_kernel(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t n_embd,
                                 float* H) {
    const int64_t total = n_tok * n_embd;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = idx / n_embd, e = idx % n_embd;
        const float* mx = mix + t * kMixWidth;
        float r[4];
        for (int c = 0; c < 4; ++c) r[c] = R[(t * 4 + c) * n_embd + e];
        const float yv = y[idx];
        for (int d = 0; d < 4; ++d) {
            float s = mx[kMixPost + d] * yv;
            for (int c = 0; c < 4; ++c) s = mul_add(mx[kMixComb + 4 * d + c], r[c], s);
            H[(t * 4 + d) * n_embd + e] = s;
        }
    }
}

}  // namespace

void hc_mix(const float* m, const float* base, const float* scale, int64_t n_tok, int n_iter, float eps, float* mix,
            cudaStream_t stream) {
    BG_CHECK(n_iter >= 1);
    if (n_tok <= 0) return;
    // Few tokens per call: small blocks spread them over more SMs.
    constexpr int kMixThreads = 64;
    hc_mix_kernel<<<static_cast<unsigned>((n_tok + kMixThreads - 1) / kMixThreads), kMixThreads, 0, stream>>>(
        m, base, scale, n_tok, n_iter, eps, mix);
    BG_CUDA_CHECK_LAUNCH();
}

void hc_collapse(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok, int64_t n_embd, float* x,
                 cudaStream_t stream) {
    BG_CHECK(pre_stride >= 4 || n_tok <= 1);
    if (n_tok <= 0 || n_embd <= 0) return;
    hc_collapse_kernel<<<blocks_for(n_tok * n_embd), kThreads, 0, stream>>>(H, pre, pre_stride, n_tok, n_embd, x);
    BG_CUDA_CHECK_LAUNCH();
}

void hc_expand(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t n_embd, float* H,
               cudaStream_t stream) {
    if (n_tok <= 0 || n_embd <= 0) return;
    hc_expand_kernel<<<blocks_for(n_tok * n_embd), kThreads, 0, stream>>>(mix, y, R, n_tok, n_embd, H);
    BG_CUDA_CHECK_LAUNCH();
}

}  // namespace bg::cuda
