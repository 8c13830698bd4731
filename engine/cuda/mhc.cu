// mHC over the 4 residual copies: hc_mix turns each token's 24 projections into its HcMix (pre
// and post weights, the Sinkhorn-normalised comb matrix; cpu::hc_mix), hc_collapse sums the
// copies into one row weighted by pre, hc_expand writes the copies back as post times the
// block's output plus comb times the old copies.
#include <cmath>
#include <cstddef>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

static_assert(sizeof(HcMix) == kMixWidth * sizeof(float), "HcMix must be 24 packed floats");
static_assert(offsetof(HcMix, post) == kMixPost * sizeof(float), "HcMix layout");
static_assert(offsetof(HcMix, comb) == kMixComb * sizeof(float), "HcMix layout");

namespace {

// Half a warp per token: lane i < 16 owns comb element c[dst][src], dst = i / 4, src = i % 4, and
// lanes 0-7 also the pre and post weights. cpu::hc_mix's operations, each in its order: a column
// or row sum gathers its four values by shuffles and adds them as the CPU does, then each lane
// divides its own element. One thread a token ran the 20 Sinkhorn rounds' 640 divisions in a
// chain (23 us a call at decode); here each round is two dependent divisions.
constexpr int kMixTokPerBlock = 4;  // tokens of a 64-thread block

__global__ void hc_mix_kernel(const float* m_all, const float* base, const float* scale, int64_t n_tok, int n_iter,
                              float eps, float* mix_all) {
    grid_dependency_begin();
    const int lane = threadIdx.x & 31, i = lane & 15;
    const int64_t t = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 16;
    const bool live = t < n_tok;  // half-warp-uniform; dead halves still join the shuffles
    const unsigned half = 0xFFFFu << (lane & 16);
    const float* m = m_all + (live ? t : 0) * kMixWidth;
    float* out = mix_all + t * kMixWidth;
    if (live && i < 4) out[kMixPre + i] = sigmoid_dev(mul_add(scale[0], m[i], base[i])) + eps;
    if (live && i >= 4 && i < 8) out[kMixPost + i - 4] = 2.0f * sigmoid_dev(mul_add(scale[1], m[i], base[i]));
    const int dst = i >> 2, src = i & 3;
    const int base_lane = lane & 16;
    // v(d, s): element c[d][s] of this token, from lane d * 4 + s of the half.
    auto at = [&](float v, int d, int sc) { return __shfl_sync(half, v, base_lane + d * 4 + sc); };
    float c = mul_add(scale[2], m[8 + dst + 4 * src], base[8 + dst + 4 * src]);
    {  // softmax of each src's column over its destinations
        const float c0 = at(c, 0, src), c1 = at(c, 1, src), c2 = at(c, 2, src), c3 = at(c, 3, src);
        float mx = c0;
        mx = fmaxf(mx, c1);
        mx = fmaxf(mx, c2);
        mx = fmaxf(mx, c3);
        const float e = expf(c - mx);
        const float e0 = at(e, 0, src), e1 = at(e, 1, src), e2 = at(e, 2, src), e3 = at(e, 3, src);
        float sum = 0.0f;
        sum += e0;
        sum += e1;
        sum += e2;
        sum += e3;
        c = e / sum + eps;
    }
    for (int it = 0; it < n_iter; ++it) {
        if (it > 0) {  // each src over its destinations; the first round starts with the dsts
            const float s = at(c, 0, src) + at(c, 1, src) + at(c, 2, src) + at(c, 3, src) + eps;
            c /= s;
        }
        const float s = at(c, dst, 0) + at(c, dst, 1) + at(c, dst, 2) + at(c, dst, 3) + eps;
        c /= s;
    }
    if (live) out[kMixComb + 4 * dst + src] = c;
}

__global__ void hc_collapse_kernel(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok,
                                   int64_t n_embd, float* x) {
    grid_dependency_begin();
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
    grid_dependency_begin();
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
    BG_CUDA_CHECK(launch_kernel(hc_mix_kernel, static_cast<unsigned>((n_tok + kMixTokPerBlock - 1) / kMixTokPerBlock),
                                kMixTokPerBlock * 16, 0, stream, m, base, scale, n_tok, n_iter, eps, mix));
}

void hc_collapse(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok, int64_t n_embd, float* x,
                 cudaStream_t stream) {
    BG_CHECK(pre_stride >= 4 || n_tok <= 1);
    if (n_tok <= 0 || n_embd <= 0) return;
    BG_CUDA_CHECK(launch_kernel(hc_collapse_kernel, blocks_for(n_tok * n_embd), kThreads, 0, stream, H, pre, pre_stride,
                                n_tok, n_embd, x));
}

void hc_expand(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t n_embd, float* H,
               cudaStream_t stream) {
    if (n_tok <= 0 || n_embd <= 0) return;
    BG_CUDA_CHECK(
        launch_kernel(hc_expand_kernel, blocks_for(n_tok * n_embd), kThreads, 0, stream, mix, y, R, n_tok, n_embd, H));
}

}  // namespace bg::cuda
