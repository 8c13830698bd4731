// Writes the committed seed corpora under fuzz/corpus/ (GGUF files without the .gguf suffix,
// which .gitignore keeps out of git) with the project's own GGUF writer and
// make-model (run by hand after a format change: see fuzz/README.md).
//
//   fuzz_make_corpus OUT_DIR      writes OUT_DIR/gguf/*, OUT_DIR/model/* and OUT_DIR/blocks/*
//
// Model seeds are deliberately tiny scales (a few layers, 8 experts, n_embd 32, vocabulary 64),
// so each whole file is well under 300 KB. Their data sections are zeroed after make-model: the
// reader and the validator look only at the header and the file size, and zeros keep git small.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/ggml_types.h"
#include "model/make_model.h"
#include "model/scale.h"
#include "util/check.h"

namespace {

using bg::GgmlType;
using bg::gguf::Value;
using bg::gguf::ValueType;
using bg::gguf::Writer;

std::vector<uint8_t> slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) bg::fail("cannot read '%s'", path.c_str());
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) bg::fail("cannot write '%s'", path.c_str());
    std::printf("%s: %zu bytes\n", path.c_str(), bytes.size());
}

void write_with_zero_data(const Writer& w, const std::string& path) {
    uint64_t most = 1;
    for (const auto& t : w.tensors()) most = std::max(most, t.n_bytes);
    const std::vector<uint8_t> zeros(most, 0);
    w.write_file(path, std::vector<const void*>(w.tensors().size(), zeros.data()));
    std::printf("%s: %llu bytes\n", path.c_str(), (unsigned long long)w.total_size());
}

// Hand-made GGUF files covering every value type, nested and empty arrays, alignments and
// every tensor type with 1-4 dimensions.
void gguf_seeds(const std::string& dir) {
    {
        Writer w;  // header only: no metadata, no tensors
        write_with_zero_data(w, dir + "/empty");
    }
    {
        Writer w;
        w.set("general.architecture", Value::str("test"));
        w.set("t.u8", Value::u8(200));
        w.set("t.i8", Value::i8(-100));
        w.set("t.u16", Value::u16(60000));
        w.set("t.i16", Value::i16(-30000));
        w.set("t.u32", Value::u32(4000000000u));
        w.set("t.i32", Value::i32(-2000000000));
        w.set("t.u64", Value::u64(~0ull));
        w.set("t.i64", Value::i64(-(1ll << 62)));
        w.set("t.f32", Value::f32(1.5f));
        w.set("t.f64", Value::f64(-2.25));
        w.set("t.bool", Value::boolean(true));
        w.set("t.str", Value::str("hello"));
        w.set("t.empty_str", Value::str(""));
        w.set("t.arr_u64", Value::array_u64({1, 2, 3}));
        w.set("t.arr_u32", Value::array_u32({7, 8}));
        w.set("t.arr_i32", Value::array_i32({-1, 0, 1}));
        w.set("t.arr_f32", Value::array_f32({0.5f, -0.25f}));
        w.set("t.arr_str", Value::array_str({"a", "bc", ""}));
        w.set("t.arr_empty", Value::array(ValueType::UINT8, {}));
        w.set("t.arr_bool", Value::array(ValueType::BOOL, {Value::boolean(false), Value::boolean(true)}));
        w.set("t.arr_nested", Value::array(ValueType::ARRAY, {Value::array_u32({1}), Value::array_str({"x"})}));
        w.set_alignment(64);
        w.add_tensor("f32.1d", {8}, GgmlType::F32);
        w.add_tensor("f16.2d", {4, 3}, GgmlType::F16);
        w.add_tensor("bf16.3d", {2, 2, 2}, GgmlType::BF16);
        w.add_tensor("q8_0.4d", {32, 2, 1, 2}, GgmlType::Q8_0);
        w.add_tensor("mxfp4.2d", {64, 2}, GgmlType::MXFP4);
        write_with_zero_data(w, dir + "/all-types");
    }
    {
        Writer w;  // alignment 1: tensors packed back to back
        w.set_alignment(1);
        w.set("general.name", Value::str("packed"));
        w.add_tensor("a", {3}, GgmlType::F32);
        w.add_tensor("b", {5}, GgmlType::F16);
        w.add_tensor("c", {32}, GgmlType::Q8_0);
        write_with_zero_data(w, dir + "/align1");
    }
    {
        Writer w;  // default alignment, a longer vocabulary-like string array
        std::vector<std::string> toks;
        for (int i = 0; i < 40; ++i) toks.push_back("tok" + std::to_string(i));
        w.set("tokenizer.ggml.tokens", Value::array_str(toks));
        w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
        w.add_tensor("token_embd.weight", {32, 40}, GgmlType::Q8_0);
        write_with_zero_data(w, dir + "/vocab");
    }
}

struct ModelSeed {
    const char* name;
    const char* scale;
};

// Three tiny deepseek41 layouts: compression roles and Engram (a), none of either with a shared
// expert (b), ratio-1 layers only with one Engram table (c); between them every allowed type.
const ModelSeed kModels[] = {
    {"tiny-a", R"({
      "name": "fuzz-a", "n_layer": 4, "n_embd": 32, "n_vocab": 64, "n_head": 1, "head_dim": 32,
      "rope_dims": 8, "q_lora_rank": 32, "output_groups": 1, "output_lora_rank": 32, "n_expert": 8,
      "n_expert_used": 2, "n_ff_exp": 32, "context_length": 64, "sliding_window": 4,
      "compress_ratios": [0, 2, 2, 1], "kv_source_layers": [1, 3], "gated_layers": [1],
      "key_owner_layers": [1, 3], "index_source_layers": [1, 3], "indexer_heads": 1,
      "indexer_head_dim": 32, "indexer_top_k": 2, "engram_layers": [0, 2], "engram_heads": 1,
      "engram_row_width": 32, "engram_rows_per_table": 1024, "engram_compressed_vocab": 32,
      "dense_type": "q8_0", "expert_type": "mxfp4", "engram_type": "q8_0"})"},
    {"tiny-b", R"({
      "name": "fuzz-b", "n_layer": 2, "n_embd": 32, "n_vocab": 64, "n_head": 2, "head_dim": 32,
      "rope_dims": 8, "q_lora_rank": 32, "output_groups": 2, "output_lora_rank": 32, "n_expert": 8,
      "n_expert_used": 2, "n_expert_shared": 1, "n_ff_exp": 32, "context_length": 64,
      "sliding_window": 4, "compress_ratios": [0, 0], "kv_source_layers": [], "gated_layers": [],
      "key_owner_layers": [], "index_source_layers": [], "indexer_heads": 1,
      "indexer_head_dim": 32, "indexer_top_k": 2, "engram_layers": [],
      "dense_type": "bf16", "expert_type": "f16", "router_type": "bf16"})"},
    {"tiny-c", R"({
      "name": "fuzz-c", "n_layer": 3, "n_embd": 32, "n_vocab": 64, "n_head": 1, "head_dim": 32,
      "rope_dims": 8, "q_lora_rank": 32, "output_groups": 1, "output_lora_rank": 32, "n_expert": 8,
      "n_expert_used": 2, "n_ff_exp": 32, "context_length": 64, "sliding_window": 4,
      "compress_ratios": [0, 1, 1], "kv_source_layers": [1, 2], "gated_layers": [],
      "key_owner_layers": [1], "index_source_layers": [1, 2], "indexer_heads": 1,
      "indexer_head_dim": 32, "indexer_top_k": 2, "engram_layers": [1], "engram_heads": 1,
      "engram_row_width": 32, "engram_rows_per_table": 1024, "engram_compressed_vocab": 32,
      "dense_type": "f16", "expert_type": "q8_0", "engram_type": "bf16", "router_type": "f32"})"},
};

void model_seeds(const std::string& dir, const std::string& gguf_dir) {
    for (const ModelSeed& m : kModels) {
        const bg::ModelScale scale = bg::parse_scale(m.scale, m.name);
        const std::string tmp = dir + "/." + m.name + ".tmp";
        bg::MakeModelConfig cfg;
        cfg.out_path = tmp;
        cfg.seed = 1;
        cfg.threads = 1;
        cfg.progress = false;
        bg::make_model(scale, cfg);
        const bg::gguf::Reader r = bg::gguf::Reader::open(tmp);
        std::vector<uint8_t> bytes = slurp(tmp);
        ::unlink(tmp.c_str());
        std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(r.data_offset()), bytes.end(), uint8_t{0});
        spit(dir + "/" + m.name, bytes);
        // The smallest model is a seed for the plain reader too: a real header with many kvs.
        if (&m == &kModels[1]) spit(gguf_dir + "/" + m.name, bytes);
    }
}

// fuzz_blocks seeds: byte 0 the type's index in fuzz_blocks.cpp's kTypes, then per type blocks
// quantize_row wrote, random blocks whose FP16 super-scales are NaN, inf, subnormal or the
// largest finite, and all-ones bytes; plus special floats to quantise.
void blocks_seeds(const std::string& dir) {
    const GgmlType types[] = {GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K,  GgmlType::Q6_K, GgmlType::IQ2_XXS};
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t k = 0; k < std::size(types); ++k) {
        const GgmlType t = types[k];
        const bg::TypeTraits& tr = bg::type_traits(t);
        const int64_t n = 512;
        const uint64_t bytes = bg::row_bytes(t, n);
        std::vector<float> x(n);
        for (float& v : x) v = nd(rng);
        std::vector<uint8_t> seed(1 + bytes, static_cast<uint8_t>(k));
        bg::quantize_row(t, x.data(), seed.data() + 1, n);
        spit(dir + "/" + tr.name + "-quantised", seed);
        // Scale fields: for the 256-weight types the FP16 d (and dmin) at their ggml offsets; for
        // Q8_0 the FP16 d at 0; MXFP4's E8M0 byte at 0 takes the low byte.
        std::vector<int> offs;
        switch (t) {
            case GgmlType::Q2_K: offs = {80, 82}; break;
            case GgmlType::Q3_K: offs = {108}; break;
            case GgmlType::Q4_K:
            case GgmlType::Q5_K: offs = {0, 2}; break;
            case GgmlType::Q6_K: offs = {208}; break;
            default: offs = {0}; break;
        }
        const uint16_t halves[] = {0x7E00, 0x7C00, 0xFC00, 0x0001, 0x03FF, 0x7BFF, 0x8000};
        for (uint8_t& b : seed) b = static_cast<uint8_t>(byte(rng));
        seed[0] = static_cast<uint8_t>(k);
        size_t h = 0;
        for (uint64_t blk = 0; blk < bytes / static_cast<uint64_t>(tr.block_bytes); ++blk)
            for (int off : offs) {
                const uint16_t v = halves[h++ % std::size(halves)];
                const uint64_t at = 1 + blk * static_cast<uint64_t>(tr.block_bytes) + static_cast<uint64_t>(off);
                seed[at] = static_cast<uint8_t>(v & 0xFF);
                if (t != GgmlType::MXFP4) seed[at + 1] = static_cast<uint8_t>(v >> 8);
            }
        spit(dir + "/" + tr.name + "-extreme-scales", seed);
        std::fill(seed.begin() + 1, seed.end(), uint8_t{0xFF});
        spit(dir + "/" + tr.name + "-all-ones", seed);
    }
    // Floats to quantise (as Q4_K): non-finite, huge, denormal, zero, ordinary.
    std::vector<float> f(256);
    for (float& v : f) v = nd(rng);
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), 1e30f, -3e38f, 1e-40f, 0.0f, -0.0f};
    for (size_t i = 0; i < std::size(specials); ++i) f[31 * i + 5] = specials[i];
    std::vector<uint8_t> seed(1 + 4 * f.size());
    seed[0] = 4;  // Q4_K
    std::memcpy(seed.data() + 1, f.data(), 4 * f.size());
    spit(dir + "/floats-special", seed);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: fuzz_make_corpus OUT_DIR\n");
        return 2;
    }
    const std::string out = argv[1];
    try {
        for (const std::string& d : {out, out + "/gguf", out + "/model", out + "/blocks"}) ::mkdir(d.c_str(), 0755);
        gguf_seeds(out + "/gguf");
        model_seeds(out + "/model", out + "/gguf");
        blocks_seeds(out + "/blocks");
    } catch (const bg::Error& e) {
        std::fprintf(stderr, "fuzz_make_corpus: %s\n", e.what());
        return 1;
    }
    return 0;
}
