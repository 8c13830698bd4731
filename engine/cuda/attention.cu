// Attention over the window plus the selected compressed rows, and the lightning indexer
// (scores, then an exact top-k per query by radix select).
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

constexpr int kAttnThreads = 256;
constexpr int kAttnMaxGroup = 8;       // heads a block at most
constexpr int64_t kAttnBlocksWanted = 256;  // fewer heads a block until the grid has this many
constexpr int kIdxWarps = 8;
// Rows a warp scores, one after another: 8 where many tokens fill the grid; at decode's few
// tokens 1, so the visible rows spread over as many blocks (8 a warp ran the slice's decode
// token at 18-24 us with 1-2 blocks on an H200).
constexpr int kIdxRowsPerWarpMany = 8;
constexpr int kIdxRowsPerWarpFew = 1;
constexpr int64_t kIdxFewTokens = 4;
constexpr int kTopkThreads = 512;
constexpr int kAttnMaxSplitsDev = 64;  // runs a (token, head) is split into at most (attention_combine_kernel)
constexpr size_t kDefaultSmem = 48 * 1024;

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum or max; every thread gets the result. red: 33 floats of shared memory; back to
// back calls are safe (red[32] is rewritten only after the next call's first barrier).
template <bool kMax>
__device__ float block_reduce(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = kMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < n_warps ? red[lane] : (kMax ? -INFINITY : 0.0f);
        t = kMax ? warp_max(t) : warp_sum(t);
        if (lane == 0) red[32] = t;
    }
    __syncthreads();
    return red[32];
}

// The rows the query at position p sees: window rows j0 .. j0 + n_win - 1, then n - n_win
// selected compressed rows.
struct QueryRows {
    int64_t j0, n_win, n;
};
__device__ __forceinline__ QueryRows query_rows(const AttentionArgs& a, int64_t p) {
    QueryRows r;
    r.j0 = p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    r.n_win = p - r.j0 + 1 > 0 ? p - r.j0 + 1 : 0;
    int64_t n_sel = 0;
    if (a.comp) {
        n_sel = a.sel_n[p];
        n_sel = n_sel < 0 ? 0 : (n_sel > a.top_k ? a.top_k : n_sel);
    }
    r.n = r.n_win + n_sel;
    return r;
}
// Row j of those rows as a source: >= 0 a window row, < 0 compressed row -(s+1).
__device__ __forceinline__ int32_t row_source(const AttentionArgs& a, int64_t p, const QueryRows& q, int64_t j) {
    return j < q.n_win ? static_cast<int32_t>(q.j0 + j) : -(a.sel[p * a.top_k + (j - q.n_win)] + 1);
}
__device__ __forceinline__ const float* row_at(const AttentionArgs& a, int32_t src) {
    return src >= 0 ? a.kv + src * a.d : a.comp + static_cast<int64_t>(-src - 1) * a.d;
}
// One warp over lg[0 .. n): mx = the largest of mx0 and them, each replaced by exp(lg - mx);
// returns (mx, the sum of those terms), on every lane.
__device__ __forceinline__ float2 warp_exp_terms(float* lg, int64_t n, float mx0) {
    const int lane = threadIdx.x & 31;
    float mx = mx0;
    for (int64_t j = lane; j < n; j += 32) mx = fmaxf(mx, lg[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t j = lane; j < n; j += 32) {
        const float e = expf(lg[j] - mx);
        lg[j] = e;
        sum += e;
    }
    return make_float2(mx, warp_sum(sum));
}
// Logits of the rows whose sources are src[0 .. n) for the G heads of qs ([G][d]), a warp a row,
// each of its values used for the G heads: logit[g * ld + j].
template <int G>
__device__ void head_logits(const AttentionArgs& a, const float* qs, const int32_t* src, int64_t n, float* logit,
                            int64_t ld) {
    const int64_t d = a.d;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int64_t j = warp; j < n; j += n_warps) {
        const float* row = row_at(a, src[j]);
        float s[G];
#pragma unroll
        for (int g = 0; g < G; ++g) s[g] = 0.0f;
#pragma unroll 4
        for (int64_t i = lane; i < d; i += 32) {
            const float v = row[i];
#pragma unroll
            for (int g = 0; g < G; ++g) s[g] += qs[g * d + i] * v;
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            s[g] = warp_sum(s[g]);
            if (lane == 0) logit[g * ld + j] = a.scale * s[g];
        }
    }
}

// One block per (token, group of G heads). The heads share their rows (one KV head), so a
// block reads each row once for G heads: with one block a head (G = 1, the first version) the
// slice's 64-token pass spent 0.9 ms a layer here on 24 SMs, every block re-reading the same rows
// with one dependent load per row and dimension. Dynamic shared memory: q [G][d], then per head
// and row its logit (later its weight) [G][max_rows], then each row's source [max_rows] (>= 0:
// window row; < 0: compressed row -(r+1)).
template <int G>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(AttentionArgs a, int64_t max_rows) {
    grid_dependency_begin();
    extern __shared__ float attn_smem[];
    __shared__ float inv_s[G];
    const int64_t d = a.d;
    float* qs = attn_smem;
    float* logit = qs + G * d;
    int32_t* src = reinterpret_cast<int32_t*>(logit + G * max_rows);
    const int64_t groups = a.n_head / G;
    const int64_t t = blockIdx.x / groups, h0 = (blockIdx.x % groups) * G;
    const int64_t p = a.pos[t];
    const QueryRows qr = query_rows(a, p);
    const int64_t n_rows = qr.n;

    const float* q = a.q + t * a.ldq + h0 * d;  // the group's heads are adjacent
    for (int64_t i = threadIdx.x; i < G * d; i += blockDim.x) qs[i] = q[i];
    for (int64_t j = threadIdx.x; j < n_rows; j += blockDim.x) src[j] = row_source(a, p, qr, j);
    __syncthreads();
    auto row_of = [&](int64_t j) { return row_at(a, src[j]); };

    head_logits<G>(a, qs, src, n_rows, logit, max_rows);
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    // Softmax, a warp a head. The sink joins the max so exp(sink - mx) cannot overflow either, as
    // on the CPU.
    for (int g = warp; g < G; g += n_warps) {
        const float sink = a.sinks[h0 + g];
        const float2 ms = warp_exp_terms(logit + g * max_rows, n_rows, sink);
        if (lane == 0) inv_s[g] = 1.0f / (expf(sink - ms.x) + ms.y);
    }
    __syncthreads();

    // Output: a thread a dimension, rows in order (the CPU's order of the sum), each row's value
    // used for the G heads; four rows' loads in flight.
    float inv[G];
#pragma unroll
    for (int g = 0; g < G; ++g) inv[g] = inv_s[g];
    float* out = a.out + t * a.ldo + h0 * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float acc[G];
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g] = 0.0f;
#pragma unroll 4
        for (int64_t j = 0; j < n_rows; ++j) {
            const float v = row_of(j)[i];
#pragma unroll
            for (int g = 0; g < G; ++g) acc[g] = mul_add(logit[g * max_rows + j] * inv[g], v, acc[g]);
        }
#pragma unroll
        for (int g = 0; g < G; ++g) out[g * d + i] = acc[g];
    }
}

// Decode's attention, its rows split: with a block a (token, head group), one token's 8 groups
// of 8 heads (or 64 blocks of a head) leave most SMs idle and each block walks up to 640 rows
// alone (33-72 us a layer at one token on an H200, on every decode layer's critical path). Here
// block (pair, s) takes the s-th of `splits` equal runs of the pair's rows and writes, for each of
// its G heads, the run's largest logit m, sum of exp(logit - m) l, and unnormalised output o
// (part[(t * n_head + h) * splits + s] = {o[d], m, l}); attention_combine_kernel merges the runs
// with the sink. An empty run writes m = -inf, l = 0. Dynamic shared memory as attention_kernel's,
// for run_max rows.
template <int G>
__global__ void __launch_bounds__(kAttnThreads) attention_split_kernel(AttentionArgs a, int64_t run_max, int splits,
                                                                       float* part) {
    grid_dependency_begin();
    extern __shared__ float attn_smem[];
    const int64_t d = a.d;
    float* qs = attn_smem;
    float* logit = qs + G * d;
    int32_t* src = reinterpret_cast<int32_t*>(logit + G * run_max);
    const int64_t groups = a.n_head / G;
    const int64_t pair = blockIdx.x / splits, s = blockIdx.x % splits;
    const int64_t t = pair / groups, h0 = (pair % groups) * G;
    const int64_t p = a.pos[t];
    const QueryRows qr = query_rows(a, p);
    const int64_t n_rows = qr.n;
    const int64_t run = (n_rows + splits - 1) / splits;
    const int64_t r0 = s * run < n_rows ? s * run : n_rows;
    const int64_t nr = (r0 + run < n_rows ? r0 + run : n_rows) - r0;  // <= run_max
    const int64_t slot = (t * a.n_head + h0) * splits + s;            // head h0 + g at slot + g * splits
    if (nr <= 0) {
        if (threadIdx.x < G) {
            part[(slot + threadIdx.x * splits) * (d + 2) + d] = -INFINITY;
            part[(slot + threadIdx.x * splits) * (d + 2) + d + 1] = 0.0f;
        }
        return;  // uniform over the block
    }

    const float* q = a.q + t * a.ldq + h0 * d;
    for (int64_t i = threadIdx.x; i < G * d; i += blockDim.x) qs[i] = q[i];
    for (int64_t j = threadIdx.x; j < nr; j += blockDim.x) src[j] = row_source(a, p, qr, r0 + j);
    __syncthreads();
    auto row_of = [&](int64_t j) { return row_at(a, src[j]); };

    head_logits<G>(a, qs, src, nr, logit, run_max);
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;

    // The run's softmax terms, a warp a head: exp(logit - m) in place of the logits.
    for (int g = warp; g < G; g += n_warps) {
        const float2 ms = warp_exp_terms(logit + g * run_max, nr, -INFINITY);
        if (lane == 0) {
            part[(slot + g * splits) * (d + 2) + d] = ms.x;
            part[(slot + g * splits) * (d + 2) + d + 1] = ms.y;
        }
    }
    __syncthreads();

    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float acc[G];
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g] = 0.0f;
#pragma unroll 8
        for (int64_t j = 0; j < nr; ++j) {
            const float v = row_of(j)[i];
#pragma unroll
            for (int g = 0; g < G; ++g) acc[g] = mul_add(logit[g * run_max + j], v, acc[g]);
        }
#pragma unroll
        for (int g = 0; g < G; ++g) part[(slot + g * splits) * (d + 2) + i] = acc[g];
    }
}

// out[t][h] = sum over runs of exp(m_s - M) o_s / (exp(sink - M) + sum of exp(m_s - M) l_s),
// M the largest of the sink and the runs' m: the softmax of attention_kernel, regrouped. A block
// a (token, head); runs with l = 0 are empty and weigh 0 (their o is never read). The runs'
// weights go to shared memory once: with each thread reading every run's m and l and taking its
// exponential for each of its dimensions, one after another, the merge took 13 us at decode
// (reading them once left it at 14.6 us: the runs' loads are the latency, see the launcher).
__global__ void attention_combine_kernel(AttentionArgs a, int splits, const float* part) {
    grid_dependency_begin();
    __shared__ float wt[kAttnMaxSplitsDev];
    __shared__ float s_inv;
    const int64_t d = a.d;
    const int64_t t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
    const float* ph = part + (t * a.n_head + h) * splits * (d + 2);
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        const float sink = a.sinks[h];
        // splits <= 64: two runs a lane at most.
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
        if (lane < splits) {
            l0 = ph[lane * (d + 2) + d + 1];
            if (l0 > 0.0f) m0 = ph[lane * (d + 2) + d];
        }
        if (lane + 32 < splits) {
            l1 = ph[(lane + 32) * (d + 2) + d + 1];
            if (l1 > 0.0f) m1 = ph[(lane + 32) * (d + 2) + d];
        }
        const float mx = warp_max(fmaxf(sink, fmaxf(m0, m1)));
        const float w0 = l0 > 0.0f ? expf(m0 - mx) : 0.0f, w1 = l1 > 0.0f ? expf(m1 - mx) : 0.0f;
        if (lane < splits) wt[lane] = w0;
        if (lane + 32 < splits) wt[lane + 32] = w1;
        const float den = warp_sum(w0 * l0 + w1 * l1) + expf(sink - mx);
        if (lane == 0) s_inv = 1.0f / den;
    }
    __syncthreads();
    const float inv = s_inv;
    float* out = a.out + t * a.ldo + h * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0.0f;
#pragma unroll 16
        for (int sp = 0; sp < splits; ++sp) {
            const float w = wt[sp];
            if (w != 0.0f) acc = mul_add(w, ph[sp * (d + 2) + i], acc);
        }
        out[i] = acc * inv;
    }
}

// Scores: grid (row tiles of kIdxWarps * rows_per_warp rows, tokens); each warp scores rows of
// the tile, one at a time, with lane l taking heads l, l+32, ... over the whole head dimension
// (four partial sums, so the shared-memory loads of a dot product overlap). Dynamic shared
// memory: q of the token [n_head][head_dim+1] (the pad puts the lanes' rows in distinct banks),
// w [n_head], one key row per warp [kIdxWarps][head_dim].
__global__ void index_scores_kernel(IndexerArgs a, int rows_per_warp) {
    grid_dependency_begin();
    extern __shared__ float idx_smem[];
    const int64_t nh = a.n_head, hd = a.head_dim, qstride = hd + 1;
    float* qs = idx_smem;
    float* ws = qs + nh * qstride;
    float* kbuf = ws + nh;
    const int64_t t = blockIdx.y;
    const int64_t visible = (static_cast<int64_t>(a.pos[t]) + 1) / a.ratio;
    if (visible > a.ld_scores) __trap();  // score buffer too short: a caller bug, never silent
    const int64_t b_first = static_cast<int64_t>(blockIdx.x) * kIdxWarps * rows_per_warp;
    if (b_first >= visible) return;  // uniform over the block, before any barrier

    for (int64_t i = threadIdx.x; i < nh * hd; i += blockDim.x) qs[(i / hd) * qstride + i % hd] = a.q[t * nh * hd + i];
    for (int64_t i = threadIdx.x; i < nh; i += blockDim.x) ws[i] = a.w[t * nh + i];
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* kb = kbuf + warp * hd;
    for (int r = 0; r < rows_per_warp; ++r) {
        const int64_t b = b_first + warp + static_cast<int64_t>(r) * kIdxWarps;
        if (b >= visible) break;  // uniform over the warp
        __syncwarp();             // the previous row's reads of kb are done
        for (int64_t c = lane; c < hd; c += 32) kb[c] = a.keys[b * hd + c];
        __syncwarp();
        float s = 0.0f;
        for (int64_t h = lane; h < nh; h += 32) {
            const float* qh = qs + h * qstride;
            float d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int64_t c = 0;
            for (; c + 4 <= hd; c += 4)
#pragma unroll
                for (int u = 0; u < 4; ++u) d4[u] = fmaf(qh[c + u], kb[c + u], d4[u]);
            for (; c < hd; ++c) d4[0] = fmaf(qh[c], kb[c], d4[0]);
            const float dot = (d4[0] + d4[1]) + (d4[2] + d4[3]);
            s += ws[h] * (dot < 0.0f ? 0.0f : dot);
        }
        s = warp_sum(s);
        if (lane == 0) a.scores[t * a.ld_scores + b] = s;
    }
}

// Float -> unsigned key with the same order; -0 and +0 map to one key, as they compare equal.
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u << 1) == 0) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Sorting these descending orders by score descending, then index ascending: cpu::top_k's order.
__device__ __forceinline__ unsigned long long compose(uint32_t key, int64_t i) {
    return (static_cast<unsigned long long>(key) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}

// One block per query token. Radix select (4 passes of 8 bits) finds the key T of the k-th best
// row; every row above T is taken, and of the rows equal to T the lowest-indexed ones, found by
// a block scan in index order; the k candidates are then bitonic-sorted in shared memory.
// Dynamic shared memory: cand [cap] (cap a power of two >= top_k).
__global__ void topk_kernel(IndexerArgs a) {
    grid_dependency_begin();
    extern __shared__ unsigned long long cand[];
    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix;
    __shared__ int64_t s_remaining;
    __shared__ unsigned long long s_gt;
    __shared__ int64_t s_eq_seen;
    __shared__ int warp_cnt[kTopkThreads / 32];
    const int64_t t = blockIdx.x;
    const int64_t p = a.pos[t];
    const int64_t visible = (p + 1) / a.ratio;
    if (visible > a.ld_scores) __trap();
    const int64_t k = visible < a.top_k ? visible : a.top_k;
    if (k == 0) {
        if (threadIdx.x == 0) a.sel_n[p] = 0;
        return;
    }
    const float* s = a.scores + t * a.ld_scores;
    const bool all = k == visible;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n_warps = blockDim.x >> 5;

    uint32_t prefix = 0, mask = 0;
    int64_t remaining = k;  // rows still to take among those matching prefix under mask
    if (!all) {
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
            __syncthreads();
            for (int64_t i = tid; i < visible; i += blockDim.x) {
                const uint32_t key = order_key(s[i]);
                if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (tid == 0) {
                int64_t above = 0;
                uint32_t dg = 255;
                for (; dg > 0; --dg) {
                    if (above + hist[dg] >= remaining) break;
                    above += hist[dg];
                }
                s_prefix = prefix | (dg << shift);
                s_remaining = remaining - above;
            }
            __syncthreads();
            prefix = s_prefix;
            remaining = s_remaining;
            mask |= 0xFFu << shift;
        }
    }
    const int64_t eq_take = all ? 0 : remaining;  // rows equal to T to take (the rest are above T)
    const int64_t gt_total = k - eq_take;

    int64_t cap = 1;
    while (cap < k) cap <<= 1;
    for (int64_t i = tid; i < cap; i += blockDim.x) cand[i] = 0;  // pads sort last
    if (tid == 0) {
        s_gt = 0;
        s_eq_seen = 0;
    }
    __syncthreads();
    for (int64_t base = 0; base < visible; base += blockDim.x) {
        const int64_t i = base + tid;
        bool gt = false, eq = false;
        uint32_t key = 0;
        if (i < visible) {
            key = order_key(s[i]);
            gt = all || key > prefix;
            eq = !all && key == prefix;
        }
        if (gt) cand[atomicAdd(&s_gt, 1ull)] = compose(key, i);
        const unsigned bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) warp_cnt[warp] = __popc(bal);
        __syncthreads();
        if (eq) {
            int64_t off = s_eq_seen + __popc(bal & ((1u << lane) - 1u));
            for (int w = 0; w < warp; ++w) off += warp_cnt[w];
            if (off < eq_take) cand[gt_total + off] = compose(key, i);
        }
        __syncthreads();
        if (tid == 0) {
            int64_t tot = 0;
            for (int w = 0; w < n_warps; ++w) tot += warp_cnt[w];
            s_eq_seen += tot;
        }
        __syncthreads();
    }

    for (int64_t size = 2; size <= cap; size <<= 1)
        for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (int64_t i = tid; i < cap; i += blockDim.x) {
                const int64_t j = i ^ stride;
                if (j > i) {
                    const unsigned long long x = cand[i], y = cand[j];
                    const bool desc = (i & size) == 0;
                    if (desc ? x < y : x > y) {
                        cand[i] = y;
                        cand[j] = x;
                    }
                }
            }
            __syncthreads();
        }
    for (int64_t r = tid; r < k; r += blockDim.x)
        a.sel[p * a.top_k + r] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(cand[r] & 0xFFFFFFFFull));
    if (tid == 0) a.sel_n[p] = static_cast<int32_t>(k);
}

// Opts a kernel into more than the default 48 KiB of dynamic shared memory when it needs it.
template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, size_t bytes, const char* what) {
    // The kernels here hold under 2 KiB of static shared memory: skip the query when even that
    // leaves the request inside the default.
    if (bytes + 2048 <= kDefaultSmem) return;
    cudaFuncAttributes attr{};
    BG_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    if (bytes + attr.sharedSizeBytes <= kDefaultSmem) return;
    int dev = 0, optin = 0;
    BG_CUDA_CHECK(cudaGetDevice(&dev));
    BG_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (bytes + attr.sharedSizeBytes > static_cast<size_t>(optin))
        fail("%s needs %zu bytes of shared memory per block; the device allows %d", what,
             bytes + attr.sharedSizeBytes, optin);
    BG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Rows a query sees at most: the window, then the selected compressed rows.
int64_t attention_rows(const AttentionArgs& a) { return std::max<int64_t>(a.window, 0) + (a.comp ? a.top_k : 0); }

size_t attention_smem(const AttentionArgs& a, int group) {
    const int64_t max_rows = attention_rows(a);
    return static_cast<size_t>(group * (a.d + max_rows)) * sizeof(float) + static_cast<size_t>(max_rows) * sizeof(int32_t);
}

template <int G>
void launch_attention(const AttentionArgs& a, cudaStream_t stream) {
    const int64_t max_rows = attention_rows(a);
    const size_t smem = attention_smem(a, G);
    allow_dynamic_smem(attention_kernel<G>, smem, "attention");
    BG_CUDA_CHECK(launch_kernel(attention_kernel<G>, static_cast<unsigned>(a.n_tok * a.n_head / G), kAttnThreads, smem,
                                stream, a, max_rows));
}

// The split's shared memory: q of G heads, their logits and the sources of run_max rows.
size_t attention_split_smem(const AttentionArgs& a, int group, int64_t run_max) {
    return static_cast<size_t>(group * (a.d + run_max)) * sizeof(float) +
           static_cast<size_t>(run_max) * sizeof(int32_t);
}

template <int G>
void launch_attention_split(const AttentionArgs& a, int splits, float* part, cudaStream_t stream) {
    const int64_t run_max = (attention_rows(a) + splits - 1) / splits;
    const size_t smem = attention_split_smem(a, G, run_max);
    allow_dynamic_smem(attention_split_kernel<G>, smem, "attention (split rows)");
    BG_CUDA_CHECK(launch_kernel(attention_split_kernel<G>, static_cast<unsigned>(a.n_tok * a.n_head / G * splits),
                                kAttnThreads, smem, stream, a, run_max, splits, part));
    // A thread a dimension (up to 512): each thread's loads, one a run, are all in flight at once;
    // 128 threads with four dimensions each took 13-15 us at decode on an H200.
    const int threads = static_cast<int>(std::min<int64_t>(512, (a.d + 31) / 32 * 32));
    BG_CUDA_CHECK(launch_kernel(attention_combine_kernel, static_cast<unsigned>(a.n_tok * a.n_head), threads, 0, stream,
                                a, splits, part));
}

// Runs a block is split into at most, and rows a run at least on the launcher's choice: shorter
// runs are mostly the block's set-up.
constexpr int kAttnMaxSplits = kAttnMaxSplitsDev;
constexpr int64_t kAttnMinRunRows = 16;

}  // namespace

void attention(const AttentionArgs& a, cudaStream_t stream, int heads_per_block, const AttentionPartials* partials,
               int splits) {
    if (a.n_tok <= 0 || a.n_head <= 0) return;
    BG_CHECK(a.d > 0 && a.q && a.kv && a.sinks && a.pos && a.out);
    BG_CHECK(a.ldq >= a.n_head * a.d && a.ldo >= a.n_head * a.d);
    BG_CHECK(!a.comp || (a.sel && a.sel_n && a.top_k > 0));
    BG_CHECK(a.n_tok * a.n_head <= INT_MAX);
    BG_CHECK(splits >= 0 && splits <= kAttnMaxSplits);
    BG_CHECK_MSG(splits <= 1 || partials, "attention: a row split needs partials");
    if (partials && splits != 1) {
        BG_CHECK(partials->data && partials->d >= a.d);
        // The most heads a block (they share their rows) that divide the heads and fit the
        // default shared memory with runs of kAttnMinRunRows.
        int g = heads_per_block;
        if (g == 0) {
            g = kAttnMaxGroup;
            while (g > 1 &&
                   (a.n_head % g != 0 || attention_split_smem(a, g, kAttnMinRunRows) > kDefaultSmem - 2048))
                g /= 2;
        }
        const int64_t pairs = a.n_tok * a.n_head / g;
        int64_t n = splits;
        if (n == 0) {
            n = std::min<int64_t>((kAttnBlocksWanted + pairs - 1) / pairs, attention_rows(a) / kAttnMinRunRows);
            n = std::min<int64_t>({n, kAttnMaxSplits, partials->slots / (a.n_tok * a.n_head)});
        }
        if (n >= 2) {
            BG_CHECK_MSG(a.n_tok * a.n_head * n <= partials->slots, "attention: partials too small for the split");
            BG_CHECK_MSG((g == 1 || g == 2 || g == 4 || g == 8) && a.n_head % g == 0,
                         "attention: 1, 2, 4 or 8 heads a block, dividing the heads");
            const int sp = static_cast<int>(n);
            switch (g) {
                case 8: launch_attention_split<8>(a, sp, partials->data, stream); break;
                case 4: launch_attention_split<4>(a, sp, partials->data, stream); break;
                case 2: launch_attention_split<2>(a, sp, partials->data, stream); break;
                default: launch_attention_split<1>(a, sp, partials->data, stream); break;
            }
            return;
        }
    }
    int g = heads_per_block;
    if (g == 0) {
        // The most heads a block that still leave kAttnBlocksWanted blocks and stay within the
        // default shared memory (a window of thousands of rows runs a head a block).
        g = kAttnMaxGroup;
        while (g > 1 && (a.n_head % g != 0 || a.n_tok * a.n_head / g < kAttnBlocksWanted ||
                         attention_smem(a, g) > kDefaultSmem - 2048))
            g /= 2;
    }
    BG_CHECK_MSG((g == 1 || g == 2 || g == 4 || g == 8) && a.n_head % g == 0,
                 "attention: 1, 2, 4 or 8 heads a block, dividing the heads");
    switch (g) {
        case 8: launch_attention<8>(a, stream); break;
        case 4: launch_attention<4>(a, stream); break;
        case 2: launch_attention<2>(a, stream); break;
        default: launch_attention<1>(a, stream); break;
    }
}

void indexer(const IndexerArgs& a, cudaStream_t stream) {
    if (a.n_tok <= 0) return;
    BG_CHECK(a.n_head > 0 && a.head_dim > 0 && a.ratio >= 1 && a.top_k >= 1 && a.ld_scores >= 1);
    BG_CHECK(a.q && a.w && a.keys && a.pos && a.scores && a.sel && a.sel_n);
    BG_CHECK(a.n_tok <= 65535 && a.n_tok <= INT_MAX);
    const int rows_per_warp = a.n_tok <= kIdxFewTokens ? kIdxRowsPerWarpFew : kIdxRowsPerWarpMany;
    const int64_t tile_rows = int64_t{kIdxWarps} * rows_per_warp;
    const int64_t tiles = (a.ld_scores + tile_rows - 1) / tile_rows;
    BG_CHECK(tiles <= INT_MAX);
    const size_t smem = static_cast<size_t>(a.n_head * (a.head_dim + 1) + a.n_head + kIdxWarps * a.head_dim) * sizeof(float);
    allow_dynamic_smem(index_scores_kernel, smem, "indexer scores");
    BG_CUDA_CHECK(launch_kernel(index_scores_kernel, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(a.n_tok)),
                                kIdxWarps * 32, smem, stream, a, rows_per_warp));

    int64_t cap = 1;
    while (cap < a.top_k) cap <<= 1;
    const size_t tsmem = static_cast<size_t>(cap) * sizeof(unsigned long long);
    allow_dynamic_smem(topk_kernel, tsmem, "indexer top-k");
    BG_CUDA_CHECK(launch_kernel(topk_kernel, static_cast<unsigned>(a.n_tok), kTopkThreads, tsmem, stream, a));
}

}  // namespace bg::cuda
