// The ops the dsv41 forward pass is written against, in the spirit of ggml-backend: buffers in the
// backend's memory, the model's ops over them, copies and fences on one ordered compute queue.
// engine/cpu/cpu_ops.cpp implements them with the CPU kernels (engine/cpu/ops.h), whose float
// arithmetic is the reference; engine/cuda/cuda_ops.cu with the CUDA kernels (engine/cuda/ops.cuh),
// each enqueued on one stream.
//
// Conventions:
//  - a pointer is backend memory (device memory for CUDA, host memory for the CPU) unless it is
//    named *_host; activations are float32 row-major [n_tok][width]; weights are ggml-typed
//    bytes (MatView) in backend memory;
//  - an op is queued in call order and may return before it has run; the host reads results only
//    after download + sync; nothing is allocated per call (the CPU grows its scratch to the
//    largest call once);
//  - each op's semantics are those of the CPU kernel it names.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/matmul_plan.h"
#include "backend/types.h"
#include "tensor/ggml_types.h"
#include "util/timeline.h"

namespace bg {

// Layout of one token's mHC mix in a float array [n][kMixWidth]: the bytes of HcMix.
constexpr int kMixPre = 0;     // pre[c]       at kMixPre + c
constexpr int kMixPost = 4;    // post[d]      at kMixPost + d
constexpr int kMixComb = 8;    // comb[d][c]   at kMixComb + 4*d + c   (dst d, src c)
constexpr int kMixWidth = 24;
static_assert(sizeof(HcMix) == kMixWidth * sizeof(float));

// One query per (token, head) over the rows cpu::attention_head sees for query position
// p = pos[t]: the window rows kv[j], j in [max(0, p-window+1), p], ascending, then (when comp is
// set) the compressed rows comp[sel[p*top_k + s]] for s < sel_n[p]. Logit = scale*<q, row>;
// softmax with exp(sinks[h]) in the denominator only; out = sum softmax*row (V = K).
struct AttentionArgs {
    const float* q = nullptr;          // [n_tok][ldq], head h at h*d (roped)
    int64_t ldq = 0;
    const float* kv = nullptr;         // [n_ctx][d] window cache (normed, roped)
    const float* comp = nullptr;       // [blocks][d] compressed rows, or null: window only
    const int32_t* sel = nullptr;      // [n_ctx][top_k] selected compressed rows per position
    const int32_t* sel_n = nullptr;    // [n_ctx] how many of them
    int64_t top_k = 0;                 // row length of sel
    const float* sinks = nullptr;      // [n_head]
    const int32_t* pos = nullptr;      // [n_tok]
    int64_t n_tok = 0, n_head = 0, d = 0, window = 0;
    float scale = 1.0f;
    float* out = nullptr;              // [n_tok][ldo], head h at h*d
    int64_t ldo = 0;
};

// Lightning indexer after the query rope: for the query at p = pos[t], every visible compressed
// row b < (p+1)/ratio gets score[b] = sum_h w[t][h] * relu(<q[t][h], keys[b]>) written to
// scores[t*ld_scores + b]; then the best min(visible, top_k) rows (cpu::top_k on those scores)
// go to sel[p*top_k ..] and their count to sel_n[p]. Positions in one call must be distinct;
// n_tok <= 65535.
struct IndexerArgs {
    const float* q = nullptr;          // [n_tok][n_head*head_dim], roped
    const float* w = nullptr;          // [n_tok][n_head] head weights, already scaled
    const float* keys = nullptr;       // [blocks][head_dim] index keys
    const int32_t* pos = nullptr;      // [n_tok]
    int64_t n_tok = 0, n_head = 0, head_dim = 0, ratio = 1, top_k = 0;
    float* scores = nullptr;           // [n_tok][ld_scores] work buffer, left holding the scores
    int64_t ld_scores = 0;             // >= (largest position + 1) / ratio
    int32_t* sel = nullptr;            // [n_ctx][top_k]
    int32_t* sel_n = nullptr;          // [n_ctx]
};

// The most the forward asks of the ops, so they size their own memory once at start-up and
// nothing grows on the token path.
struct OpsLimits {
    int64_t busy_pairs = 0;        // busy-interval pairs one stretch between two syncs may record
    size_t timeline_capacity = 0;  // kernel-timeline intervals
    int64_t max_tok = 0;           // tokens in one call
    int64_t n_head = 0;            // attention heads
    int64_t head_dim = 0;          // attention head dimension
    int64_t max_att_rows = 0;      // rows one query attends: the window and the compressed top-k
    int64_t n_expert = 0;          // router width
    // Routed experts (Ops::expert_ffn): most tokens in one call, and the expert's widths.
    int64_t expert_max_tok = 0, n_embd = 0, n_ff = 0;
    // Most tokens of all the experts of one Ops::expert_ffn_batch call, for ops that compute a
    // batch's experts together (the CPU's: one pool job); 0: each alone, in expert_max_tok's room.
    int64_t expert_batch_tok = 0;
    // The weight matrices by the path the CUDA matmul takes (backend/matmul_plan.h), and whether
    // some routed expert runs unfused there (gather, three matmuls, SwiGLU, scatter).
    MatmulNeeds matmul;
    bool experts_unfused = false;
};

// The memory the ops hold for the routed-expert scratch of the unfused sequence (gathered x,
// gate, up, hidden, output): floats, each of the five buffers; tokens enough for one expert_ffn
// or one batch computed together.
inline int64_t expert_work_tok(const OpsLimits& lim) { return std::max(lim.expert_max_tok, lim.expert_batch_tok); }
inline int64_t expert_work_floats_x(const OpsLimits& lim) { return expert_work_tok(lim) * lim.n_embd; }
inline int64_t expert_work_floats_ff(const OpsLimits& lim) { return expert_work_tok(lim) * lim.n_ff; }
inline uint64_t expert_work_bytes(const OpsLimits& lim) {
    return (2 * static_cast<uint64_t>(expert_work_floats_x(lim)) + 3 * static_cast<uint64_t>(expert_work_floats_ff(lim))) *
           sizeof(float);
}

// (token, head, split) triples of decode attention's row split the CUDA ops hold partial
// softmaxes for (cuda::AttentionPartials): one token's 64 heads in 32 runs each.
constexpr int64_t kAttentionPartialSlots = 2048;
inline uint64_t attention_partial_bytes(const OpsLimits& lim) {
    return lim.n_head > 0 && lim.head_dim > 0
               ? static_cast<uint64_t>(kAttentionPartialSlots) * static_cast<uint64_t>(lim.head_dim + 2) * sizeof(float)
               : 0;
}

// The CUDA ops' own device memory once reserve(lim) ran (engine/cuda/cuda_ops.cu allocates
// exactly this): the fused kernels' workspace, the FP32 dequantisation scratch, decode
// attention's partials, the argmax's word and, where some expert runs unfused, its scratch. Here so
// `betelgeuse plan` knows it without a device.
// The CUDA argmax's word (engine/cuda/argmax.cu).
constexpr uint64_t kArgmaxWordBytes = 8;
inline uint64_t cuda_ops_device_bytes(const OpsLimits& lim) {
    uint64_t b = attention_partial_bytes(lim) + kArgmaxWordBytes;
    if (lim.matmul.int8_max_cols > 0) b += int8_workspace_bytes(lim.matmul.int8_max_cols, lim.matmul.int8_max_ff);
    if (lim.matmul.quant_max_cols > 0) b += quant_workspace_bytes(lim.matmul.quant_max_cols, lim.matmul.quant_max_ff);
    b += lim.matmul.dequant_bytes;
    if (lim.experts_unfused) b += expert_work_bytes(lim);
    return b;
}

class Ops {
public:
    virtual ~Ops() = default;
    virtual const char* name() const = 0;

    // ---- memory (start-up only)
    // Whether alloc() hands out host memory (the CPU): the forward counts it as host bytes.
    virtual bool memory_is_host() const = 0;
    // Zeroed backend memory; an allocation of 0 bytes takes 1 (cudaMalloc of 0 is not portable).
    virtual void* alloc(uint64_t bytes) = 0;
    // Zeroed host memory the backend copies from and to (page-locked where it can be).
    virtual void* alloc_host(uint64_t bytes) = 0;
    // The address at which the ops read alloc_host memory in place: a device reads it over the
    // bus while the op runs, with no copy queued before it (the same pointer on the CPU). For
    // small data the host writes late (hybrid decode's CPU rows), where a copy would add its own
    // latency and wait behind the copy engine's expert copies.
    virtual const void* host_view(const void* host) const = 0;
    virtual void free_host(void* p) = 0;
    // Backend memory the ops themselves hold (once reserve() sized it: the CUDA fused-matmul
    // workspace and dequantisation scratch, cuda_ops_device_bytes), and host memory (the CUDA
    // kernel timeline; the CPU's attention, router and expert scratch).
    virtual uint64_t own_bytes() const = 0;
    virtual uint64_t own_host_bytes() const = 0;
    // Called once, before the first op (the ops allocate their own memory here).
    virtual void reserve(const OpsLimits& lim) = 0;

    // ---- copies, queued in order with the ops
    virtual void upload(void* dst, const void* src_host, uint64_t bytes) = 0;
    virtual void download(void* dst_host, const void* src, uint64_t bytes) = 0;
    virtual void copy(void* dst, const void* src, uint64_t bytes) = 0;
    // rows of width floats, from src (ld_src apart) to dst (ld_dst apart).
    virtual void copy_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t width, int64_t rows) = 0;
    virtual void zero(void* x, uint64_t bytes) = 0;

    // ---- ordering
    // The host waits for every queued op; busy intervals recorded before it are then counted.
    virtual void sync() = 0;
    // Work for these ops may come within `us` microseconds: ops that run on a thread pool keep its
    // threads awake until then (ThreadPool::stay_awake), so a job then starts without waking
    // them. A hint; ops on a device ignore it.
    virtual void expect_work(int64_t us) { (void)us; }
    // Fences the host polls to learn that the ops queued before them have run (a routed expert's
    // slot may be released); kFences of them, reused round robin by the caller.
    static constexpr int kFences = 8;
    virtual void record_fence(int i) = 0;
    // The ops queued after this wait on the device for a backend event (Backend::copy_event: a
    // copy landing); the host does not wait. Nothing to do where copies are done when queued.
    virtual void wait_event(DeviceEvent e) { (void)e; }
    // Whether fence i has passed; with wait, blocks until it has.
    virtual bool fence_passed(int i, bool wait) = 0;
    // The ops queued after this wait until the 32-bit word at word_host (alloc_host memory) has
    // reached `value`, compared as a sequence that wraps ((int32_t)(word - value) >= 0). Another
    // host thread advances the word (with a release store) once what those ops read in host
    // memory is written: a device is handed work that follows the CPU's before the CPU is done
    // (hybrid decode queues a layer's dense chain while the CPU computes its experts), and the
    // queueing thread does not wait. The CPU's ops, run when queued, wait here for the word.
    virtual void wait_host_word(const uint32_t* word_host, uint32_t value) = 0;
    // Busy time: brackets around queued compute (no-ops where not measured: the CPU). A bracket
    // holds either work a token waits for in order (kChain) or work that runs beside the host's
    // paths (kBesideHost: a MoE call's experts and shared expert, computed while host-resident
    // experts are copied or computed by the CPU), counted apart too, so a bound of the wall can
    // leave out what may hide under those paths.
    enum class BusyKind : uint8_t { kChain, kBesideHost };
    virtual void busy_begin(BusyKind kind) = 0;
    virtual void busy_end() = 0;
    virtual double busy_ms() const { return -1.0; }              // every bracket
    virtual double busy_beside_host_ms() const { return -1.0; }  // the kBesideHost brackets
    virtual void begin_timeline() {}
    virtual const Timeline* timeline() const { return nullptr; }

    // ---- the model's ops
    virtual void matmul(const MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy) = 0;
    // matmul of each of n matrices of x's width by the same x, into its own y[i] (ldy[i] apart):
    // one activation pass for several projections of one input. Here a matmul each; the CUDA ops
    // run decode's in one launch where the types allow.
    virtual void matmul_many(const MatView* W, int n, const float* x, int64_t ldx, int64_t n_tok, float* const* y,
                             const int64_t* ldy) {
        for (int i = 0; i < n; ++i) matmul(W[i], x, ldx, n_tok, y[i], ldy[i]);
    }
    // W's rows in `groups` equal groups of R = W.rows / groups: group g is matmul of its rows by
    // columns [g * W.cols, (g + 1) * W.cols) of x into columns [g * R, (g + 1) * R) of y (the
    // attention's grouped low-rank output). Here a matmul a group; the CUDA ops run decode's in
    // one launch.
    virtual void matmul_grouped(const MatView& W, int64_t groups, const float* x, int64_t ldx, int64_t n_tok, float* y,
                                int64_t ldy) {
        const int64_t R = W.rows / groups;
        for (int64_t g = 0; g < groups; ++g) matmul(W.slice_rows(g * R, R), x + g * W.cols, ldx, n_tok, y + g * R, ldy);
    }
    virtual void dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) = 0;
    // rows FP8-E4M3 rows, each packed as dim value bytes then dim/32 E8M0 scale bytes
    // (tensor/fp8_rows.h), to rows x dim floats, as fp8::dequantize_packed_rows.
    virtual void dequantize_fp8_rows(const uint8_t* src, float* dst, int64_t rows, int64_t dim) = 0;
    // H[t][c][:] = rows[row_ids[t]][:] for the 4 residual copies c. rows: [][width].
    virtual void embed_rows(const float* rows, const int32_t* row_ids, int64_t n_tok, int64_t width, float* H) = 0;
    virtual void fill_positions(int32_t* pos, int64_t n, int64_t start, int64_t step) = 0;
    // Each of n_rows rows: cpu::rmsnorm; w may be null; y may alias x.
    virtual void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y) = 0;
    // cpu::rope on the last p.n_dims values of each head h < n_heads of token t at pos[t].
    virtual void rope(float* x, int64_t row_stride, int64_t n_tok, const int32_t* pos, int64_t n_heads, int64_t head_dim,
                      const RopeParams& p, bool inverse) = 0;
    virtual void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form, float* out) = 0;
    virtual void scale(float* x, int64_t n, float s) = 0;
    // mix[t] = cpu::hc_mix(m[t], base, scale, n_iter, eps) as [n_tok][kMixWidth].
    virtual void hc_mix(const float* m, const float* base, const float* scale, int64_t n_tok, int n_iter, float eps,
                        float* mix) = 0;
    // x[t][e] = sum_c pre[t*pre_stride + c] * H[t][c][e], c = 0..3 in order.
    virtual void hc_collapse(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok, int64_t n_embd, float* x) = 0;
    // H[t][d][e] = post[t][d]*y[t][e] + sum_c comb[t][d][c]*R[t][c][e]; H may alias R.
    virtual void hc_expand(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t n_embd, float* H) = 0;
    // H[t][c][:] += cpu::engram_gate(kv[t][c], H[t][c], wk[c], wq[c]) * kv[t][4][:].
    virtual void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n_tok, int64_t n_embd,
                                 float eps, float* H) = 0;
    // Compressor pooling of blocks b0 .. b0+n_blocks-1 (block b covers tokens b*ratio ..
    // b*ratio+ratio-1): per channel, softmax over the block of score weighting kv (gated), or
    // the plain sum (score null). kv, score: [n_ctx][d]; out: [n_blocks][d].
    virtual void compress_pool(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0,
                               int64_t n_blocks, float* out) = 0;
    virtual void attention(const AttentionArgs& a) = 0;
    virtual void indexer(const IndexerArgs& a) = 0;
    // bg::route for every token. resident: [n_expert] bytes (every policy but exact); hot:
    // [n_expert] bytes, a subset of resident (hot-pool only; may be null otherwise).
    virtual void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident,
                       const uint8_t* hot, int64_t n_tok, int64_t n_expert, int k, RouteWeighting wt, int32_t* ids,
                       float* weights) = 0;
    // The routing slots of positions pos0 .. pos0 + n_slots/k - 1 (slot s: position pos0 + s/k,
    // rank s%k, expert ids[s]) grouped by expert, experts ascending, slots in order within one:
    // counts[e] for e < n_expert, counts[n_expert] = slots whose id is outside [0, n_expert)
    // (left out of the grouping); for the i-th grouped slot s, gather[i] = pos0 + s/k (its
    // activation row) and scatter[i] = pos0*k + s (its expert-output row). All in backend memory:
    // the host learns a layer's experts from counts alone, one small copy. host_copy (alloc_host
    // memory, or null): the op writes there too, one after another, counts, gather and scatter
    // ([n_expert + 1 + 2 n_slots]), readable by the host once the op is done (a sync) with no copy
    // queued after it (a decode layer's grouping, which the host waits for).
    virtual void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert,
                                 int32_t* counts, int32_t* gather, int32_t* scatter, int32_t* host_copy) = 0;
    // out[j] = x[rows[j]*ldx .. + width) for j < m.
    virtual void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width, float* out) = 0;
    // dst[rows[j]*width .. + width) = src[j] for j < m (rows distinct): moe_scatter_join with no
    // row added.
    void moe_scatter(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst) {
        moe_scatter_join(src, rows, m, 0, 0, width, dst);
    }
    // dst[rows[j]*width .. + width) = src[j] for j < m (rows distinct), except that rows
    // add0 <= j < add0 + n_add are added (+=): the CPU's rows of a layer join the device's, the
    // CPU's share of an expert split between the CPU and the GPU (ExpertMats::hidden_rows) onto
    // the GPU's part. src and rows may be host memory through host_view.
    virtual void moe_scatter_join(const float* src, const int32_t* rows, int64_t m, int64_t add0, int64_t n_add,
                                  int64_t width, float* dst) = 0;
    // One routed expert on m <= OpsLimits::expert_max_tok gathered tokens: for j < m, with
    // x_j = x[rows[j]*ldx ..], out[out_rows[j]*width ..) = down . swiglu(gate . x_j, up . x_j, limit,
    // form), width = e.down.rows, out_rows distinct. The CPU runs exactly moe_gather, matmul
    // (gate), matmul (up), swiglu, matmul (down), moe_scatter (gate and up as one matmul over
    // both where they lie back to back, each row computed as alone); the CUDA backend the fused expert
    // FFN where the weights allow (cuda::expert_ffn), else that same sequence. Nothing is
    // accumulated across experts (each routed (token, rank) has its own output row), so results
    // do not depend on the order experts run in.
    virtual void expert_ffn(const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows, int64_t m, float limit,
                            SwigluClamp form, float* out, const int32_t* out_rows) = 0;
    // Several routed experts of one layer, each exactly as expert_ffn computes it alone (so
    // results do not depend on which experts come together). Here one call after another; the
    // CUDA backend runs experts whose passes go through its GEMV (1-2 tokens: decode) up to eight
    // to a launch, so a decode layer's experts in VRAM fill the GPU together rather than one
    // small launch each (a full-width MXFP4 expert alone reads at about a quarter of the D2D rate).
    virtual void expert_ffn_batch(const ExpertCall* calls, int64_t n, const float* x, int64_t ldx, float limit,
                                  SwigluClamp form, float* out) {
        for (int64_t i = 0; i < n; ++i)
            expert_ffn(calls[i].mats, x, ldx, calls[i].rows, calls[i].m, limit, form, out, calls[i].out_rows);
    }
    // y[t][e] += sum_j w[t][j] * eo[t][j][e], j in rank order, summed into a zero first.
    virtual void moe_weighted_sum(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width, float* y) = 0;
    // out[0] = the first index of the largest of x[0..n), ban's ids counting as -inf and NaN
    // never the largest; 0 where every value is NaN. The host's greedy choice (runtime/sampler.h's
    // argmax over logits whose banned ids were set to -inf), so a decode step's token needs 4
    // bytes from the device, not its logits.
    virtual void argmax(const float* x, int64_t n, const TokenBan& ban, int32_t* out) = 0;
};

// Ops::expert_ffn as separate ops, the CPU's way and the CUDA backend's for weights its fused
// kernels do not take: gather, gate, up, SwiGLU, down, scatter, through the backend's scratch
// (xg, eo: m x n_embd floats; g, up, h: m x n_ff).
struct ExpertScratch {
    float *xg, *g, *up, *h, *eo;
};
inline void expert_ffn_by_ops(Ops& ops, const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows, int64_t m,
                              float limit, SwigluClamp form, float* out, const int32_t* out_rows, const ExpertScratch& s) {
    const int64_t E = e.gate.cols, F = e.gate.rows;
    ops.moe_gather(x, ldx, rows, m, E, s.xg);
    ops.matmul(e.gate, s.xg, E, m, s.g, F);
    ops.matmul(e.up, s.xg, E, m, s.up, F);
    ops.swiglu(s.g, s.up, m * F, limit, form, s.h);
    ops.matmul(e.down, s.h, F, m, s.eo, E);
    ops.moe_scatter(s.eo, out_rows, m, E, out);
}

}  // namespace bg
