// The parameter types of the backend ops (backend/ops.h): weight views, rope, SwiGLU clamp, mHC
// mix, router weighting and routing policies. Every backend computes them as documented here;
// the CPU kernels (cpu/ops.h) are the float reference.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tensor/ggml_types.h"
#include "util/check.h"
#include "util/named_enum.h"

namespace bg {

// A backend's event, opaque to the caller: an Ops queue waits for it (Ops::wait_event). Empty
// where there is nothing to wait for.
struct DeviceEvent {
    const void* handle = nullptr;
    explicit operator bool() const { return handle != nullptr; }
};

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
    MatView slice_rows(int64_t r0, int64_t n) const {
        BG_CHECK(r0 >= 0 && n >= 0 && r0 + n <= rows);
        MatView v = *this;
        v.data = data ? data + static_cast<uint64_t>(r0) * row_stride : nullptr;
        v.image_offset = image_offset + static_cast<uint64_t>(r0) * row_stride;
        v.rows = n;
        return v;
    }
    // Columns [c0, c0+n) of every row as their own view (rows keep their stride): c0 and n whole
    // blocks of the type.
    MatView slice_cols(int64_t c0, int64_t n) const {
        BG_CHECK(c0 >= 0 && n > 0 && c0 + n <= cols && c0 % type_traits(type).block_elems == 0 &&
                 n % type_traits(type).block_elems == 0);
        const uint64_t skip = row_bytes(type, c0);
        MatView v = *this;
        v.data = data ? data + skip : nullptr;
        v.image_offset = image_offset + skip;
        v.cols = n;
        return v;
    }
};

// One expert's three matrices: gate, up (n_ff rows of n_embd) and down (n_embd rows of n_ff).
struct ExpertMats {
    MatView gate, up, down;
    // Hidden units [f0, f0+n) alone: those rows of gate and up, those columns of down. The
    // expert's output is the sum of its parts' outputs (each hidden unit's SwiGLU is its own), so
    // one expert can be split between two backends (runtime/decode_split.h). n and f0 whole blocks
    // of down's type.
    ExpertMats hidden_rows(int64_t f0, int64_t n) const {
        return {gate.slice_rows(f0, n), up.slice_rows(f0, n), down.slice_cols(f0, n)};
    }
};

// One routed expert on m gathered tokens, as Ops::expert_ffn takes it: x's rows rows[j] in,
// out's rows out_rows[j] out (j < m; backend memory).
// Token ids a greedy choice must not take (the end-of-generation ids under --ignore-eos): their
// logits count as -inf, as the host's choice sets them. Passed by value (a kernel argument), so
// at most kMax; a caller with more takes the logits to the host instead.
struct TokenBan {
    static constexpr int kMax = 16;
    int32_t ids[kMax] = {};
    int n = 0;
};

struct ExpertCall {
    ExpertMats mats;
    const int32_t* rows;
    int64_t m;
    const int32_t* out_rows;
};

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

// SwiGLU with clamp, one function for both published forms:
//  kDeepSeek:  g = min(gate, limit); u = clamp(up, -limit, limit); out = silu(g) * u
//  kLlamaCpp:  out = min(silu(gate), limit) * clamp(up, -limit, limit)
// limit <= kSwigluNoClamp means no clamp at all: out = silu(gate) * up (llama.cpp clamps only
// when the limit is > 1e-6).
constexpr float kSwigluNoClamp = 1e-6f;
enum class SwigluClamp { kDeepSeek, kLlamaCpp };
template <>
struct EnumNames<SwigluClamp> {
    static constexpr NamedValue<SwigluClamp> kNames[] = {{SwigluClamp::kDeepSeek, "deepseek"},
                                                         {SwigluClamp::kLlamaCpp, "llamacpp"}};
    static constexpr const char* kWhat = "--swiglu-clamp";
};

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

// How the chosen experts' p become their weights (llama.cpp build_moe_ffn): divided by
// max(sum of the chosen p, 6.1035e-5) when `norm` (expert_weights_norm), then times `scale`
// (1 where the file's expert_weights_scale is 0 or 1).
struct RouteWeighting {
    bool norm = true;
    float scale = 1.0f;
    // The factor each chosen p is multiplied by, given their sum.
    float factor(float sum_p) const { return norm ? scale / std::max(sum_p, 6.1035e-5f) : scale; }
};

// Routing policies: which k experts a token uses, as a pure function of the router's scores
// and the fixed resident set (never of the tier an expert sits in), except hot-pool, ours, an
// interpretation of the seed, which also reads the hot set (the experts in VRAM now);
// cpu/routing.h says how.
enum class RoutingPolicy { kExact, kPinnedTop1, kResidentOnly, kHotPool };
template <>
struct EnumNames<RoutingPolicy> {
    static constexpr NamedValue<RoutingPolicy> kNames[] = {{RoutingPolicy::kExact, "exact"},
                                                           {RoutingPolicy::kPinnedTop1, "pinned-top1"},
                                                           {RoutingPolicy::kResidentOnly, "resident-only"},
                                                           {RoutingPolicy::kHotPool, "hot-pool"}};
    static constexpr const char* kWhat = "--routing";
};

}  // namespace bg
