// CPU kernels of the dsv41 forward pass, float32 with weights dequantised on the fly.
// Each op has a float64 reference in tests/ops_reference.h and a test on fresh random inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/thread_pool.h"
#include "tensor/ggml_types.h"

namespace bg::cpu {

// A weight matrix in ggml order: `rows` rows (ne1) of `cols` elements (ne0), each row
// row_stride bytes apart, stored as `type`. y = W x means y[r] = sum_i W[r][i] * x[i].
struct MatView {
    const uint8_t* data = nullptr;
    GgmlType type = GgmlType::F32;
    int64_t cols = 0;          // ne0: input width
    int64_t rows = 0;          // ne1: output width
    uint64_t row_stride = 0;   // bytes between rows (row_bytes(type, cols) when dense)
    // Where this weight sits in the model's dense image (dsv41::Model), so a backend that holds
    // the image elsewhere (VRAM) finds it; data is null when the host holds no copy.
    uint64_t image_offset = 0;

    // Rows [r0, r0+n) as their own view.
    MatView slice_rows(int64_t r0, int64_t n) const;
};

// y[t*ldy + r] = sum_i W[r][i] * x[t*ldx + i] for t < n_tok, r < W.rows.
// Each weight row is dequantised once and used for all n_tok inputs. Parallel over rows.
void matmul(ThreadPool& pool, const MatView& W, const float* x, int64_t ldx, int64_t n_tok,
            float* y, int64_t ldy);

// y = x / sqrt(mean(x^2) + eps) * w   (w may be null: no weight). y may alias x.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);

// Rotary embedding, ggml NORM mode: adjacent pairs (x[2i], x[2i+1]) of the n_dims values at x
// are rotated by angle theta_i(pos); inverse=true rotates by -theta (undoes it).
// Frequencies: theta_extrap = pos * freq_base^(-2i/n_dims). Without YaRN theta =
// theta_extrap / factor (llama.cpp's linear scaling; factor 1 for no scaling).
// With YaRN (ggml's rope_yarn with ext_factor 1 and an attention factor that cancels YaRN's
// magnitude scaling, so cos/sin are not scaled): theta_interp = theta_extrap / factor;
// ramp over pair index from corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow):
//   corr_dim(beta) = n_dims * ln(n_ctx_orig / (beta * 2*pi)) / (2 * ln(freq_base))
//   low = max(0, floor(corr_dim(beta_fast))), high = min(n_dims-1, ceil(corr_dim(beta_slow)))
//   y = (i - low) / max(0.001, high - low); mix = 1 - clamp(y, 0, 1)   (i = pair index)
//   theta = theta_interp * (1 - mix) + theta_extrap * mix
struct RopeParams {
    int64_t n_dims = 64;        // rotated dimensions (even)
    float freq_base = 10000.0f;
    bool yarn = false;
    float factor = 1.0f;        // position scaling factor, linear or YaRN (16 for dsv41)
    int64_t n_ctx_orig = 65536;
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
};
void rope(float* x, int64_t pos, const RopeParams& p, bool inverse);

inline float sigmoid(float x);
float softplus(float x);   // log(1 + e^x), stable for large |x|
float silu(float x);       // x * sigmoid(x)

// SwiGLU with clamp, one function for both published forms:
//  kDeepSeek:  g = min(gate, limit); u = clamp(up, -limit, limit); out = silu(g) * u
//  kLlamaCpp:  out = min(silu(gate), limit) * clamp(up, -limit, limit)
// limit <= kSwigluNoClamp means no clamp at all: out = silu(gate) * up (llama.cpp clamps only
// when the limit is > 1e-6).
constexpr float kSwigluNoClamp = 1e-6f;
enum class SwigluClamp { kDeepSeek, kLlamaCpp };
void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form,
            float* out);

// In-place softmax over n values.
void softmax(float* x, int64_t n);

// mHC mix coefficients from the 24 projections m of the RMS-normalised residual copies
// (H = 4 copies):  a = scale[0]*m[0:4] + base[0:4]; pre = sigmoid(a) + eps
//                  b = scale[1]*m[4:8] + base[4:8]; post = 2*sigmoid(b)
//                  c[dst][src] = scale[2]*m[8 + dst + 4*src] + base[8 + dst + 4*src];
//                  comb = sinkhorn(c)
// Sinkhorn (n_iter total rounds, 20 for dsv41): for each src, softmax of c over dst; add eps;
// normalise each dst over its sources; then (n_iter - 1) rounds of: normalise each src over
// dst, then each dst over src. Every divisor is (sum + eps).
struct HcMix {
    float pre[4];
    float post[4];
    float comb[4][4];  // comb[dst][src]
};
HcMix hc_mix(const float m[24], const float base[24], const float scale[3], int n_iter, float eps);

// How the chosen experts' p become their weights (llama.cpp build_moe_ffn): divided by
// max(sum of the chosen p, 6.1035e-5) when `norm` (expert_weights_norm), then times `scale`
// (1 where the file's expert_weights_scale is 0 or 1).
struct RouteWeighting {
    bool norm = true;
    float scale = 1.0f;
    // The factor each chosen p is multiplied by, given their sum.
    float factor(float sum_p) const { return norm ? scale / std::max(sum_p, 6.1035e-5f) : scale; }
};

// Router: p_e = sqrt(softplus(logit_e)); choose the k experts with the largest p_e + bias_e
// (ties: lower expert id first); weight_j = p_j * wt.factor(sum_chosen p).
// Writes ids (in descending order of p + bias) and weights; p_out (n_expert values) optional.
void router_exact(const float* logits, const float* bias, int64_t n_expert, int k, RouteWeighting wt,
                  int32_t* ids, float* weights, float* p_out);

// Engram n-gram hash of one token for one table. c[0] is the token's compressed id, c[1..3] the
// three before it (pad_id where missing). h = c0*m0 (mod 2^64); for k = 1..3: h ^= c_k*m_k, then
// for head j in 0..n_head-1: rows[(k-1)*n_head + j] = (h mod primes[(k-1)*n_head + j]) +
// offsets[(k-1)*n_head + j]. Writes 3*n_head row ids (bucket-major).
void engram_hash(const uint64_t c[4], const uint64_t mult[4], const uint64_t* primes,
                 const uint64_t* offsets, int n_head, uint64_t* rows);

// Engram gate of one residual copy: s = <rmsnorm(key)*wk, rmsnorm(h)*wq> / sqrt(n);
// g = sigmoid(sign(s) * sqrt(max(|s|, 1e-6))). Returns g.
float engram_gate(const float* key, const float* h, const float* wk, const float* wq, int64_t n,
                  float eps);

// One attention head over a set of rows (each row d values; V = K):
// logit_j = scale * <q, row_j>; out = sum_j softmax_j * row_j where the softmax denominator
// also holds exp(sink). rows[j] points at row j. scratch holds n_rows floats.
void attention_head(const float* q, const float* const* rows, int64_t n_rows, int64_t d,
                    float scale, float sink, float* scratch, float* out);

// Indices of the k largest values of x[0..n) (ties: lower index first), in descending order
// of value. k <= n.
void top_k(const float* x, int64_t n, int64_t k, int32_t* out);

inline float sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

}  // namespace bg::cpu
