// Independent float64 reference of the whole deepseek41 forward pass, for tests only.
//
// Written from shared/DSV41.md and from reading llama.cpp's deepseek41/deepseek4 graphs and
// build_moe_ffn/build_ffn; it shares no code with the engine's forward path (only the GGUF
// reader and the dequantisation, which are tested on their own). Metadata is read here, with
// llama.cpp's semantics, so the engine can be checked against what llama.cpp would load.
// Plain loops in double, clarity over speed: meant for the tiny synthetic models.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gguf/gguf.h"

namespace ref {

// DeepSeek's form clamps the gate from above before SiLU and the up projection to
// [-limit, limit]; llama.cpp's generic path (every arch but deepseek4) clamps silu(gate) from
// above instead: min(silu(gate), limit) * clamp(up).
enum class SwigluForm { kDeepSeek, kLlamaCpp };

// Where a compressed layer's top-k selection comes from when its index source and its key
// owner differ (the tiny fixture's layer 4: kv source and key owner 4, ratio 1; last index
// source 2, ratio 2; in the real layout the two readings coincide).
// kSourceSelection (default): the rows the index source selected for itself (scored against its
// own key owner's keys, at its ratio), reused as row numbers of this layer's stream: DSV41.md's
// "reuses the selection of the last index source" and llama.cpp's `dsv41_topk_source`.
// kConsumerKeys: the index source's query and head weights scored against this layer's key
// owner's keys over this layer's visible rows (what "reads the last key owner" would suggest).
enum class IndexSelection { kSourceSelection, kConsumerKeys };

struct Dsv41Options {
    SwigluForm swiglu = SwigluForm::kDeepSeek;
    IndexSelection selection = IndexSelection::kSourceSelection;
};

enum class RopeScaling { kNone, kLinear, kYarn };

// Hyper-parameters as llama.cpp would load them (exposed so tests can check the key semantics).
struct Dsv41Hparams {
    int64_t n_layer_all = 0, n_layer = 0;  // n_layer: main layers (MTP blocks excluded)
    int64_t n_embd = 0, n_vocab = 0, n_head = 0, head_dim = 0, rope_dims = 0;
    int64_t q_lora_rank = 0, window = 0, o_groups = 0, o_lora_rank = 0;
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
    int64_t idx_n_head = 0, idx_head_dim = 0, idx_top_k = 0;
    int64_t hc = 4, sinkhorn_iters = 0;
    double hc_eps = 0, rms_eps = 0;
    double rope_base = 0, compress_rope_base = 0;
    RopeScaling rope_scaling = RopeScaling::kLinear;
    double rope_factor = 1, yarn_beta_fast = 32, yarn_beta_slow = 1;
    int64_t yarn_n_ctx_orig = 0;
    bool weights_norm = true;
    double weights_scale = 1;
    std::vector<int64_t> compress_ratio;              // [n_layer]
    std::vector<double> clamp_exp, clamp_shexp;      // [n_layer]
    // Engram
    std::vector<int64_t> engram_layers;
    int64_t engram_heads = 0, engram_dim = 0, engram_max_ngram = 0;
    std::vector<uint64_t> engram_mult, engram_primes, engram_offsets, engram_token_map;
    uint64_t engram_pad = 0;
};

// llama.cpp build_moe_ffn with sqrt-softplus gating: p = sqrt(softplus(logit)); choose the top
// k of p + bias (the bias only selects); weights are the chosen p, divided by max(sum, 2^-14)
// only when `norm`, times `scale` only when it is neither 0 nor 1.
struct Dsv41Route {
    std::vector<int32_t> ids;
    std::vector<double> weights;
};
Dsv41Route dsv41_route(const std::vector<double>& logits, const std::vector<double>& bias, int64_t k,
                       bool norm, double scale);

// One SwiGLU element with clamp `limit`; no clamp when limit <= 1e-6 (llama.cpp's threshold).
double dsv41_swiglu(double gate, double up, double limit, SwigluForm form);

// Rope angle of pair i (of n_dims) at pos; `scaled` false means base only (ratio-0 layers).
double dsv41_rope_theta(const Dsv41Hparams& hp, double base, bool scaled, int64_t n_dims, int64_t pos,
                        int64_t i);

// Hyper-parameters of the file at `path` (throws std::runtime_error for what llama.cpp refuses).
Dsv41Hparams dsv41_read_hparams(const bg::gguf::Reader& r);

class Dsv41Reference {
public:
    explicit Dsv41Reference(const std::string& path, Dsv41Options opt = {});
    ~Dsv41Reference();
    Dsv41Reference(const Dsv41Reference&) = delete;
    Dsv41Reference& operator=(const Dsv41Reference&) = delete;

    const Dsv41Hparams& hparams() const { return hp_; }

    // Causal forward over the whole sequence from position 0: logits of every position.
    std::vector<std::vector<double>> logits(const std::vector<int32_t>& tokens) const;
    // Greedy continuation: n_gen tokens (ties to the lower id), each from a fresh full forward.
    std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int64_t n_gen) const;

    struct Mat {
        int64_t rows = 0, cols = 0;
        std::vector<float> w;  // [rows][cols]
        bool empty() const { return w.empty(); }
        std::vector<double> mul(const std::vector<double>& x) const;
    };

private:
    struct Layer;
    Mat load(const std::string& name, bool required = true) const;
    // Rows [r0, r0+n) of a tensor seen as [rows][ne0] (for a 3-D tensor: all its rows in order).
    Mat load_rows(const std::string& name, int64_t r0, int64_t n) const;
    const Mat& expert(int64_t layer, int which, int64_t e) const;  // which: 0 gate, 1 up, 2 down
    // Row `row` of layer l's Engram table: a typed table's row dequantised, or a fork-fp8 pair's
    // (blk.l.engram_embd_scale.weight present) decoded here in double from the FP8-E4M3 bytes
    // and their E8M0 scales.
    std::vector<double> engram_row(int64_t l, int64_t row) const;

    Dsv41Options opt_;
    bg::gguf::Reader r_;
    std::vector<int> fds_;  // one per file of the model (every shard of a split one)
    Dsv41Hparams hp_;
    Mat output_, output_norm_;
    std::vector<Layer> layers_;
    mutable std::map<std::tuple<int64_t, int, int64_t>, Mat> expert_cache_;
};

// How far an engine's logits ([positions][n_vocab], row-major) are from the reference's: per
// position the largest absolute difference relative to the largest reference logit, maximised
// over positions.
inline double max_rel_diff(const std::vector<std::vector<double>>& want, const std::vector<float>& got, int64_t n_vocab) {
    double worst = 0;
    for (size_t t = 0; t < want.size(); ++t) {
        double scale = 0, diff = 0;
        for (int64_t v = 0; v < n_vocab; ++v) {
            scale = std::max(scale, std::fabs(want[t][v]));
            diff = std::max(diff, std::fabs(want[t][v] - got[t * n_vocab + v]));
        }
        worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
    return worst;
}

}  // namespace ref
