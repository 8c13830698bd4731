// CPU kernels of the dsv41 forward pass, float32 with weights dequantised on the fly.
// Each op has a float64 reference in tests/ops_reference.h and a test on fresh random inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/types.h"
#include "cpu/int8_matmul.h"
#include "cpu/thread_pool.h"
#include "tensor/ggml_types.h"

namespace bg::cpu {

// y[t*ldy + r] = sum_i W[r][i] * x[t*ldx + i] for t < n_tok, r < W.rows.
// Each weight row is dequantised once and used for all n_tok inputs. Parallel over rows. BF16
// rows go through isa's kernel of cpu/bf16_rows.h (the same y on every kernel).
void matmul(ThreadPool& pool, const MatView& W, const float* x, int64_t ldx, int64_t n_tok,
            float* y, int64_t ldy, CpuIsa isa = best_cpu_isa());

// y = x / sqrt(mean(x^2) + eps) * w   (w may be null: no weight). y may alias x.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);

// Rotary embedding of the p.n_dims values at x at position pos (RopeParams says how).
void rope(float* x, int64_t pos, const RopeParams& p, bool inverse);

inline float sigmoid(float x);
float softplus(float x);   // log(1 + e^x), stable for large |x|
float silu(float x);       // x * sigmoid(x)

// SwiGLU with clamp in either form (SwigluClamp).
void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form,
            float* out);

// In-place softmax over n values.
void softmax(float* x, int64_t n);

// mHC mix coefficients (HcMix says how).
HcMix hc_mix(const float m[24], const float base[24], const float scale[3], int n_iter, float eps);


// Router: p_e = sqrt(softplus(logit_e)); choose the k experts with the largest p_e + bias_e
// (ties: lower expert id first); weight_j = p_j * wt.factor(sum_chosen p).
// Writes ids (in descending order of p + bias) and weights; p_out (n_expert values) optional.
void router_exact(const float* logits, const float* bias, int64_t n_expert, int k, RouteWeighting wt,
                  int32_t* ids, float* weights, float* p_out);

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
