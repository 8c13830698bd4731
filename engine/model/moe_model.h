// What the runtime needs of a Mixture-of-Experts model file, whatever its architecture: the
// layer and expert counts, each routed expert's byte ranges and types, the Engram tables' rows,
// the router biases that seed the default residency plan, and the files themselves. The expert
// and Engram stores, the pread providers, the residency plan and the prompt builder read a model
// through this alone; an architecture (model/dsv41_model.h) implements it beside its own
// forward pass, so a second one touches the model folder, not the store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/types.h"
#include "gguf/gguf.h"
#include "model/engram_format.h"

namespace bg {

// Where bytes lie on disk: a file of the model (a shard of a split model; 0 for an unsplit
// one, the index into shard_paths()) and a range of it.
struct ByteRange {
    uint64_t offset = 0;  // absolute offset in that file
    uint64_t bytes = 0;
    uint32_t file = 0;
};

// One routed expert: three contiguous slices of the layer's merged 3-D tensors, read back to
// back (gate, up, down) into one slot.
struct ExpertRanges {
    ByteRange gate, up, down;
    uint64_t total() const { return gate.bytes + up.bytes + down.bytes; }
};

// Each of a layer's expert matrices has its own type (llama-quantize gives ffn_down a step more).
struct ExpertTypes {
    GgmlType gate = GgmlType::MXFP4, up = GgmlType::MXFP4, down = GgmlType::MXFP4;
    bool operator==(const ExpertTypes&) const = default;
};

// One Engram row: its bytes in the table, and for a fork-fp8 table its E8M0 scales in the scales
// tensor (bytes 0 otherwise). Read back to back, values then scales, they are the packed row that
// dequantize_engram_rows takes.
struct EngramRowRanges {
    ByteRange values, scales;
    uint64_t bytes() const { return values.bytes + scales.bytes; }
};

// The counts the runtime sizes itself by.
struct MoeShape {
    int64_t n_layer = 0;
    int64_t n_expert = 0;       // routed experts per MoE layer
    int64_t n_expert_used = 0;  // k: routed experts per token
    int64_t n_vocab = 0;
    uint32_t bos_id = 0;
    std::vector<int64_t> engram_layers;  // layers with an Engram table, ascending
    int64_t engram_dim = 0;              // an Engram row's width, in values
};

class MoeModel {
public:
    virtual ~MoeModel() = default;

    virtual const MoeShape& moe_shape() const = 0;

    virtual ExpertRanges expert_ranges(int64_t layer, int64_t expert) const = 0;
    virtual ExpertTypes expert_types(int64_t layer) const = 0;
    // Views of an expert's three matrices over a buffer holding gate, up and down back to back.
    virtual void expert_views(int64_t layer, const uint8_t* buf, MatView* gate, MatView* up, MatView* down) const = 0;
    // Bytes of one expert of the layer (every expert of a layer has the same).
    uint64_t expert_bytes_each(int64_t layer) const { return expert_ranges(layer, 0).total(); }
    // [n_expert] router bias of a layer (DeepSeek's exp_probs_b), or nullptr where it has none;
    // the default residency plan keeps the experts it favours.
    virtual const float* router_bias(int64_t layer) const = 0;

    virtual EngramRowRanges engram_row(int64_t layer, uint64_t row) const = 0;
    virtual EngramFormat engram_format(int64_t layer) const = 0;

    // The file given (the first shard of a split model) and its header: the tokenizer and chat
    // template are read from its metadata.
    virtual const std::string& path() const = 0;
    virtual const gguf::Reader& gguf() const = 0;
    // Every file of the model, in shard order (one for an unsplit model): what a disk reader opens.
    virtual const std::vector<std::string>& shard_paths() const = 0;
    // The model's descriptor for file `file` (an index into shard_paths()), open for its lifetime.
    virtual int fd(uint32_t file) const = 0;
};

}  // namespace bg
