// One tiny-model variant per metadata key (or file shape) whose meaning llama.cpp's deepseek41
// loader fixes: each is the tiny synthetic model rewritten by tests/gguf_edit.h the way a real
// converter or quantizer could have written it. The CPU and CUDA forwards are each compared with
// the float64 reference (tests/reference) on every variant.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gguf_edit.h"
#include "model_fixture.h"

namespace bgtest {

struct KeyVariant {
    std::string name;
    std::function<void(GgufEdit&)> edit;
};

inline std::vector<KeyVariant> key_variants() {
    using bg::gguf::Value;
    auto key = [](const char* k) { return std::string("deepseek41.") + k; };
    // The tiny model's limit (10) never engages; 0.05 does, on both expert kinds.
    const std::vector<float> small_limits = {0.05f, 0.04f, 0.06f, 0.05f, 0.03f, 0.05f, 9.0f, 9.0f};  // 6 layers + 2 MTP
    return {
        {"shexp-absent-falls-back", [=](GgufEdit& e) { e.set(key("swiglu_clamp_exp"), Value::f32(0.05f)); }},
        {"shexp-scalar", [=](GgufEdit& e) { e.set(key("swiglu_clamp_shexp"), Value::f32(0.05f)); }},
        {"clamps-per-layer-longer",
         [=](GgufEdit& e) {
             e.set(key("swiglu_clamp_exp"), Value::array_f32(small_limits));
             e.set(key("swiglu_clamp_shexp"), Value::array_f32(small_limits));
         }},
        {"weights-not-normalised", [=](GgufEdit& e) { e.set(key("expert_weights_norm"), Value::boolean(false)); }},
        {"weights-scale-0", [=](GgufEdit& e) { e.set(key("expert_weights_scale"), Value::f32(0.0f)); }},
        {"rope-scaling-absent", [=](GgufEdit& e) { e.remove(key("rope.scaling.type")); }},
        {"rope-scaling-none", [=](GgufEdit& e) { e.set(key("rope.scaling.type"), Value::str("none")); }},
        {"rope-scaling-linear-4",
         [=](GgufEdit& e) {
             e.set(key("rope.scaling.type"), Value::str("linear"));
             e.set(key("rope.scaling.factor"), Value::f32(4.0f));
         }},
        {"nextn-layer",
         [=](GgufEdit& e) {
             const int64_t n_layer = static_cast<int64_t>(e.source().get_u64(key("block_count")));
             const int64_t E = static_cast<int64_t>(e.source().get_u64(key("embedding_length")));
             e.set(key("block_count"), Value::u32(static_cast<uint32_t>(n_layer + 1)));
             e.set(key("nextn_predict_layers"), Value::u32(1));
             const std::string blk = "blk." + std::to_string(n_layer) + ".";
             e.add_tensor(blk + "nextn.eh_proj.weight", {2 * E, E}, bg::GgmlType::F32,
                          std::vector<uint8_t>(static_cast<size_t>(8 * E * E), 0x3c));
             e.add_tensor(blk + "attn_norm.weight", {E}, bg::GgmlType::F32,
                          std::vector<uint8_t>(static_cast<size_t>(4 * E), 0x3c));
             // A converter writes every per-layer array for all block_count blocks.
             std::vector<int64_t> ratios = e.source().get_arr_i64(key("attention.compress_ratios"));
             ratios.push_back(0);
             e.set(key("attention.compress_ratios"),
                   Value::array_i32(std::vector<int32_t>(ratios.begin(), ratios.end())));
             std::vector<float> clamps = e.source().get_arr_f32(key("swiglu_clamp_exp"));
             clamps.push_back(clamps.back());
             e.set(key("swiglu_clamp_exp"), Value::array_f32(clamps));
         }},
        {"vision-bias-and-hash-layers",
         [=](GgufEdit& e) {
             const int64_t n_layer = static_cast<int64_t>(e.source().get_u64(key("block_count")));
             const int64_t ne = static_cast<int64_t>(e.source().get_u64(key("expert_count")));
             e.set(key("hash_layer_count"), Value::u32(3));
             for (int64_t l = 0; l < n_layer; ++l)
                 e.add_tensor("blk." + std::to_string(l) + ".exp_probs_b_vl.bias", {ne}, bg::GgmlType::F32,
                              std::vector<uint8_t>(static_cast<size_t>(4 * ne), 0x40));
         }},
        {"engram-qk-q8_0",
         [=](GgufEdit& e) {
             for (int64_t l : e.source().get_arr_i64(key("engram.layer_ids")))
                 for (const char* w : {"engram_q", "engram_k"}) {
                     const std::string name = "blk." + std::to_string(l) + "." + w + ".weight";
                     e.retype(name, bg::GgmlType::Q8_0, e.values(name));
                 }
         }},
        {"token-map-longer",
         [=](GgufEdit& e) {
             std::vector<uint64_t> map = e.source().get_arr_u64(key("engram.token_map"));
             map.insert(map.end(), {11, 12, 13});
             e.set(key("engram.token_map"),
                   Value::array_u32(std::vector<uint32_t>(map.begin(), map.end())));
         }},
    };
}

// The variant's file, written on first use into the test models folder.
inline std::string key_variant_path(const KeyVariant& v) {
    const std::string path = test_models_dir() + "/tiny-seed3-variant-" + v.name + ".gguf";
    GgufEdit e(tiny_model());
    v.edit(e);
    e.write(path);
    return path;
}

}  // namespace bgtest
