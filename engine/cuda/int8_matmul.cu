// The integer matmul path's workspace, activation quantisation, split-K reduction and epilogues,
// and launchers (int8_matmul.cuh); the MMA kernel is int8_matmul_kernel.cuh.
#include "cuda/int8_matmul.cuh"

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/sm_limit.cuh"
#include "cuda/int8_gemv_kernel.cuh"
#include "cuda/int8_matmul_kernel.cuh"
#include "cuda/swiglu_dev.cuh"
#include "cuda/launch.cuh"
#include "tensor/qtypes/all.h"
#include "util/check.h"

namespace bg::cuda {

namespace {

using int8mm::kMaxTiles;
using int8mm::kTileTok;
using int8mm::quantize_lane;

constexpr int kQuantWarps = 8;

// Where the activations' rows come from: K blocks [s * seg_nkb, (s + 1) * seg_nkb) of token j
// are blocks 0.. of x's row rows[s][j] (or j where rows[s] is null). One segment for a matmul;
// one an expert for several experts' GEMVs in one launch (their activations side by side in K).
struct QuantRows {
    const int32_t* rows[int8mm::kGemvMaxSegs];
    int seg_nkb;
};

// x rows of cols values -> int8 fragments for n_tiles tiles, token columns 0..cols_tok-1 (the
// pass's padded tokens for the MMA kernel, which reads whole n-tiles; only the m real ones for the
// GEMV). A warp takes KB K blocks of one token (tokens fastest across warps), their loads issued
// together: one a warp spent 8.9 us a call on 24 SMs in the slice's 64-token launches; four a
// warp, 2.6 us instead of 1.5 at decode's one token (too few warps).
template <int KB>
__global__ void quantize_x_kernel(const float* x, int64_t ldx, QuantRows src, int m, int nkb, int n_tiles,
                                  int cols_tok, int8_t* q, float* d, float2* s) {
    grid_dependency_begin();
    const int w = blockIdx.x * kQuantWarps + (threadIdx.x >> 5);
    const int groups = (nkb + KB - 1) / KB;
    if (w >= groups * cols_tok) return;
    const int kg = w / cols_tok, tok = w % cols_tok, lane = threadIdx.x & 31;
    float v[KB];
#pragma unroll
    for (int i = 0; i < KB; ++i) {
        const int kb = kg * KB + i, sg = kb / src.seg_nkb;
        const int32_t* rows = kb < nkb ? src.rows[sg] : nullptr;
        v[i] = tok < m && kb < nkb
                   ? x[(rows ? rows[tok] : tok) * ldx + static_cast<int64_t>(kb - sg * src.seg_nkb) * 32 + lane]
                   : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < KB; ++i) {
        const int kb = kg * KB + i;
        if (kb < nkb) quantize_lane(v[i], kb, tok, n_tiles, q, d, s);  // uniform over the warp
    }
}

void check_int8_weights(const DeviceMat& W, int64_t max_cols) {
    BG_CHECK_MSG(qtypes::int8_path_takes(W.type), "int8_matmul: a weight type without int8 traits");
    BG_CHECK(W.cols > 0 && W.cols % 32 == 0 && W.rows >= 0 && W.rows <= INT_MAX / 2);
    BG_CHECK_MSG(W.cols <= max_cols, "int8_matmul: matrix wider than the workspace");
    BG_CHECK(W.row_stride >= row_bytes(W.type, W.cols));
    BG_CHECK(W.data != nullptr || W.rows == 0);
}

int tiles_for(int m) { return (m + kTileTok - 1) / kTileTok; }

// Tokens of one pass through matrices of these types (gate and up together when mats is 2): 64,
// or fewer where a K-quant's super-blocks leave shared memory for fewer n-tiles.
int pass_tokens(GgmlType t, int mats) {
    return qtypes::visit(t, [&](auto tr) {
        using T = decltype(tr);
        return (mats == 2 ? int8mm::max_tiles<T, 2>() : int8mm::max_tiles<T, 1>()) * kTileTok;
    });
}

// padded: every token column of the pass's n-tiles (the MMA kernel's), else the m real ones
// (the GEMV reads no others).
void quantize_x_rows(Int8Workspace& ws, const float* x, int64_t ldx, const QuantRows& src, int m, int64_t cols,
                     cudaStream_t stream, bool padded) {
    const int n_tiles = tiles_for(m), nkb = static_cast<int>(cols / 32);
    const int cols_tok = padded ? n_tiles * kTileTok : m;
    BG_CHECK(src.seg_nkb > 0 && nkb % src.seg_nkb == 0 && nkb / src.seg_nkb <= int8mm::kGemvMaxSegs);
    auto launch = [&](auto kb) {
        constexpr int KB = decltype(kb)::value;
        const int warps = (nkb + KB - 1) / KB * cols_tok;
        BG_CUDA_CHECK(launch_kernel(quantize_x_kernel<KB>, (warps + kQuantWarps - 1) / kQuantWarps, kQuantWarps * 32, 0,
                                    stream, x, ldx, src, m, nkb, n_tiles, cols_tok, ws.xq(), ws.xd(), ws.xs()));
    };
    if (cols_tok > kTileTok) launch(std::integral_constant<int, 4>{});
    else launch(std::integral_constant<int, 1>{});
    BG_CUDA_CHECK_LAUNCH();
}
void quantize_x(Int8Workspace& ws, const float* x, int64_t ldx, const int32_t* rows, int m, int64_t cols,
                cudaStream_t stream, bool padded = true) {
    QuantRows src{};
    src.rows[0] = rows;
    src.seg_nkb = static_cast<int>(cols / 32);
    quantize_x_rows(ws, x, ldx, src, m, cols, stream, padded);
}

// Splits of K so that the grid fills the GPU (about 4 CTAs per SM), each at least two pipeline
// steps (of step_chunks chunks) long and a whole number of the type's blocks (cpb chunks), within
// the partial-sum buffer. Depends on the SM count and the call's shape only.
int splits_for(const Int8Workspace& ws, int rows, int nkb, int n_tiles, int mats, int cpb, int step_chunks,
               int* kb_split) {
    const int row_ctas = (rows + int8mm::kCtaRows - 1) / int8mm::kCtaRows;
    int splits = ws.forced_split() > 0 ? ws.forced_split()
                                       : std::max(1, (4 * ws.sm_count() + row_ctas - 1) / row_ctas);
    // At least two pipeline steps a split: shorter ones are mostly pipeline fill.
    splits = std::min(splits, std::max(1, nkb / (2 * step_chunks)));
    const int64_t per_split = static_cast<int64_t>(mats) * n_tiles * kTileTok * rows;
    BG_CHECK(per_split <= static_cast<int64_t>(kInt8PartialFloats));
    splits = static_cast<int>(std::min<int64_t>(splits, static_cast<int64_t>(kInt8PartialFloats) / per_split));
    splits = std::max(1, std::min(splits, nkb / cpb));
    *kb_split = ((nkb + splits - 1) / splits + cpb - 1) / cpb * cpb;
    return (nkb + *kb_split - 1) / *kb_split;
}

// What both kernels' parameters share: the matrix (and up, for gate/up: one pass over both), its
// rows and K blocks, the pass's tokens and int8 activations.
template <class P>
P pass_params(const uint8_t* w, uint64_t stride, const DeviceMat* up, int rows, int64_t cols, int m, const int8_t* xq,
              const float* xd, const float2* xs) {
    P p{};
    p.w[0] = w;
    p.stride[0] = stride;
    p.w[1] = up ? up->data : w;
    p.stride[1] = up ? up->row_stride : stride;
    p.rows = rows;
    p.nkb = static_cast<int>(cols / 32);
    p.m = m;
    p.xq = xq;
    p.xd = xd;
    p.xs = xs;
    return p;
}

// The MMA kernel's: the shared part and the workspace's split-K partials.
int8mm::MmaParams mma_params(const Int8Workspace& ws, const uint8_t* w, uint64_t stride, const DeviceMat* up, int rows,
                             int64_t cols, int m, const int8_t* xq, const float* xd, const float2* xs) {
    auto p = pass_params<int8mm::MmaParams>(w, stride, up, rows, cols, m, xq, xd, xs);
    p.part = ws.partials();
    p.counters = ws.counters();
    return p;
}

// The epilogues both kernels share: gate/up's SwiGLU and quantisation of h for down, and down's
// store (or scatter to out_rows).
template <class P>
void gate_up_epilogue(P& p, const Int8Workspace& ws, float limit, bg::SwigluClamp form) {
    p.epilogue = int8mm::kGateUpQuant;
    p.limit = limit;
    p.llama = form == bg::SwigluClamp::kLlamaCpp ? 1 : 0;
    p.hq = ws.hq();
    p.hd = ws.hd();
    p.hs = ws.hs();
}
template <class P>
void store_epilogue(P& p, float* y, int64_t ldy, const int32_t* out_rows) {
    p.epilogue = int8mm::kStore;
    p.y = y;
    p.ldy = ldy;
    p.out_rows = out_rows;
}

// Whether a pass of m tokens goes through the GEMV kernel.
bool gemv_pass(const Int8Workspace& ws, int64_t m) { return m <= ws.gemv_tokens(); }

// The GEMV parameters of a call: warps per row chosen so the grid holds about the workspace's
// warps an SM (each warp still at least one whole span).
int8mm::GemvParams gemv_params(const Int8Workspace& ws, const uint8_t* w, uint64_t stride, const DeviceMat* up, int rows,
                               int64_t cols, int m, const int8_t* xq, const float* xd, const float2* xs) {
    auto p = pass_params<int8mm::GemvParams>(w, stride, up, rows, cols, m, xq, xd, xs);
    const int64_t want_warps = static_cast<int64_t>(ws.gemv_warps_per_sm()) * ws.sm_count();
    p.wpr = 1;
    while (p.wpr < int8mm::kGemvWarps && static_cast<int64_t>(rows) * p.wpr < want_warps &&
           int8mm::kGemvSpanChunks * p.wpr * 2 <= p.nkb)
        p.wpr *= 2;
    return p;
}

void launch_gemv(GgmlType type, const int8mm::GemvParams& p, int mats, cudaStream_t stream) {
    const int ntok = p.m <= 1 ? 1 : p.m <= 2 ? 2 : p.m <= 4 ? 4 : 8;
    qtypes::visit(type, [&](auto traits) { int8mm::launch_gemv<decltype(traits)>(p, ntok, mats, stream); });
    BG_CUDA_CHECK_LAUNCH();
}

// Splits K for the call (splits_for) and launches the type's kernel.
void launch_mma(const Int8Workspace& ws, GgmlType type, int8mm::MmaParams& p, int n_tiles, int mats,
                cudaStream_t stream) {
    qtypes::visit(type, [&](auto traits) {
        using T = decltype(traits);
        const int splits = splits_for(ws, p.rows, p.nkb, n_tiles, mats, int8mm::chunks_per_block<T>(),
                                      int8mm::step_chunks<T>(), &p.kb_split);
        int8mm::launch_mma<T>(p, n_tiles, mats, splits, stream);
    });
    BG_CUDA_CHECK_LAUNCH();
}

}  // namespace

Int8Workspace::Int8Workspace(int64_t max_cols, int64_t max_ff) : max_cols_(max_cols), max_ff_(max_ff) {
    BG_CHECK(max_cols > 0 && max_cols % 32 == 0 && max_ff >= 0 && max_ff % 32 == 0);
    sm_count_ = current_sm_count();  // the green context's SMs under --sm-limit
    const uint64_t tok = static_cast<uint64_t>(kMaxTiles) * kTileTok;
    auto take = [&](uint64_t bytes) {
        void* p = nullptr;
        BG_CUDA_CHECK(cudaMalloc(&p, std::max<uint64_t>(bytes, 1)));
        BG_CUDA_CHECK(cudaMemset(p, 0, std::max<uint64_t>(bytes, 1)));
        bytes_ += std::max<uint64_t>(bytes, 1);
        return p;
    };
    xq_ = static_cast<int8_t*>(take(tok * max_cols));
    xd_ = static_cast<float*>(take(tok * (max_cols / 32) * sizeof(float)));
    xs_ = static_cast<float2*>(take(tok * (max_cols / 32) * sizeof(float2)));
    if (max_ff > 0) {
        hq_ = static_cast<int8_t*>(take(tok * max_ff));
        hd_ = static_cast<float*>(take(tok * (max_ff / 32) * sizeof(float)));
        hs_ = static_cast<float2*>(take(tok * (max_ff / 32) * sizeof(float2)));
    }
    part_ = static_cast<float*>(take(kInt8PartialFloats * sizeof(float)));
    counters_ = static_cast<int*>(take(kInt8Counters * sizeof(int)));
    BG_CHECK(bytes_ == int8_workspace_bytes(max_cols, max_ff));
}

void Int8Workspace::set_gemv_tokens(int n) {
    BG_CHECK_MSG(n >= 0 && n <= int8mm::kGemvMaxTok, "int8 GEMV: passes of 0..2 tokens");
    gemv_tokens_ = n;
}

void Int8Workspace::set_gemv_warps_per_sm(int n) {
    BG_CHECK_MSG(n >= 1 && n <= 64, "int8 GEMV: 1..64 warps an SM");
    gemv_warps_per_sm_ = n;
}

Int8Workspace::~Int8Workspace() {
    for (void* p : {static_cast<void*>(xq_), static_cast<void*>(xd_), static_cast<void*>(xs_), static_cast<void*>(hq_),
                    static_cast<void*>(hd_), static_cast<void*>(hs_), static_cast<void*>(part_),
                    static_cast<void*>(counters_)})
        if (p) cudaFree(p);
}

void int8_matmul(Int8Workspace& ws, const DeviceMat& W, const float* x, int64_t ldx, int64_t n_tok, float* y,
                 int64_t ldy, cudaStream_t stream) {
    check_int8_weights(W, ws.max_cols());
    BG_CHECK(n_tok <= 1 || (ldx >= W.cols && ldy >= W.rows));
    if (W.rows == 0 || n_tok <= 0) return;
    ldy = std::max<int64_t>(ldy, W.rows);
    if (gemv_pass(ws, n_tok)) {
        const int m = static_cast<int>(n_tok);
        quantize_x(ws, x, ldx, nullptr, m, W.cols, stream, false);
        int8mm::GemvParams p =
            gemv_params(ws, W.data, W.row_stride, nullptr, static_cast<int>(W.rows), W.cols, m, ws.xq(), ws.xd(), ws.xs());
        store_epilogue(p, y, ldy, nullptr);
        launch_gemv(W.type, p, 1, stream);
        return;
    }
    const int pass = pass_tokens(W.type, 1);
    for (int64_t j0 = 0; j0 < n_tok; j0 += pass) {
        const int m = static_cast<int>(std::min<int64_t>(pass, n_tok - j0));
        const int n_tiles = tiles_for(m);
        quantize_x(ws, x + j0 * ldx, ldx, nullptr, m, W.cols, stream);
        // Rows in chunks whose partials (one split's at least) and row-tile counters fit the
        // workspace: the output head's 129,280 rows x 64 tokens are 8.3 M floats.
        const int64_t chunk_rows = std::min<int64_t>(
            static_cast<int64_t>(kInt8PartialFloats) / (n_tiles * kTileTok) / int8mm::kCtaRows * int8mm::kCtaRows,
            static_cast<int64_t>(kInt8Counters) * int8mm::kCtaRows);
        for (int64_t r0 = 0; r0 < W.rows; r0 += chunk_rows) {
            const int rows = static_cast<int>(std::min<int64_t>(chunk_rows, W.rows - r0));
            int8mm::MmaParams p = mma_params(ws, W.data + static_cast<uint64_t>(r0) * W.row_stride, W.row_stride,
                                             nullptr, rows, W.cols, m, ws.xq(), ws.xd(), ws.xs());
            store_epilogue(p, y + j0 * ldy + r0, ldy, nullptr);
            launch_mma(ws, W.type, p, n_tiles, 1, stream);
        }
    }
}

namespace {

// One matrix (or a part of one) of a segmented GEMV: rows of cols columns at w, times the
// activations from chunk x_chunk, into y.
struct GemvTarget {
    GgmlType type;
    const uint8_t* w;
    uint64_t stride;
    int rows;
    float* y;
    int64_t ldy;
    int x_chunk;
};

// GEMVs of targets of one width (cols) whose activations (m tokens) are already quantised in
// the workspace: runs of up to kGemvMaxSegs targets of one type in one launch where each
// target's rows are whole CTAs of it, else a launch a target.
void launch_gemv_targets(Int8Workspace& ws, const GemvTarget* t, int n, int64_t cols, int m, cudaStream_t stream) {
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && j - i < int8mm::kGemvMaxSegs && t[j].type == t[i].type) ++j;
        int total = 0;
        for (int k = i; k < j; ++k) total += t[k].rows;
        int8mm::GemvParams p = gemv_params(ws, t[i].w, t[i].stride, nullptr, total, cols, m, ws.xq(), ws.xd(), ws.xs());
        const int cta_rows = int8mm::kGemvWarps / p.wpr;
        bool whole = j - i > 1;
        for (int k = i; k < j; ++k) whole = whole && t[k].rows % cta_rows == 0;
        if (whole) {
            store_epilogue(p, t[i].y, t[i].ldy, nullptr);
            p.n_seg = j - i;
            int row0 = 0;
            for (int k = i; k < j; ++k) {
                p.seg_row0[k - i] = row0;
                p.seg[k - i] = {{t[k].w, t[k].w}, {t[k].stride, t[k].stride}, t[k].y, t[k].ldy, nullptr, t[k].x_chunk};
                row0 += t[k].rows;
            }
            p.seg_row0[j - i] = row0;
            launch_gemv(t[i].type, p, 1, stream);
            i = j;
            continue;
        }
        // One target: its own launch on the shared activations.
        const int64_t off = static_cast<int64_t>(t[i].x_chunk);
        p = gemv_params(ws, t[i].w, t[i].stride, nullptr, t[i].rows, cols, m, ws.xq() + off * kTileTok * 32,
                        ws.xd() + off * kTileTok, ws.xs() + off * kTileTok);
        store_epilogue(p, t[i].y, t[i].ldy, nullptr);
        launch_gemv(t[i].type, p, 1, stream);
        ++i;
    }
}

// The GEMV's activations of one token take kTileTok columns of the workspace a chunk, so x's
// whole width fits where it is at most kMaxTiles times the widest matrix.
void check_gemv_width(const Int8Workspace& ws, int64_t cols) {
    BG_CHECK_MSG(cols % 32 == 0 && cols <= ws.max_cols() * int8mm::kMaxTiles,
                 "int8 GEMV: activations wider than the workspace");
}

}  // namespace

void int8_matmul_grouped(Int8Workspace& ws, const DeviceMat& W, int64_t groups, const float* x, int64_t ldx,
                         int64_t n_tok, float* y, int64_t ldy, cudaStream_t stream) {
    BG_CHECK(groups >= 1 && W.rows % groups == 0);
    const int64_t group_rows = W.rows / groups;
    if (!gemv_pass(ws, n_tok) || groups == 1) {
        for (int64_t g = 0; g < groups; ++g) {
            DeviceMat Wg = W;
            Wg.data = W.data + static_cast<uint64_t>(g * group_rows) * W.row_stride;
            Wg.rows = group_rows;
            int8_matmul(ws, Wg, x + g * W.cols, ldx, n_tok, y + g * group_rows, ldy, stream);
        }
        return;
    }
    check_int8_weights(W, ws.max_cols());
    const int64_t cols = groups * W.cols;
    check_gemv_width(ws, cols);
    BG_CHECK(n_tok <= 1 || (ldx >= cols && ldy >= W.rows));
    BG_CHECK(groups <= 64);
    if (W.rows == 0 || n_tok <= 0) return;
    const int m = static_cast<int>(n_tok);
    quantize_x(ws, x, ldx, nullptr, m, cols, stream, false);
    GemvTarget t[64];
    for (int64_t g = 0; g < groups; ++g)
        t[g] = {W.type, W.data + static_cast<uint64_t>(g * group_rows) * W.row_stride, W.row_stride,
                static_cast<int>(group_rows), y + g * group_rows, std::max<int64_t>(ldy, W.rows),
                static_cast<int>(g * W.cols / 32)};
    launch_gemv_targets(ws, t, static_cast<int>(groups), W.cols, m, stream);
}

void int8_matmul_many(Int8Workspace& ws, const DeviceMat* W, int n, const float* x, int64_t ldx, int64_t n_tok,
                      float* const* y, const int64_t* ldy, cudaStream_t stream) {
    BG_CHECK(n >= 1 && n <= 16);
    for (int i = 0; i < n; ++i) BG_CHECK_MSG(W[i].cols == W[0].cols, "int8_matmul_many: matrices of one width");
    if (!gemv_pass(ws, n_tok) || n == 1) {
        for (int i = 0; i < n; ++i) int8_matmul(ws, W[i], x, ldx, n_tok, y[i], ldy[i], stream);
        return;
    }
    for (int i = 0; i < n; ++i) {
        check_int8_weights(W[i], ws.max_cols());
        BG_CHECK(n_tok <= 1 || ldy[i] >= W[i].rows);
    }
    BG_CHECK(n_tok <= 1 || ldx >= W[0].cols);
    if (n_tok <= 0) return;
    const int m = static_cast<int>(n_tok);
    quantize_x(ws, x, ldx, nullptr, m, W[0].cols, stream, false);
    GemvTarget t[16];
    int nt = 0;
    for (int i = 0; i < n; ++i)
        if (W[i].rows > 0)
            t[nt++] = {W[i].type, W[i].data, W[i].row_stride, static_cast<int>(W[i].rows), y[i],
                       std::max<int64_t>(ldy[i], W[i].rows), 0};
    launch_gemv_targets(ws, t, nt, W[0].cols, m, stream);
}

namespace {

// The GEMV passes of one expert at m tokens: gate/up (SwiGLU, h in FP32 through the partials, each
// 32-row block quantised for down) and down (stored to y's out_rows). int8_expert_ffn's, and each
// segment's warps a row in int8_expert_ffn_batch.
void expert_gemv_params(const Int8Workspace& ws, const ExpertMats& e, int m, float limit, bg::SwigluClamp form, float* y,
                        int64_t ldy, const int32_t* out_rows, int8mm::GemvParams* gu, int8mm::GemvParams* dn) {
    const int E = static_cast<int>(e.gate.cols), F = static_cast<int>(e.gate.rows);
    *gu = gemv_params(ws, e.gate.data, e.gate.row_stride, &e.up, F, E, m, ws.xq(), ws.xd(), ws.xs());
    gate_up_epilogue(*gu, ws, limit, form);
    gu->h = ws.partials();
    gu->counters = ws.counters();
    *dn = gemv_params(ws, e.down.data, e.down.row_stride, nullptr, E, F, m, ws.hq(), ws.hd(), ws.hs());
    store_epilogue(*dn, y, std::max<int64_t>(ldy, E), out_rows);
}

}  // namespace

void int8_expert_ffn(Int8Workspace& ws, const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows,
                     int64_t n_tok, float limit, bg::SwigluClamp form, float* y, int64_t ldy, const int32_t* out_rows,
                     cudaStream_t stream) {
    const int64_t n_embd = e.gate.cols, n_ff = e.gate.rows;
    BG_CHECK_MSG(e.up.rows == n_ff && e.up.cols == n_embd && e.down.rows == n_embd && e.down.cols == n_ff,
                 "int8_expert_ffn: gate/up are n_ff rows of n_embd, down n_embd rows of n_ff");
    BG_CHECK_MSG(n_ff > 0 && n_ff <= ws.max_ff(), "int8_expert_ffn: n_ff larger than the workspace's max_ff");
    BG_CHECK_MSG(e.gate.type == e.up.type, "int8_expert_ffn: gate and up share one pass, so one type");
    check_int8_weights(e.gate, ws.max_cols());
    check_int8_weights(e.up, ws.max_cols());
    check_int8_weights(e.down, ws.max_cols());
    BG_CHECK(ldx >= n_embd || n_tok <= 1);
    BG_CHECK(ldy >= n_embd || (n_tok <= 1 && !out_rows));
    if (n_tok <= 0) return;
    const int ff = static_cast<int>(n_ff), E = static_cast<int>(n_embd);
    if (gemv_pass(ws, n_tok)) {
        // h in FP32 goes through the partials buffer (the GEMV has no split-K partials), each
        // 32-row block of it quantised by the gate/up kernel's last warp on it.
        BG_CHECK(static_cast<uint64_t>(n_tok) * static_cast<uint64_t>(ff) <= kInt8PartialFloats &&
                 ff / 32 <= kInt8Counters);
        const int m = static_cast<int>(n_tok);
        quantize_x(ws, x, ldx, rows, m, n_embd, stream, false);
        int8mm::GemvParams gu, dn;
        expert_gemv_params(ws, e, m, limit, form, y, ldy, out_rows, &gu, &dn);
        launch_gemv(e.gate.type, gu, 2, stream);
        launch_gemv(e.down.type, dn, 1, stream);
        return;
    }
    // h is quantised in the gate/up pass's fragment order, so both launches take the same tokens.
    const int pass = std::min(pass_tokens(e.gate.type, 2), pass_tokens(e.down.type, 1));
    for (int64_t j0 = 0; j0 < n_tok; j0 += pass) {
        const int m = static_cast<int>(std::min<int64_t>(pass, n_tok - j0));
        const int n_tiles = tiles_for(m);
        if (rows) quantize_x(ws, x, ldx, rows + j0, m, n_embd, stream);
        else quantize_x(ws, x + j0 * ldx, ldx, nullptr, m, n_embd, stream);

        int8mm::MmaParams gu =
            mma_params(ws, e.gate.data, e.gate.row_stride, &e.up, ff, E, m, ws.xq(), ws.xd(), ws.xs());
        gate_up_epilogue(gu, ws, limit, form);
        launch_mma(ws, e.gate.type, gu, n_tiles, 2, stream);

        int8mm::MmaParams dn =
            mma_params(ws, e.down.data, e.down.row_stride, nullptr, E, ff, m, ws.hq(), ws.hd(), ws.hs());
        store_epilogue(dn, out_rows ? y : y + j0 * ldy, std::max<int64_t>(ldy, n_embd),
                       out_rows ? out_rows + j0 : nullptr);
        launch_mma(ws, e.down.type, dn, n_tiles, 1, stream);
    }
}

namespace {

// Whether calls a and b can share the GEMV launches of int8_expert_ffn_batch.
bool gemv_batchable(const Int8Workspace& ws, const ExpertCall& a) {
    const int64_t E = a.mats.gate.cols, F = a.mats.gate.rows;
    // Segments are whole CTAs (at most 8 rows) and h's blocks whole 32 rows of one expert.
    return a.m >= 1 && gemv_pass(ws, a.m) && F % 32 == 0 && E % int8mm::kGemvWarps == 0 && F <= ws.max_ff() &&
           E <= ws.max_cols() && a.mats.gate.type == a.mats.up.type;
}
bool same_gemv_pass(const ExpertCall& a, const ExpertCall& b) {
    const ExpertMats &p = a.mats, &q = b.mats;  // up and down follow gate's shape (checked at launch)
    return a.m == b.m && p.gate.rows == q.gate.rows && p.gate.cols == q.gate.cols && p.gate.type == q.gate.type &&
           p.up.type == q.up.type && p.down.type == q.down.type;
}

// The experts calls[at[0..n)] (gemv_batchable, same_gemv_pass, n <= kGemvMaxSegs) in three launches.
void gemv_experts(Int8Workspace& ws, const ExpertCall* calls, const int64_t* at, int n, const float* x, int64_t ldx,
                  float limit, bg::SwigluClamp form, float* y, int64_t ldy, cudaStream_t stream) {
    const ExpertMats& e0 = calls[at[0]].mats;
    const int E = static_cast<int>(e0.gate.cols), F = static_cast<int>(e0.gate.rows);
    const int m = static_cast<int>(calls[at[0]].m);
    for (int s = 0; s < n; ++s) {
        const ExpertMats& e = calls[at[s]].mats;
        BG_CHECK_MSG(e.up.rows == F && e.up.cols == E && e.down.rows == E && e.down.cols == F,
                     "int8_expert_ffn_batch: gate/up are n_ff rows of n_embd, down n_embd rows of n_ff");
        check_int8_weights(e.gate, ws.max_cols());
        check_int8_weights(e.up, ws.max_cols());
        check_int8_weights(e.down, ws.max_cols());
    }
    // h of every expert in FP32 through the partials, its blocks counted and quantised at the
    // launch's row numbering: expert s's h is chunks s * F / 32 on, its x chunks s * E / 32 on.
    BG_CHECK(static_cast<uint64_t>(m) * n * F <= kInt8PartialFloats && n * F / 32 <= kInt8Counters);
    QuantRows src{};
    for (int s = 0; s < n; ++s) src.rows[s] = calls[at[s]].rows;
    src.seg_nkb = E / 32;
    quantize_x_rows(ws, x, ldx, src, m, static_cast<int64_t>(n) * E, stream, false);

    // The warps a row each expert would have alone: its FP32 sums in the same order.
    int8mm::GemvParams gu, dn;
    expert_gemv_params(ws, e0, m, limit, form, y, ldy, nullptr, &gu, &dn);
    BG_CHECK(F % (int8mm::kGemvWarps / gu.wpr) == 0 && E % (int8mm::kGemvWarps / dn.wpr) == 0);
    gu.rows = n * F;
    dn.rows = n * E;
    gu.n_seg = dn.n_seg = n;
    for (int s = 0; s < n; ++s) {
        const ExpertCall& c = calls[at[s]];
        gu.seg_row0[s] = s * F;
        gu.seg[s] = {{c.mats.gate.data, c.mats.up.data}, {c.mats.gate.row_stride, c.mats.up.row_stride}, nullptr, 0,
                     nullptr, s * E / 32};
        dn.seg_row0[s] = s * E;
        dn.seg[s] = {{c.mats.down.data, c.mats.down.data}, {c.mats.down.row_stride, c.mats.down.row_stride}, y,
                     std::max<int64_t>(ldy, E), c.out_rows, s * F / 32};
    }
    gu.seg_row0[n] = n * F;
    dn.seg_row0[n] = n * E;
    launch_gemv(e0.gate.type, gu, 2, stream);
    launch_gemv(e0.down.type, dn, 1, stream);
}

}  // namespace

void int8_expert_ffn_batch(Int8Workspace& ws, const ExpertCall* calls, int64_t n, const float* x, int64_t ldx,
                           float limit, bg::SwigluClamp form, float* y, int64_t ldy, cudaStream_t stream) {
    BG_CHECK(n >= 0 && n <= kInt8ExpertBatchCalls);
    bool taken[kInt8ExpertBatchCalls] = {};
    for (int64_t i = 0; i < n; ++i) {
        if (taken[i]) continue;
        const ExpertCall& a = calls[i];
        int64_t at[int8mm::kGemvMaxSegs];
        int k = 0;
        if (gemv_batchable(ws, a))
            for (int64_t j = i; j < n && k < int8mm::kGemvMaxSegs; ++j)
                if (!taken[j] && (j == i || same_gemv_pass(a, calls[j]))) at[k++] = j, taken[j] = true;
        if (k >= 2) {
            gemv_experts(ws, calls, at, k, x, ldx, limit, form, y, ldy, stream);
            continue;
        }
        taken[i] = true;
        int8_expert_ffn(ws, a.mats, x, ldx, a.rows, a.m, limit, form, y, ldy, a.out_rows, stream);
    }
}

void int8_quantize_for_test(Int8Workspace& ws, const float* x, int64_t ldx, int64_t n_tok, int64_t cols, int8_t* q_host,
                            float* d_host, cudaStream_t stream) {
    BG_CHECK(n_tok > 0 && n_tok <= kMaxTiles * kTileTok && cols % 32 == 0 && cols <= ws.max_cols());
    const int m = static_cast<int>(n_tok), n_tiles = tiles_for(m), nkb = static_cast<int>(cols / 32);
    quantize_x(ws, x, ldx, nullptr, m, cols, stream);
    const int64_t tok_pass = n_tiles * kTileTok;
    std::vector<int8_t> frag(static_cast<size_t>(tok_pass * cols));
    std::vector<float> d(static_cast<size_t>(tok_pass * nkb));
    BG_CUDA_CHECK(cudaMemcpyAsync(frag.data(), ws.xq(), frag.size(), cudaMemcpyDeviceToHost, stream));
    BG_CUDA_CHECK(cudaMemcpyAsync(d.data(), ws.xd(), d.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    BG_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t kb = 0; kb < nkb; ++kb) {
            d_host[t * nkb + kb] = d[static_cast<size_t>(kb * tok_pass + t)];
            for (int k = 0; k < 32; ++k)
                q_host[t * cols + kb * 32 + k] =
                    frag[static_cast<size_t>(int8mm::frag_byte(static_cast<int>(kb), static_cast<int>(t), k, n_tiles))];
        }
}

}  // namespace bg::cuda
