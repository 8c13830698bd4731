// The engine's CPU forward against the independent float64 reference (tests/reference), and the
// reference's own reading of the metadata keys whose semantics llama.cpp fixes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "cpu/thread_pool.h"
#include "gguf_edit.h"
#include "cpu/cpu_ops.h"
#include "cpu/ops.h"
#include "key_variants.h"
#include "model/dsv41_forward.h"
#include "model_fixture.h"
#include "reference/dsv41_reference.h"
#include "runtime/providers.h"
#include "runtime/runner.h"

namespace {

using bg::gguf::Value;

struct Engine {
    std::unique_ptr<bg::dsv41::Model> model;
    bg::cpu::ThreadPool pool;
    bg::PreadExpertProvider experts;
    bg::PreadEngramProvider engram;
    bg::dsv41::Forward fwd;
    bg::Runner runner;
    Engine(const std::string& path, const bg::dsv41::ForwardConfig& fc)
        : model(bg::dsv41::Model::open(path)), pool(2), experts(*model), engram(*model),
          fwd(*model, bg::cpu::make_cpu_ops(pool), experts, engram, fc), runner(*model, fwd) {}
};

std::string variant(const std::string& tag, const std::function<void(bgtest::GgufEdit&)>& edit) {
    const std::string src = bgtest::tiny_model();
    const std::string dst = bgtest::test_models_dir() + "/tiny-seed3-" + tag + ".gguf";
    bgtest::GgufEdit e(src);
    edit(e);
    e.write(dst);
    return dst;
}

// Greedy tokens of a 24-token prompt + 8 generated, then the logits of every position of that
// sequence, engine (CPU, layer-major prefill) against the reference. Returns the max relative
// difference.
double compare_with_reference(const std::string& path, ref::SwigluForm form) {
    ref::Dsv41Options opt;
    opt.swiglu = form;
    const ref::Dsv41Reference ref(path, opt);
    const int64_t n_vocab = ref.hparams().n_vocab;
    const std::vector<int32_t> prompt = bg::random_prompt(24, 5, n_vocab, 0);
    const int64_t n_gen = 8;

    bg::dsv41::ForwardConfig fc;
    fc.n_ctx = 64;
    fc.max_ubatch = 16;
    fc.swiglu_form = form == ref::SwigluForm::kDeepSeek ? bg::SwigluClamp::kDeepSeek : bg::SwigluClamp::kLlamaCpp;
    Engine eng(path, fc);
    std::vector<float> last;
    eng.runner.prefill(prompt, bg::PrefillOrder::kLayerMajor, 16, &last);
    const std::vector<int32_t> eng_tokens = eng.runner.decode(last, n_gen);
    const std::vector<int32_t> ref_tokens = ref.greedy(prompt, n_gen);
    EXPECT_EQ(ref_tokens, eng_tokens);

    // Logits of every position of prompt + generated text (the reference's continuation).
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), ref_tokens.begin(), ref_tokens.end());
    std::vector<float> all;
    eng.runner.prefill(seq, bg::PrefillOrder::kLayerMajor, 16, &last, &all);
    const auto ref_logits = ref.logits(seq);
    EXPECT_EQ(all.size(), seq.size() * static_cast<size_t>(n_vocab));
    if (all.size() != seq.size() * static_cast<size_t>(n_vocab)) return INFINITY;
    return ref::max_rel_diff(ref_logits, all, n_vocab);
}

// Tolerance 1e-5 relative: float32 accumulation against double (measured 4.6e-7 on the tiny
// model).
TEST(ReferenceForward, EngineCpuForwardAgreesWithReference) {
    const double rel = compare_with_reference(bgtest::tiny_model(), ref::SwigluForm::kDeepSeek);
    std::printf("engine vs reference: max rel diff %.3g\n", rel);
    RecordProperty("max_rel_diff", std::to_string(rel));
    EXPECT_LT(rel, 1e-5);
}

// The same model with its Engram tables as the fork-fp8 pair (FP8-E4M3 bytes and E8M0 scales in
// two I8 tensors): the reference decodes those rows on its own, in double.
TEST(ReferenceForward, EngineCpuForwardAgreesWithReferenceOnForkFp8EngramTables) {
    bg::ModelScale s = bg::parse_scale(bgtest::kTinyScale, "tiny");
    s.name = "tiny-fork-fp8";
    s.engram_format = bg::EngramFormat::fork_fp8();
    const double rel = compare_with_reference(bgtest::cached_model(s, 3), ref::SwigluForm::kDeepSeek);
    std::printf("engine vs reference, fork-fp8 Engram: max rel diff %.3g\n", rel);
    EXPECT_LT(rel, 1e-5);
}

// Every key variant a real file can carry (tests/key_variants.h), read by the engine as
// llama.cpp reads it; the first also in llama.cpp's SwiGLU clamp form.
TEST(ReferenceForward, EngineCpuForwardAgreesOnEveryKeyVariant) {
    const auto variants = bgtest::key_variants();
    for (const auto& v : variants) {
        SCOPED_TRACE(v.name);
        const std::string path = bgtest::key_variant_path(v);
        const double rel = compare_with_reference(path, ref::SwigluForm::kDeepSeek);
        std::printf("%-32s max rel diff %.3g\n", v.name.c_str(), rel);
        EXPECT_LT(rel, 1e-5);
    }
    SCOPED_TRACE("llama.cpp clamp form");
    EXPECT_LT(compare_with_reference(bgtest::key_variant_path(variants[0]), ref::SwigluForm::kLlamaCpp), 1e-5);
}

// The variants change the model: an engine that ignored a key would not match the reference
// on it (each variant's logits differ from the base model's, or the variant is one that must
// not change them: MTP layers, the vision bias and hash layers, a longer token map).
TEST(ReferenceForward, EveryKeyVariantIsSeenByTheReference) {
    const std::vector<int32_t> toks = bg::random_prompt(16, 9, 512, 0);
    const auto base = ref::Dsv41Reference(bgtest::tiny_model()).logits(toks);
    for (const auto& v : bgtest::key_variants()) {
        const auto got = ref::Dsv41Reference(bgtest::key_variant_path(v)).logits(toks);
        double d = 0;
        for (size_t t = 0; t < toks.size(); ++t)
            for (size_t i = 0; i < got[t].size(); ++i) d = std::max(d, std::fabs(got[t][i] - base[t][i]));
        const bool same_model = v.name == "nextn-layer" || v.name == "vision-bias-and-hash-layers" ||
                                v.name == "token-map-longer";
        if (same_model) EXPECT_EQ(d, 0.0) << v.name;
        else EXPECT_GT(d, 1e-6) << v.name << " does not change the model: the agreement test would not see it";
    }
}

TEST(ReferenceForward, RouterKeySemantics) {
    const std::vector<double> logits = {0.5, -1.0, 2.0, 0.1, 3.0};
    const std::vector<double> bias = {0.0, 10.0, 0.0, 0.0, 0.0};  // selects expert 1 only
    auto p = [](double x) { return std::sqrt(std::log1p(std::exp(x))); };

    const ref::Dsv41Route raw = ref::dsv41_route(logits, bias, 2, false, 1.0);
    ASSERT_EQ(raw.ids, (std::vector<int32_t>{1, 4}));
    EXPECT_DOUBLE_EQ(raw.weights[0], p(-1.0));  // bias only selects; weight stays p
    EXPECT_DOUBLE_EQ(raw.weights[1], p(3.0));   // weights_norm false: not normalised

    const ref::Dsv41Route normed = ref::dsv41_route(logits, bias, 2, true, 0.0);  // scale 0 means 1
    EXPECT_NEAR(normed.weights[0] + normed.weights[1], 1.0, 1e-15);
    const ref::Dsv41Route scaled = ref::dsv41_route(logits, bias, 2, true, 1.5);
    EXPECT_NEAR(scaled.weights[0] + scaled.weights[1], 1.5, 1e-15);
    const ref::Dsv41Route unnormed_scaled = ref::dsv41_route(logits, {}, 1, false, 2.0);
    EXPECT_DOUBLE_EQ(unnormed_scaled.weights[0], 2.0 * p(3.0));

    // The sum's floor 2^-14 keeps tiny weights from blowing up.
    const ref::Dsv41Route tiny = ref::dsv41_route({-40.0, -41.0}, {}, 2, true, 1.0);
    EXPECT_NEAR(tiny.weights[0], p(-40.0) / 6.103515625e-5, 1e-12);
}

TEST(ReferenceForward, SwigluClampForms) {
    using ref::SwigluForm;
    auto silu = [](double x) { return x / (1 + std::exp(-x)); };
    EXPECT_DOUBLE_EQ(ref::dsv41_swiglu(20, 30, 0.0, SwigluForm::kDeepSeek), silu(20) * 30);
    EXPECT_DOUBLE_EQ(ref::dsv41_swiglu(20, 30, 1e-7, SwigluForm::kDeepSeek), silu(20) * 30);
    EXPECT_DOUBLE_EQ(ref::dsv41_swiglu(20, 30, 10, SwigluForm::kDeepSeek), silu(10) * 10);
    EXPECT_DOUBLE_EQ(ref::dsv41_swiglu(20, -30, 10, SwigluForm::kLlamaCpp), 10.0 * -10);
    EXPECT_DOUBLE_EQ(ref::dsv41_swiglu(-20, 3, 10, SwigluForm::kLlamaCpp), silu(-20) * 3);
}

TEST(ReferenceForward, MetadataKeySemantics) {
    const int64_t L = 6;
    {  // shexp absent falls back to exp; a scalar covers every layer
        const std::string path = variant("keys-a", [](bgtest::GgufEdit& e) {
            e.remove("deepseek41.swiglu_clamp_shexp");
            e.set("deepseek41.swiglu_clamp_exp", Value::f32(7.0f));
            e.remove("deepseek41.rope.scaling.type");
            e.set("deepseek41.rope.scaling.factor", Value::f32(0.0f));
        });
        const auto hp = ref::dsv41_read_hparams(bg::gguf::Reader::open(path));
        EXPECT_EQ(hp.clamp_exp, std::vector<double>(L, 7.0));
        EXPECT_EQ(hp.clamp_shexp, std::vector<double>(L, 7.0));
        EXPECT_EQ(hp.rope_scaling, ref::RopeScaling::kLinear);  // absent reads as linear
        EXPECT_EQ(hp.rope_factor, 1.0);                          // factor 0 means 1
    }
    {  // a per-layer shexp array longer than the main layers; linear scaling divides theta
        const std::string path = variant("keys-b", [](bgtest::GgufEdit& e) {
            e.set("deepseek41.swiglu_clamp_shexp", Value::array_f32({1, 2, 3, 4, 5, 6, 7, 8}));
            e.set("deepseek41.rope.scaling.type", Value::str("linear"));
            e.set("deepseek41.rope.scaling.factor", Value::f32(4.0f));
        });
        const auto hp = ref::dsv41_read_hparams(bg::gguf::Reader::open(path));
        EXPECT_EQ(hp.clamp_shexp, (std::vector<double>{1, 2, 3, 4, 5, 6}));
        EXPECT_DOUBLE_EQ(ref::dsv41_rope_theta(hp, 1e4, true, 16, 8, 3), 8 * std::pow(1e4, -6.0 / 16) / 4);
        EXPECT_DOUBLE_EQ(ref::dsv41_rope_theta(hp, 1e4, false, 16, 8, 3), 8 * std::pow(1e4, -6.0 / 16));
    }
    {  // "none" never scales; an unknown type is refused
        const std::string none = variant("keys-c", [](bgtest::GgufEdit& e) {
            e.set("deepseek41.rope.scaling.type", Value::str("none"));
        });
        const auto hp = ref::dsv41_read_hparams(bg::gguf::Reader::open(none));
        EXPECT_DOUBLE_EQ(ref::dsv41_rope_theta(hp, 1e4, true, 16, 8, 0), 8.0);
        const std::string bad = variant("keys-d", [](bgtest::GgufEdit& e) {
            e.set("deepseek41.rope.scaling.type", Value::str("longrope"));
        });
        EXPECT_THROW(ref::dsv41_read_hparams(bg::gguf::Reader::open(bad)), std::runtime_error);
    }
    {  // nextn_predict_layers counts only when the first MTP block's eh_proj exists
        const std::string no_mtp = variant("keys-e", [](bgtest::GgufEdit& e) {
            e.set("deepseek41.nextn_predict_layers", Value::u32(1));
        });
        EXPECT_EQ(ref::dsv41_read_hparams(bg::gguf::Reader::open(no_mtp)).n_layer, L);
        const std::string mtp = variant("keys-f", [](bgtest::GgufEdit& e) {
            e.set("deepseek41.nextn_predict_layers", Value::u32(1));
            e.add_tensor("blk.5.nextn.eh_proj.weight", {8}, bg::GgmlType::F32, std::vector<uint8_t>(32));
        });
        const auto hp = ref::dsv41_read_hparams(bg::gguf::Reader::open(mtp));
        EXPECT_EQ(hp.n_layer, L - 1);
        EXPECT_EQ(hp.n_layer_all, L);
        EXPECT_EQ(hp.compress_ratio.size(), static_cast<size_t>(L - 1));
    }
}

}  // namespace
