// Elementwise and per-row kernels of the forward pass: norms, rope, SwiGLU, mHC, Engram gate,
// compressor pooling, router and the MoE row shuffles. Attention and the indexer are in
// attention.cu, matmul and the embedding gather in matmul.cu.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>

#include "backend/pool_channel.h"
#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "util/check.h"

namespace bg::cuda {

static_assert(sizeof(HcMix) == kMixWidth * sizeof(float), "HcMix must be 24 packed floats");
static_assert(offsetof(HcMix, post) == kMixPost * sizeof(float), "HcMix layout");
static_assert(offsetof(HcMix, comb) == kMixComb * sizeof(float), "HcMix layout");

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest
constexpr unsigned kMaxGridY = 65535;

unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// The CPU build rounds each product before adding it (no FMA contraction without -march), so
// chains the CPU writes as s += a*b round the product here too and give the same bits.
__device__ __forceinline__ float mul_add(float a, float b, float c) { return __fadd_rn(__fmul_rn(a, b), c); }

__device__ __forceinline__ float sigmoid_dev(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block; every thread gets the result. red: 33 floats of shared memory. Safe to
// call back to back: the slot results are read from is written only after every thread has
// passed the next call's first barrier.
__device__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < n_warps ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) red[32] = t;
    }
    __syncthreads();
    return red[32];
}

__global__ void fill_positions_kernel(int32_t* pos, int64_t n, int64_t start, int64_t step) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        pos[i] = static_cast<int32_t>(start + i * step);
}

// One block per row.
__global__ void rmsnorm_kernel(const float* x, const float* w, int64_t n, float eps, float* y) {
    __shared__ float red[33];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float s = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    // Every read of x happened before block_sum's barriers, so y may alias x.
    if (w) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * s * w[i];
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * s;
    }
}

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

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float limit, int llama_form,
                              float* out) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float g = gate[i], u = up[i];
        if (limit <= kSwigluNoClamp) {
            out[i] = g * sigmoid_dev(g) * u;
        } else {
            const float uc = fminf(limit, fmaxf(-limit, u));
            if (llama_form) {
                out[i] = fminf(g * sigmoid_dev(g), limit) * uc;
            } else {
                const float gc = fminf(g, limit);
                out[i] = gc * sigmoid_dev(gc) * uc;
            }
        }
    }
}

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

// One block per (token, copy).
__global__ void engram_kernel(const float* kv, const float* wk, const float* wq, int64_t n_embd, float eps,
                              float* H, float* gates) {
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

__global__ void compress_pool_kernel(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0,
                                     int64_t n_blocks, float* out) {
    const int64_t total = n_blocks * d;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t j = idx / d, c = idx % d;
        out[idx] = pool_channel(kv, score, d, ratio, (b0 + j) * ratio, c);
    }
}

// One warp per token. Each rank is one arg-max over the experts still eligible under the total
// order (p + bias descending, id ascending); taking ranks one by one in that order is what
// bg::route's walk down the exact ranking does, for all three policies.
__global__ void route_kernel(int policy, const float* logits, const float* bias, const uint8_t* resident,
                             int64_t n_expert, int k, int norm, float scale, int32_t* ids, float* weights) {
    extern __shared__ float route_smem[];
    float* p = route_smem;                                             // [n_expert]
    float* key = p + n_expert;                                         // [n_expert] p + bias
    int32_t* chosen = reinterpret_cast<int32_t*>(key + n_expert);      // [k]
    uint8_t* taken = reinterpret_cast<uint8_t*>(chosen + k);           // [n_expert]
    const int64_t t = blockIdx.x;
    const int lane = threadIdx.x;
    const float* lg = logits + t * n_expert;
    for (int64_t e = lane; e < n_expert; e += 32) {
        const float x = lg[e];
        const float pe = sqrtf(fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))));  // sqrt(softplus)
        p[e] = pe;
        key[e] = pe + (bias ? bias[e] : 0.0f);
        taken[e] = 0;
    }
    __syncwarp();
    int n_found = 0;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
        const bool need_resident = policy == static_cast<int>(RoutingPolicy::kResidentOnly) ||
                                   (policy == static_cast<int>(RoutingPolicy::kPinnedTop1) && j > 0);
        float bk = 0.0f;
        int be = -1;  // -1: none yet
        for (int64_t e = lane; e < n_expert; e += 32) {
            if (taken[e] || (need_resident && !resident[e])) continue;
            if (be < 0 || key[e] > bk) {  // ids rise along a lane, so ">" keeps the lower id on ties
                bk = key[e];
                be = static_cast<int>(e);
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ok = __shfl_xor_sync(0xffffffffu, bk, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (oe >= 0 && (be < 0 || ok > bk || (ok == bk && oe < be))) {
                bk = ok;
                be = oe;
            }
        }
        if (be < 0) break;  // fewer eligible experts than k
        if (lane == 0) {
            chosen[j] = be;
            taken[be] = 1;
        }
        __syncwarp();
        sum += p[be];
        ++n_found;
    }
    const float f = norm ? scale / fmaxf(sum, 6.1035e-5f) : scale;  // RouteWeighting::factor
    for (int j = lane; j < k; j += 32) {
        ids[t * k + j] = j < n_found ? chosen[j] : -1;
        weights[t * k + j] = j < n_found ? p[chosen[j]] * f : 0.0f;
    }
}

// 2-D grids below: x over the row's width, y (striding) over rows.
__global__ void gather_kernel(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width,
                              float* out) {
    const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (e >= width) return;
    for (int64_t j = blockIdx.y; j < m; j += gridDim.y) out[j * width + e] = x[rows[j] * ldx + e];
}

__global__ void scatter_kernel(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst) {
    const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (e >= width) return;
    for (int64_t j = blockIdx.y; j < m; j += gridDim.y) dst[rows[j] * width + e] = src[j * width + e];
}

__global__ void weighted_sum_kernel(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width,
                                    float* y) {
    const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (e >= width) return;
    for (int64_t t = blockIdx.y; t < n_tok; t += gridDim.y) {
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) acc = mul_add(w[t * k + j], eo[(t * k + j) * width + e], acc);
        y[t * width + e] += acc;
    }
}

dim3 rows_grid(int64_t width, int64_t n_rows) {
    return dim3(static_cast<unsigned>((width + kThreads - 1) / kThreads),
                static_cast<unsigned>(std::min<int64_t>(n_rows, kMaxGridY)));
}

}  // namespace

void fill_positions(int32_t* pos, int64_t n, int64_t start, int64_t step, cudaStream_t stream) {
    if (n <= 0) return;
    BG_CHECK(start >= 0 && start + (n - 1) * step <= INT32_MAX && start + (n - 1) * step >= 0);
    fill_positions_kernel<<<blocks_for(n), kThreads, 0, stream>>>(pos, n, start, step);
    BG_CUDA_CHECK_LAUNCH();
}

void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y, cudaStream_t stream) {
    if (n_rows <= 0) return;
    BG_CHECK(n > 0 && n_rows <= INT_MAX);
    rmsnorm_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, w, n, eps, y);
    BG_CUDA_CHECK_LAUNCH();
}

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
    rope_kernel<<<blocks_for(n_tok * n_heads * (p.n_dims / 2)), kThreads, 0, stream>>>(x, row_stride, n_tok, pos,
                                                                                      n_heads, head_dim, a);
    BG_CUDA_CHECK_LAUNCH();
}

void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form, float* out,
            cudaStream_t stream) {
    if (n <= 0) return;
    swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, n, limit,
                                                         form == SwigluClamp::kLlamaCpp ? 1 : 0, out);
    BG_CUDA_CHECK_LAUNCH();
}

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

void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n_tok, int64_t n_embd, float eps,
                     float* H, float* gates, cudaStream_t stream) {
    if (n_tok <= 0) return;
    BG_CHECK(n_embd > 0 && n_tok * 4 <= INT_MAX);
    engram_kernel<<<static_cast<unsigned>(n_tok * 4), kThreads, 0, stream>>>(kv, wk, wq, n_embd, eps, H, gates);
    BG_CUDA_CHECK_LAUNCH();
}

void compress_pool(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0, int64_t n_blocks,
                   float* out, cudaStream_t stream) {
    BG_CHECK(ratio >= 1 && b0 >= 0);
    if (n_blocks <= 0 || d <= 0) return;
    compress_pool_kernel<<<blocks_for(n_blocks * d), kThreads, 0, stream>>>(kv, score, d, ratio, b0, n_blocks, out);
    BG_CUDA_CHECK_LAUNCH();
}

void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident, int64_t n_tok,
           int64_t n_expert, int k, RouteWeighting wt, int32_t* ids, float* weights, cudaStream_t stream) {
    BG_CHECK(k >= 1 && k <= n_expert);
    BG_CHECK(policy == RoutingPolicy::kExact || resident != nullptr);
    if (n_tok <= 0) return;
    BG_CHECK(n_tok <= INT_MAX);
    const size_t smem = (2 * static_cast<size_t>(n_expert) + static_cast<size_t>(k)) * 4 + static_cast<size_t>(n_expert);
    BG_CHECK_MSG(smem <= 48 * 1024, "router: too many experts for one block's shared memory");
    route_kernel<<<static_cast<unsigned>(n_tok), 32, smem, stream>>>(static_cast<int>(policy), logits, bias, resident,
                                                                     n_expert, k, wt.norm ? 1 : 0, wt.scale, ids,
                                                                     weights);
    BG_CUDA_CHECK_LAUNCH();
}

void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width, float* out,
                cudaStream_t stream) {
    if (m <= 0 || width <= 0) return;
    BG_CHECK(ldx >= width);
    gather_kernel<<<rows_grid(width, m), kThreads, 0, stream>>>(x, ldx, rows, m, width, out);
    BG_CUDA_CHECK_LAUNCH();
}

void moe_scatter(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst, cudaStream_t stream) {
    if (m <= 0 || width <= 0) return;
    scatter_kernel<<<rows_grid(width, m), kThreads, 0, stream>>>(src, rows, m, width, dst);
    BG_CUDA_CHECK_LAUNCH();
}

void moe_weighted_sum(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width, float* y,
                      cudaStream_t stream) {
    if (n_tok <= 0 || width <= 0) return;
    BG_CHECK(k >= 0);
    weighted_sum_kernel<<<rows_grid(width, n_tok), kThreads, 0, stream>>>(eo, w, n_tok, k, width, y);
    BG_CUDA_CHECK_LAUNCH();
}

}  // namespace bg::cuda
