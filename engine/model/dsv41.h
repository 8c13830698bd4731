// The deepseek41 architecture (DeepSeek-V4.1-Flash): hyper-parameters from GGUF metadata, the
// tensor table checked against them, and the weights bound for the forward pass.
// Shapes are in ggml order ({ne0, ne1, ...}; ne0 contiguous). See ../shared/DSV41.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/ggml_types.h"

namespace bg::dsv41 {

constexpr const char* kArch = "deepseek41";
// expert_gating_func value for p = sqrt(softplus(logit)) (llama.cpp: 1 softmax, 2 sigmoid).
constexpr uint32_t kGatingSqrtSoftplus = 4;

// How the compressed layers' rope scales positions (`rope.scaling.type`; llama.cpp's default,
// when the key is absent, is linear).
enum class RopeScaling { kNone, kLinear, kYarn };
const char* rope_scaling_name(RopeScaling s);

struct HParams {
    int64_t n_layer = 0;          // main layers: block_count less the next-n (MTP) layers
    int64_t n_layer_all = 0;      // block_count as stored (main + MTP layers)
    int64_t n_embd = 0;
    int64_t n_vocab = 0;          // from token_embd's ne1
    int64_t n_ctx_train = 0;
    int64_t n_head = 0;
    int64_t head_dim = 0;         // attention.key_length (= value_length; V = K)
    int64_t rope_dims = 0;        // rotated dims at the end of each head
    int64_t q_lora_rank = 0;
    int64_t o_groups = 0;
    int64_t o_lora_rank = 0;
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;
    int64_t n_expert_shared = 0;
    float expert_weights_scale = 1.0f;  // as stored; see routed_weight_scale()
    bool expert_weights_norm = true;    // divide the chosen weights by their sum
    // SwiGLU clamp limits per layer, routed experts and the shared expert; a limit <= 1e-6
    // means no clamp (llama.cpp build_ffn / build_moe_ffn). The shared expert's come from
    // swiglu_clamp_shexp, or swiglu_clamp_exp when that key is absent.
    std::vector<float> swiglu_limit;
    std::vector<float> swiglu_limit_shexp;
    float rms_eps = 1e-6f;
    int64_t sliding_window = 0;
    std::vector<int64_t> compress_ratios;  // per layer: 0 (window only), 1, 2
    int64_t idx_n_head = 0;
    int64_t idx_head_dim = 0;
    int64_t idx_top_k = 0;
    float rope_freq_base = 10000.0f;
    float compress_rope_freq_base = 160000.0f;
    RopeScaling rope_scaling = RopeScaling::kYarn;  // of the compressed layers only
    float yarn_factor = 1.0f;     // rope.scaling.factor (linear and YaRN)
    int64_t yarn_n_ctx_orig = 0;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    int64_t hc_count = 4;
    int64_t hc_sinkhorn_iters = 20;
    float hc_eps = 1e-6f;
    // Engram
    std::vector<int64_t> engram_layers;
    int64_t engram_heads = 0;      // hash heads per n-gram order
    int64_t engram_dim = 0;        // row width
    int64_t engram_max_ngram = 0;  // orders 2..max
    std::vector<uint64_t> engram_multipliers;  // n_tables x max_ngram
    std::vector<uint64_t> engram_primes;       // n_tables x (max_ngram-1)*heads
    std::vector<uint64_t> engram_offsets;      // same shape as primes
    std::vector<uint32_t> engram_token_map;    // compressed id per token
    uint64_t engram_pad_id = 0;
    uint32_t bos_id = 0;
    // Metadata keys read_hparams looked up, and tensors a file may carry that the engine
    // skips (MTP layers, the vision routing bias), each with the reason: `info` lists them.
    std::vector<std::string> keys_read;

    int64_t q_dim() const { return n_head * head_dim; }
    // The factor the chosen routing weights are multiplied by: llama.cpp scales only when the
    // stored expert_weights_scale is neither 0 nor 1.
    float routed_weight_scale() const {
        return expert_weights_scale == 0.0f || expert_weights_scale == 1.0f ? 1.0f : expert_weights_scale;
    }
    int64_t engram_buckets() const { return (engram_max_ngram - 1) * engram_heads; }
    int64_t engram_table_index(int64_t layer) const;  // -1 when the layer has no Engram
};

// Reads and validates the hyper-parameters; throws bg::Error naming the key and the problem.
HParams read_hparams(const gguf::Reader& r);
// Writes them as deepseek41.* metadata (make-model; the inverse of read_hparams).
void write_hparams(const HParams& hp, gguf::Writer& w);

// Which optional attention roles a layer has, from which tensors exist (DSV41.md).
struct LayerRoles {
    bool kv_source = false;     // has attn_compressor_kv: computes a compressed kv stream
    bool gated = false;         // has attn_compressor_gate (ratio-2 pooling)
    bool key_owner = false;     // has indexer.attn_k: computes index keys
    bool index_source = false;  // has indexer.attn_q_b: computes the top-k selection
    bool engram = false;
    bool engram_fp8 = false;    // has engram_embd_scale: the table is the fork-fp8 pair (model/engram_format.h)
};

// kEngramTable: a table of one dequantisable type; kEngramFp8Values / kEngramFp8Scales: the two
// I8 tensors of a fork-fp8 table. All three stay on disk and are read a row at a time.
enum class TensorClass { kVector, kMatrix, kExperts, kEngramTable, kEngramFp8Values, kEngramFp8Scales };
inline bool is_engram_table(TensorClass c) {
    return c == TensorClass::kEngramTable || c == TensorClass::kEngramFp8Values || c == TensorClass::kEngramFp8Scales;
}

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;
    TensorClass cls;
};

// Every tensor a deepseek41 file with these roles must hold, with its shape.
std::vector<TensorSpec> tensor_specs(const HParams& hp, const std::vector<LayerRoles>& roles);
// Roles from the file's tensor names; then the table is checked: every expected tensor
// present with the expected shape and an allowed type, no unknown tensor, and each compressed
// layer has a kv source, key owner and index source at or before it. Throws bg::Error.
std::vector<LayerRoles> validate_tensors(const HParams& hp, const gguf::Reader& r);
bool type_allowed(TensorClass cls, GgmlType t);

// Tensors a valid file may hold that the engine never reads, and why: blocks at or after
// n_layer (next-n / MTP layers) and the vision variant's routing bias. Empty when none.
std::string skipped_tensor_reason(const HParams& hp, const std::string& name);

std::string layer_tensor_name(int64_t layer, const char* base, const char* suffix = "weight");

}  // namespace bg::dsv41
