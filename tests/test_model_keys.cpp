// The metadata keys and tensors of a real deepseek41 GGUF, read as llama.cpp reads them: each
// test writes a variant of the tiny synthetic model (tests/gguf_edit.h) and checks what the
// engine does with it, by its own logits and by what it accepts or refuses.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "gguf_edit.h"
#include "model/dsv41_forward.h"
#include "model_fixture.h"
#include "cpu/cpu_ops.h"
#include "runtime/providers.h"
#include "runtime/runner.h"
#include "util/check.h"

namespace {

using bg::dsv41::Model;
using bg::gguf::Value;

std::string arch_key(const std::string& suffix) { return std::string("deepseek41.") + suffix; }

std::string variant_path(const std::string& name) { return bgtest::test_models_dir() + "/keys-" + name + ".gguf"; }

// Logits of every prompt position, CPU forward, layer-major prefill.
std::vector<float> all_logits(const std::string& path) {
    auto model = Model::open(path);
    bg::cpu::ThreadPool pool(2);
    bg::PreadExpertProvider experts(*model);
    bg::PreadEngramProvider engram(*model);
    bg::dsv41::ForwardConfig fc;
    fc.n_ctx = 64;
    fc.max_ubatch = 16;
    bg::dsv41::Forward fwd(*model, bg::cpu::make_cpu_ops(pool), experts, engram, fc);
    bg::Runner runner(*model, fwd);
    // 40 tokens: the window (8), both compress ratios and the indexer's top-4 all take part,
    // and positions reach far enough for rope scaling to move angles by whole radians.
    const std::vector<int32_t> prompt = bg::random_prompt(40, 5, 512, 0);
    std::vector<float> all;
    runner.prefill(prompt, bg::PrefillOrder::kLayerMajor, 16, nullptr, &all);
    return all;
}

std::vector<float> logits_of(const bgtest::GgufEdit& edit, const std::string& name) {
    const std::string path = variant_path(name);
    edit.write(path);
    return all_logits(path);
}

// The error Model::open gives, or "" when it opens.
std::string open_error(const bgtest::GgufEdit& edit, const std::string& name) {
    const std::string path = variant_path(name);
    edit.write(path);
    try {
        Model::open(path);
    } catch (const bg::Error& e) {
        return e.what();
    }
    return "";
}

class ModelKeys : public ::testing::Test {
protected:
    void SetUp() override {
        base_ = bgtest::tiny_model();
        base_logits_ = all_logits(base_);
        n_layer_ = Model::open(base_)->hp().n_layer;
    }
    bgtest::GgufEdit edit() const { return bgtest::GgufEdit(base_); }
    std::string base_;
    std::vector<float> base_logits_;
    int64_t n_layer_ = 0;
};

// llama.cpp clamps the shared expert with swiglu_clamp_shexp, falling back to swiglu_clamp_exp
// when the key is absent (load_arch_hparams + build_ffn).
TEST_F(ModelKeys, SharedExpertClampComesFromItsKeyOrFallsBackToTheRoutedOne) {
    // A limit small enough to bite on this model's activations.
    const auto exp_only = logits_of(edit().set(arch_key("swiglu_clamp_exp"), Value::f32(0.05f)), "exp-0.05");
    const auto both_same = logits_of(edit()
                                         .set(arch_key("swiglu_clamp_exp"), Value::f32(0.05f))
                                         .set(arch_key("swiglu_clamp_shexp"), Value::f32(0.05f)),
                                     "exp-0.05-shexp-0.05");
    EXPECT_EQ(exp_only, both_same) << "no shexp key must mean shexp = exp";
    // Only the shared expert's limit changes: the output changes.
    const auto shexp_loose = logits_of(edit()
                                           .set(arch_key("swiglu_clamp_exp"), Value::f32(0.05f))
                                           .set(arch_key("swiglu_clamp_shexp"), Value::f32(0.0f)),
                                       "exp-0.05-shexp-0");
    EXPECT_GT(bgtest::max_rel_diff(exp_only, shexp_loose), 1e-3) << "swiglu_clamp_shexp is not applied";
    // Per-layer array form, longer than the layer count (a converter writes next-n layers too):
    // the first n_layer values count.
    std::vector<float> per_layer(static_cast<size_t>(n_layer_ + 3), 0.05f);
    const auto arr = logits_of(edit()
                                   .set(arch_key("swiglu_clamp_exp"), Value::array_f32(per_layer))
                                   .set(arch_key("swiglu_clamp_shexp"), Value::array_f32(per_layer)),
                               "clamps-per-layer-long");
    EXPECT_EQ(exp_only, arr);
    per_layer.resize(static_cast<size_t>(n_layer_ - 1));
    const std::string err = open_error(edit().set(arch_key("swiglu_clamp_shexp"), Value::array_f32(per_layer)),
                                       "shexp-per-layer-short");
    EXPECT_NE(err.find("swiglu_clamp_shexp"), std::string::npos) << err;
}

// build_moe_ffn: the chosen weights are divided by their sum only with expert_weights_norm, and
// multiplied by expert_weights_scale only when it is neither 0 nor 1.
TEST_F(ModelKeys, ExpertWeightsNormAndScale) {
    const auto scale0 = logits_of(edit().set(arch_key("expert_weights_scale"), Value::f32(0.0f)), "scale-0");
    const auto scale1 = logits_of(edit().set(arch_key("expert_weights_scale"), Value::f32(1.0f)), "scale-1");
    EXPECT_EQ(scale0, scale1) << "a scale of 0 means no scaling";
    EXPECT_GT(bgtest::max_rel_diff(base_logits_, scale1), 1e-3) << "the tiny model's scale (1.5) must matter";
    const auto no_norm = logits_of(edit().set(arch_key("expert_weights_norm"), Value::boolean(false)), "no-norm");
    EXPECT_GT(bgtest::max_rel_diff(base_logits_, no_norm), 1e-3) << "expert_weights_norm=false is ignored";
}

// rope.scaling.type: absent is linear; none never scales; linear divides positions by the
// factor with no YaRN ramp; yarn ramps; anything else is refused.
TEST_F(ModelKeys, RopeScalingType) {
    const std::string type = arch_key("rope.scaling.type"), factor = arch_key("rope.scaling.factor");
    const auto absent = logits_of(edit().remove(type), "rope-absent");
    const auto linear = logits_of(edit().set(type, Value::str("linear")), "rope-linear");
    EXPECT_EQ(absent, linear);
    EXPECT_GT(bgtest::max_rel_diff(base_logits_, linear), 1e-3) << "the base file is yarn: linear must differ";
    const auto none = logits_of(edit().set(type, Value::str("none")), "rope-none");
    const auto linear1 = logits_of(edit().set(type, Value::str("linear")).set(factor, Value::f32(1.0f)), "rope-linear-1");
    EXPECT_EQ(none, linear1) << "none is linear with factor 1";
    EXPECT_GT(bgtest::max_rel_diff(none, linear), 1e-3);
    const auto factor0 = logits_of(edit().set(type, Value::str("linear")).set(factor, Value::f32(0.0f)), "rope-linear-0");
    EXPECT_EQ(none, factor0) << "a factor of 0 means 1";
    const std::string err = open_error(edit().set(type, Value::str("longrope-ish")), "rope-unknown");
    EXPECT_NE(err.find("rope.scaling.type"), std::string::npos) << err;
}

// MTP layers as llama.cpp's converter writes them: counted in block_count, after the main
// layers, announced by nextn_predict_layers, first one probed by its eh_proj tensor. Skipped.
TEST_F(ModelKeys, NextNLayersAreSkippedAndNeverRead) {
    const auto base = Model::open(base_);
    const int64_t E = base->hp().n_embd;
    auto f32_bytes = [](int64_t n) { return std::vector<uint8_t>(static_cast<size_t>(n) * 4, 0x3c); };
    bgtest::GgufEdit e = edit();
    e.set(arch_key("block_count"), Value::u32(static_cast<uint32_t>(n_layer_ + 1)))
        .set(arch_key("nextn_predict_layers"), Value::u32(1));
    const std::string mtp = "blk." + std::to_string(n_layer_) + ".";
    e.add_tensor(mtp + "nextn.eh_proj.weight", {2 * E, E}, bg::GgmlType::F32, f32_bytes(2 * E * E))
        .add_tensor(mtp + "nextn.enorm.weight", {E}, bg::GgmlType::F32, f32_bytes(E))
        .add_tensor(mtp + "attn_norm.weight", {E}, bg::GgmlType::F32, f32_bytes(E));
    // Per-layer arrays now hold block_count values (one more than the main layers).
    std::vector<int32_t> ratios;
    for (int64_t r : base->hp().compress_ratios) ratios.push_back(static_cast<int32_t>(r));
    ratios.push_back(0);
    e.set(arch_key("attention.compress_ratios"), Value::array_i32(ratios));
    const std::string path = variant_path("nextn");
    e.write(path);
    auto m = Model::open(path);
    EXPECT_EQ(m->hp().n_layer, n_layer_);
    EXPECT_EQ(m->hp().n_layer_all, n_layer_ + 1);
    EXPECT_EQ(m->dense_bytes(), base->dense_bytes()) << "MTP tensors must not be loaded";
    EXPECT_EQ(all_logits(path), base_logits_);
    EXPECT_FALSE(bg::dsv41::skipped_tensor_reason(m->hp(), mtp + "nextn.eh_proj.weight").empty());

    // MTP blocks numbered from block_count on (no nextn key): skipped the same way.
    bgtest::GgufEdit after = edit();
    after.add_tensor(mtp + "nextn.eh_proj.weight", {2 * E, E}, bg::GgmlType::F32, f32_bytes(2 * E * E));
    EXPECT_EQ(logits_of(after, "mtp-after-block-count"), base_logits_);
    // A tensor of a main layer that the architecture does not have is still an error.
    bgtest::GgufEdit stray = edit();
    stray.add_tensor("blk.0.nextn.eh_proj.weight", {2 * E, E}, bg::GgmlType::F32, f32_bytes(2 * E * E));
    EXPECT_NE(open_error(stray, "stray").find("unexpected tensor"), std::string::npos);
}

// Tolerated and unused, as in llama.cpp's deepseek41 graph for text: the vision routing bias
// and hash_layer_count > 0. Longer compress_ratios: the first n_layer values.
TEST_F(ModelKeys, ToleratedExtras) {
    auto m = Model::open(base_);
    const int64_t ne = m->hp().n_expert;
    bgtest::GgufEdit e = edit();
    e.set(arch_key("hash_layer_count"), Value::u32(3));
    for (int64_t l = 0; l < n_layer_; ++l)
        e.add_tensor("blk." + std::to_string(l) + ".exp_probs_b_vl.bias", {ne}, bg::GgmlType::F32,
                     std::vector<uint8_t>(static_cast<size_t>(ne) * 4, 0x40));
    std::vector<int32_t> ratios;
    for (int64_t r : m->hp().compress_ratios) ratios.push_back(static_cast<int32_t>(r));
    ratios.insert(ratios.end(), {2, 2, 2});
    e.set(arch_key("attention.compress_ratios"), Value::array_i32(ratios));
    EXPECT_EQ(logits_of(e, "extras"), base_logits_);
    ratios.resize(static_cast<size_t>(n_layer_ - 1));
    const std::string err = open_error(edit().set(arch_key("attention.compress_ratios"), Value::array_i32(ratios)),
                                       "ratios-short");
    EXPECT_NE(err.find("compress_ratios"), std::string::npos) << err;
}

// engram_q / engram_k quantized by an older llama-quantize: dequantised at load, so the file
// gives exactly what an F32 file holding the dequantised values gives.
TEST_F(ModelKeys, QuantizedOneDimensionalWeightsAreDequantisedAtLoad) {
    auto m = Model::open(base_);
    bgtest::GgufEdit q8 = edit(), f32 = edit();
    for (int64_t l : m->hp().engram_layers)
        for (const char* w : {"engram_q", "engram_k"}) {
            const std::string name = bg::dsv41::layer_tensor_name(l, w);
            const std::vector<float> v = q8.values(name);
            q8.retype(name, bg::GgmlType::Q8_0, v);
            // The same values after a Q8_0 round trip, stored as F32.
            const bg::gguf::TensorInfo* t = q8.source().tensor(name);
            std::vector<uint8_t> blocks(bg::row_bytes(bg::GgmlType::Q8_0, t->ne[0]));
            std::vector<float> rt(v.size());
            for (size_t r = 0; r < v.size() / static_cast<size_t>(t->ne[0]); ++r) {
                bg::quantize_row(bg::GgmlType::Q8_0, &v[r * t->ne[0]], blocks.data(), t->ne[0]);
                bg::dequantize_row(bg::GgmlType::Q8_0, blocks.data(), &rt[r * t->ne[0]], t->ne[0]);
            }
            f32.retype(name, bg::GgmlType::F32, rt);
        }
    const auto a = logits_of(q8, "engram-qk-q8");
    const auto b = logits_of(f32, "engram-qk-roundtrip-f32");
    EXPECT_EQ(a, b);
    EXPECT_GT(bgtest::max_rel_diff(base_logits_, a), 0.0) << "Q8_0 rounding must reach the logits";
}

// llama.cpp refuses only a token map shorter than the vocabulary.
TEST_F(ModelKeys, EngramTokenMapMayBeLongerThanTheVocabulary) {
    auto m = Model::open(base_);
    std::vector<uint32_t> map = m->hp().engram_token_map;
    map.insert(map.end(), {1, 2, 3, 4});
    EXPECT_EQ(logits_of(edit().set(arch_key("engram.token_map"), Value::array_u32(map)), "map-long"), base_logits_);
    map.resize(map.size() - 5);
    const std::string err = open_error(edit().set(arch_key("engram.token_map"), Value::array_u32(map)), "map-short");
    EXPECT_NE(err.find("token_map"), std::string::npos) << err;
}

// `info` lists what the engine did not read: keys it never looked up, tensors it skipped.
TEST_F(ModelKeys, KeysReadAreRecordedForInfo) {
    const std::string path = variant_path("unknown-key");
    edit().set(arch_key("some_future_key"), Value::u32(7)).write(path);
    auto m = Model::open(path);
    const auto& read = m->hp().keys_read;
    auto has = [&](const std::string& k) { return std::find(read.begin(), read.end(), k) != read.end(); };
    EXPECT_TRUE(has(arch_key("swiglu_clamp_shexp")));  // looked up even though absent
    EXPECT_TRUE(has(arch_key("expert_weights_norm")));
    EXPECT_TRUE(has(arch_key("rope.scaling.type")));
    EXPECT_FALSE(has(arch_key("some_future_key")));
}

}  // namespace
