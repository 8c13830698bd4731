// A dsv41 model file opened for inference: validated header, the dense weights laid out in one
// "dense image" (held in host memory, or left for a device backend to load straight into VRAM),
// and the byte ranges of every routed expert and Engram table left on disk for the expert and
// Engram providers to fetch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/types.h"
#include "gguf/gguf.h"
#include "model/dsv41.h"
#include "model/engram_format.h"
#include "model/moe_model.h"

namespace bg::dsv41 {

struct LayerWeights {
    const float* attn_norm = nullptr;   // [n_embd]
    const float* ffn_norm = nullptr;    // [n_embd]
    const float* attn_sinks = nullptr;  // [n_head]
    MatView q_a;                   // n_embd -> q_lora
    const float* q_a_norm = nullptr;    // [q_lora]
    MatView q_b;                   // q_lora -> n_head*head_dim
    MatView kv;                    // n_embd -> head_dim
    const float* kv_a_norm = nullptr;   // [head_dim]
    MatView o_a;                   // per group: q_dim/o_groups -> o_lora (rows g*o_lora ..)
    MatView o_b;                   // o_groups*o_lora -> n_embd
    MatView hc_attn_fn, hc_ffn_fn;  // 4*n_embd -> 24
    const float* hc_attn_base = nullptr;  // [24]
    const float* hc_attn_scale = nullptr; // [3]
    const float* hc_ffn_base = nullptr;
    const float* hc_ffn_scale = nullptr;
    // compressed kv stream (kv sources)
    MatView comp_kv, comp_gate;     // n_embd -> head_dim
    const float* comp_norm = nullptr;    // [head_dim]
    // indexer
    MatView idx_k;                  // head_dim -> idx_head_dim (key owners)
    const float* idx_k_norm = nullptr;   // [idx_head_dim]
    MatView idx_q_b;                // q_lora -> idx_heads*idx_head_dim (index sources)
    MatView idx_proj;               // n_embd -> idx_heads
    // MoE
    MatView gate_inp;               // n_embd -> n_expert
    const float* exp_probs_b = nullptr;  // [n_expert]
    ExpertTypes expert_types;       // of gate_exps, up_exps, down_exps
    MatView sh_gate, sh_up, sh_down;
    // Engram
    MatView engram_wkv;             // buckets*dim -> 5*n_embd (4 keys, then the value)
    const float* engram_q = nullptr;     // [4][n_embd]
    const float* engram_k = nullptr;     // [4][n_embd]
    const gguf::TensorInfo* engram_embd = nullptr;
    const gguf::TensorInfo* engram_embd_scale = nullptr;  // fork-fp8 tables only
    const gguf::TensorInfo* gate_exps = nullptr;
    const gguf::TensorInfo* up_exps = nullptr;
    const gguf::TensorInfo* down_exps = nullptr;
};

// Where the dense weights live. kHost: the whole image in host memory (the CPU backend computes
// from it). kDevice: the device holds the image and loads it from the file itself
// (device_tensors()); the host keeps only what it reads: the 1-D weights (a few MB; the router
// bias also decides the default residency plan) and the token embedding, whose rows are gathered
// per token on the host as llama.cpp keeps token_embd on the CPU. Nothing is held twice.
enum class DenseHome { kHost, kDevice };

// A dense tensor in the image: where it is in the file and where it goes in the image.
struct DenseTensor {
    const gguf::TensorInfo* info = nullptr;
    uint64_t image_offset = 0;
    bool vector = false;  // held as F32 whatever its file type (dequantised at load)
};

// Where each dense tensor goes in the dense image: 1-D weights first (as F32), then matrices,
// then the token embedding, each at a 64-byte aligned offset. Model::open lays its image out
// with this, and `betelgeuse plan` sizes it from a scale without a file.
struct DenseEntry {
    std::string name;
    TensorClass cls = TensorClass::kMatrix;
    uint64_t n_elems = 0;
    uint64_t n_bytes = 0;  // in the file
};
struct DenseLayout {
    std::vector<uint64_t> offset;       // per entry given (experts and Engram tables: unused)
    uint64_t vector_bytes = 0;          // the 1-D weights
    uint64_t device_image_bytes = 0;    // 1-D weights and matrices: what a device holds
    uint64_t embedding_bytes = 0;       // the token embedding as held (aligned)
    uint64_t image_bytes() const { return device_image_bytes + embedding_bytes; }
    // Host bytes held in each home.
    uint64_t host_bytes(DenseHome home) const {
        return home == DenseHome::kHost ? image_bytes() : vector_bytes + embedding_bytes;
    }
};
DenseLayout dense_layout(const std::vector<DenseEntry>& entries);

// The dsv41 architecture's file: the MoE interface the runtime reads (model/moe_model.h), and
// every weight the forward pass (model/dsv41_forward.h) needs.
class Model final : public MoeModel {
public:
    // Opens, validates and loads the dense weights that `home` puts in host memory. Throws
    // bg::Error on any problem.
    static std::unique_ptr<Model> open(const std::string& path, DenseHome home = DenseHome::kHost);
    ~Model() override;
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const HParams& hp() const { return hp_; }
    const std::vector<LayerRoles>& roles() const { return roles_; }
    const LayerWeights& layer(int64_t l) const { return layer_at(l); }
    const gguf::Reader& gguf() const override { return reader_; }
    const std::string& path() const override { return path_; }
    const std::vector<std::string>& shard_paths() const override { return shard_paths_; }
    int fd(uint32_t file) const override { return fds_.at(file); }
    // Reads `bytes` of tensor `t` from `at` bytes into it, from the file that holds it; throws
    // bg::Error "<what>: ..." on failure.
    void read_tensor(const gguf::TensorInfo& t, void* dst, uint64_t bytes, uint64_t at, const char* what) const;

    MatView token_embd() const { return token_embd_; }
    MatView output() const { return output_; }
    const float* output_norm() const { return output_norm_; }

    const MoeShape& moe_shape() const override { return shape_; }
    ExpertRanges expert_ranges(int64_t layer, int64_t expert) const override;
    ExpertTypes expert_types(int64_t layer) const override { return layer_at(layer).expert_types; }
    void expert_views(int64_t layer, const uint8_t* buf, MatView* gate, MatView* up, MatView* down) const override;
    const float* router_bias(int64_t layer) const override { return layer_at(layer).exp_probs_b; }
    EngramRowRanges engram_row(int64_t layer, uint64_t row) const override;
    EngramFormat engram_format(int64_t layer) const override;

    DenseHome dense_home() const { return home_; }
    // Host bytes held for dense weights: the whole image (kHost), or the 1-D weights and the
    // token embedding (kDevice).
    uint64_t dense_bytes() const { return dense_bytes_; }
    // The host buffer of the image: 1-D weights first (at their image offsets in either home),
    // then, in kHost, every matrix. Vector pointers of LayerWeights point into it.
    const uint8_t* dense_data() const { return dense_; }
    uint64_t vector_bytes() const { return vector_bytes_; }
    // Bytes of the image a device holds: everything but the token embedding, which is last.
    uint64_t device_image_bytes() const { return device_image_bytes_; }
    // The tensors of that part of the image (vectors and matrices, file order).
    const std::vector<DenseTensor>& device_tensors() const { return device_tensors_; }
    uint64_t expert_bytes() const { return expert_bytes_; }
    uint64_t engram_bytes() const { return engram_bytes_; }

private:
    Model() = default;
    const LayerWeights& layer_at(int64_t l) const { return layers_.at(static_cast<size_t>(l)); }
    std::string path_;
    std::vector<std::string> shard_paths_;
    std::vector<int> fds_;  // one per shard, closed with the model
    gguf::Reader reader_;
    HParams hp_;
    MoeShape shape_;
    std::vector<LayerRoles> roles_;
    std::vector<LayerWeights> layers_;
    MatView token_embd_, output_;
    const float* output_norm_ = nullptr;
    DenseHome home_ = DenseHome::kHost;
    uint8_t* dense_ = nullptr;  // the image (kHost) or its vector part (kDevice), 64-byte aligned tensors
    uint8_t* embd_ = nullptr;   // kDevice: the token embedding, held apart from the image
    uint64_t dense_bytes_ = 0, vector_bytes_ = 0, device_image_bytes_ = 0, expert_bytes_ = 0, engram_bytes_ = 0;
    std::vector<DenseTensor> device_tensors_;
};

}  // namespace bg::dsv41
