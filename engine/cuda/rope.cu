// Rotary position embedding with YaRN (cpu::rope) on the last n_dims values of each head,
// forward or inverse: angles in double and the same expressions as the CPU, one thread per
// (token, head, pair); the YaRN ramp's end points are computed on the host.
#include <algorithm>
#include <climits>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

struct RopeArgs {
    int n_dims;
    float freq_base;
    int yarn;
    float factor;
    float low, high;  // YaRN ramp end points, computed on the host exactly as cpu::rope does
    int inverse;
};

// One thread per (token, head, pair).
__global__ void rope_kernel(float* x, int64_t row_stride, int64_t n_tok, const int32_t* pos, int64_t n_heads,
                            int64_t head_dim, RopeArgs p) {
    grid_dependency_begin();
    const int64_t n_pairs = p.n_dims / 2, total = n_tok * n_heads * n_pairs;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = idx % n_pairs, th = idx / n_pairs, h = th % n_heads, t = th / n_heads;
        // Same double expressions as cpu::rope; products rounded separately so no FMA creeps in.
        const double theta_extrap = static_cast<double>(pos[t]) *
                                    pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / p.n_dims);
        double theta = theta_extrap / p.factor;
        if (p.yarn) {
            const double theta_interp = theta_extrap / p.factor;
            const float yv = (static_cast<float>(i) - p.low) / fmaxf(0.001f, p.high - p.low);
            const double mix = 1.0 - fminf(1.0f, fmaxf(0.0f, yv));
            theta = __dadd_rn(__dmul_rn(theta_interp, 1.0 - mix), __dmul_rn(theta_extrap, mix));
        }
        double sd, cd;
        sincos(theta, &sd, &cd);
        const float c = static_cast<float>(cd);
        const float s = static_cast<float>(p.inverse ? -sd : sd);
        float* v = x + t * row_stride + h * head_dim + (head_dim - p.n_dims) + 2 * i;
        const float x0 = v[0], x1 = v[1];
        v[0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        v[1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

}  // namespace

void rope(float* x, int64_t row_stride, int64_t n_tok, const int32_t* pos, int64_t n_heads, int64_t head_dim,
          const RopeParams& p, bool inverse, cudaStream_t stream) {
    BG_CHECK(p.n_dims > 0 && p.n_dims % 2 == 0 && p.n_dims <= head_dim && p.n_dims <= INT_MAX);
    BG_CHECK(n_tok <= 1 || row_stride >= n_heads * head_dim);
    if (n_tok <= 0 || n_heads <= 0) return;
    RopeArgs a{};
    a.n_dims = static_cast<int>(p.n_dims);
    a.freq_base = p.freq_base;
    a.yarn = p.yarn ? 1 : 0;
    a.factor = p.factor;
    a.inverse = inverse ? 1 : 0;
    if (p.yarn) {
        // cpu::rope's ramp in float with the same library calls, so the end points agree.
        constexpr float kPi = 3.14159265358979323846f;
        const auto corr_dim = [&](float beta) {
            return static_cast<float>(p.n_dims) * std::log(static_cast<float>(p.n_ctx_orig) / (beta * 2.0f * kPi)) /
                   (2.0f * std::log(p.freq_base));
        };
        a.low = std::max(0.0f, std::floor(corr_dim(p.beta_fast)));
        a.high = std::min(static_cast<float>(p.n_dims - 1), std::ceil(corr_dim(p.beta_slow)));
    }
    BG_CUDA_CHECK(launch_kernel(rope_kernel, blocks_for(n_tok * n_heads * (p.n_dims / 2)), kThreads, 0, stream, x,
                                row_stride, n_tok, pos, n_heads, head_dim, a));
}

}  // namespace bg::cuda
