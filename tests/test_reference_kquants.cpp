// A model stored as llama-quantize stores one: the 256-weight types (Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ2_XXS) on routed experts (gate, up and down of a layer each its own type, layers
// differing), dense matrices, the output head, the token embedding, an Engram table and a 1-D
// weight, every other tensor as make-model wrote it. The engine opens it, and its CPU forward
// (precise matmuls: weights through dequantize_row) agrees with the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/thread_pool.h"
#include "gguf_edit.h"
#include "model/dsv41_forward.h"
#include "model/dsv41_model.h"
#include "model_fixture.h"
#include "reference/dsv41_reference.h"
#include "runtime/providers.h"
#include "runtime/runner.h"

namespace {

using bg::GgmlType;

// The tiny scale (tests/model_fixture.h) widened so rows are whole 256-blocks: n_embd, the
// expert FFN and the Engram rows 256 wide; 8 experts keep the file small.
const char* kScale = R"({
  "name": "kq256", "n_layer": 6, "n_embd": 256, "n_vocab": 512, "n_head": 2, "head_dim": 64,
  "rope_dims": 16, "q_lora_rank": 32, "output_groups": 2, "output_lora_rank": 32, "n_expert": 8,
  "n_expert_used": 2, "n_ff_exp": 256, "context_length": 1024, "sliding_window": 8,
  "compress_ratios": [0, 0, 2, 2, 1, 1], "kv_source_layers": [2, 4], "gated_layers": [2],
  "key_owner_layers": [2, 4], "index_source_layers": [2, 5], "indexer_heads": 2,
  "indexer_head_dim": 32, "indexer_top_k": 4, "engram_layers": [1, 3], "engram_row_width": 256,
  "engram_rows_per_table": 8192, "engram_compressed_vocab": 300, "dense_type": "q8_0"
})";

constexpr GgmlType kTypes[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                               GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS};

// The K-quant variant of the kq256 model, made once per process.
std::string make_kquant_model() {
    const std::string src = bgtest::cached_model(bg::parse_scale(kScale, "kq256"), 5);
    const std::string dst = bgtest::test_models_dir() + "/kq256-seed5-kquants.gguf";
    bgtest::GgufEdit e(src);
    auto retype = [&](const std::string& name, GgmlType t) { e.retype(name, t, e.values(name)); };
    retype("token_embd.weight", GgmlType::Q4_K);
    retype("output.weight", GgmlType::Q6_K);
    retype("blk.0.attn_norm.weight", GgmlType::Q4_K);  // a 1-D weight, dequantised at load
    retype("blk.1.engram_embd.weight", GgmlType::Q3_K);
    retype("blk.3.engram_embd.weight", GgmlType::Q6_K);
    for (int l = 0; l < 6; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        retype(b + "ffn_gate_exps.weight", kTypes[l % 6]);
        retype(b + "ffn_up_exps.weight", kTypes[(l + 1) % 6]);
        retype(b + "ffn_down_exps.weight", kTypes[(l + 3) % 6]);
        retype(b + "attn_q_a.weight", kTypes[(l + 2) % 6]);
        retype(b + "attn_kv.weight", kTypes[(l + 4) % 6]);
        retype(b + "ffn_gate_shexp.weight", kTypes[(l + 5) % 6]);
        retype(b + "ffn_down_shexp.weight", kTypes[l % 6]);
    }
    e.write(dst);
    return dst;
}
const std::string& kquant_model() {
    static const std::string path = make_kquant_model();
    return path;
}

}  // namespace

TEST(ReferenceKQuants, ModelOpensWithTheTypesWhereTheyWereWritten) {
    const std::unique_ptr<bg::dsv41::Model> m = bg::dsv41::Model::open(kquant_model());
    const bg::gguf::Reader& r = m->gguf();
    EXPECT_EQ(r.tensor("token_embd.weight")->type, GgmlType::Q4_K);
    EXPECT_EQ(r.tensor("output.weight")->type, GgmlType::Q6_K);
    EXPECT_EQ(r.tensor("blk.1.engram_embd.weight")->type, GgmlType::Q3_K);
    for (int l = 0; l < 6; ++l) {
        EXPECT_EQ(r.tensor("blk." + std::to_string(l) + ".ffn_gate_exps.weight")->type, kTypes[l % 6]);
        EXPECT_EQ(r.tensor("blk." + std::to_string(l) + ".ffn_down_exps.weight")->type, kTypes[(l + 3) % 6]);
    }
}

// Greedy tokens of a 24-token prompt + 8 generated, then the logits of every position, engine
// (CPU, precise matmuls) against the reference, which reads the same weights through
// dequantize_row (its decoders are checked against ggml's in test_kquants). Tolerance 1e-5
// relative, as for the unquantised tiny model.
TEST(ReferenceKQuants, EngineCpuForwardAgreesWithReference) {
    const std::string path = kquant_model();
    const ref::Dsv41Reference ref(path);
    const int64_t n_vocab = ref.hparams().n_vocab;
    const std::vector<int32_t> prompt = bg::random_prompt(24, 5, n_vocab, 0);
    const int64_t n_gen = 8;

    bg::dsv41::ForwardConfig fc;
    fc.n_ctx = 64;
    fc.max_ubatch = 16;
    fc.matmul = bg::MatmulMode::kPrecise;
    const std::unique_ptr<bg::dsv41::Model> model = bg::dsv41::Model::open(path);
    bg::cpu::ThreadPool pool(2);
    bg::PreadExpertProvider experts(*model);
    bg::PreadEngramProvider engram(*model);
    bg::dsv41::Forward fwd(*model, bg::cpu::make_cpu_ops(pool), experts, engram, fc);
    bg::Runner runner(*model, fwd);

    std::vector<float> last;
    runner.prefill(prompt, bg::PrefillOrder::kLayerMajor, 16, &last);
    const std::vector<int32_t> eng_tokens = runner.decode(last, n_gen);
    const std::vector<int32_t> ref_tokens = ref.greedy(prompt, n_gen);
    EXPECT_EQ(ref_tokens, eng_tokens);

    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), ref_tokens.begin(), ref_tokens.end());
    std::vector<float> all;
    runner.prefill(seq, bg::PrefillOrder::kLayerMajor, 16, &last, &all);
    ASSERT_EQ(all.size(), seq.size() * static_cast<size_t>(n_vocab));
    const double rel = ref::max_rel_diff(ref.logits(seq), all, n_vocab);
    std::printf("K-quant model, engine vs reference: max rel diff %.3g\n", rel);
    EXPECT_LT(rel, 1e-5);
}
