// A model scale: the shape of a synthetic dsv41 model plus how make-model draws its weights.
// Scales are JSON files under scenarios/models/ (ci, device, full); make-model takes any.
// Unknown keys are rejected; every key has the real model's value as its default, so "full"
// only names what it must.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/dsv41.h"
#include "model/engram_format.h"
#include "model/quant_preset.h"
#include "tensor/ggml_types.h"

namespace bg {

struct ModelScale {
    std::string name = "full";
    std::string description;
    dsv41::HParams hp;                 // shapes and constants written as metadata
    // Which layers hold which optional attention tensors (DSV41.md tensor table).
    std::vector<int64_t> kv_source_layers{2, 8, 14, 20};
    std::vector<int64_t> gated_layers{2, 8, 14};
    std::vector<int64_t> key_owner_layers{2, 8, 14, 20};
    std::vector<int64_t> index_source_layers{2, 8, 14, 20, 24, 28, 32, 36};
    int64_t engram_rows_per_table = 384ll << 20;   // sum of the 24 bucket primes, about
    int64_t engram_compressed_vocab = 99092;
    GgmlType dense_type = GgmlType::BF16;          // 2-D dense weights
    GgmlType expert_type = GgmlType::MXFP4;        // routed experts
    // Engram tables: key "engram_type", a type name or "fork-fp8" (model/engram_format.h).
    EngramFormat engram_format = EngramFormat::typed(GgmlType::Q8_0);
    GgmlType router_type = GgmlType::F32;          // ffn_gate_inp
    // A llama-quantize preset ("quant" key, or make-model --quant): when set it decides every
    // tensor's type (model/quant_preset.h) and the four types above are not used.
    std::optional<QuantPreset> quant;
    // Router bias skew: bias_e = skew * z_e with z_e ~ N(0, 1), so a larger skew makes a few
    // experts much more popular (the router's p values spread about 0.1-0.3 around 0.8).
    double router_bias_skew = 0.25;

    std::vector<dsv41::LayerRoles> roles() const;
};

// Reads a scale file; throws bg::Error naming the key and the reason.
ModelScale load_scale(const std::string& path);
ModelScale parse_scale(const std::string& json_text, const std::string& origin);

}  // namespace bg
