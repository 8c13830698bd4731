// Writes the committed seed corpora under fuzz/corpus/ (GGUF files without the .gguf suffix,
// which .gitignore keeps out of git) with the project's own GGUF writer and
// make-model (run by hand after a format change: see fuzz/README.md).
//
//   fuzz_make_corpus OUT_DIR      writes OUT_DIR/gguf/*, OUT_DIR/gguf_split/*, OUT_DIR/model/* and OUT_DIR/blocks/*
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
#include "gguf/gguf_split.h"
#include "tensor/ggml_types.h"
#include "model/make_model.h"
#include "model/scale.h"
#include "shard_images.h"
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
// every tensor type with 1-4 dimensions, by seed name.
std::vector<std::pair<std::string, Writer>> hand_made() {
    std::vector<std::pair<std::string, Writer>> out;
    out.emplace_back("empty", Writer{});  // header only: no metadata, no tensors
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
        w.add_tensor("i8.2d", {32, 3}, GgmlType::I8);
        out.emplace_back("all-types", w);
    }
    {
        Writer w;  // alignment 1: tensors packed back to back
        w.set_alignment(1);
        w.set("general.name", Value::str("packed"));
        w.add_tensor("a", {3}, GgmlType::F32);
        w.add_tensor("b", {5}, GgmlType::F16);
        w.add_tensor("c", {32}, GgmlType::Q8_0);
        out.emplace_back("align1", w);
    }
    {
        Writer w;  // default alignment, a longer vocabulary-like string array
        std::vector<std::string> toks;
        for (int i = 0; i < 40; ++i) toks.push_back("tok" + std::to_string(i));
        w.set("tokenizer.ggml.tokens", Value::array_str(toks));
        w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
        w.add_tensor("token_embd.weight", {32, 40}, GgmlType::Q8_0);
        out.emplace_back("vocab", w);
    }
    return out;
}

void gguf_seeds(const std::string& dir) {
    for (const auto& [name, w] : hand_made()) write_with_zero_data(w, dir + "/" + name);
}

// A file's image with its data zeroed.
std::vector<uint8_t> zero_image(const Writer& w) {
    std::vector<uint8_t> b = w.header_bytes();
    b.resize(w.total_size(), 0);
    return b;
}

struct ModelSeed {
    const char* name;
    const char* scale;
};

// Four tiny deepseek41 layouts: compression roles and Engram (a), none of either with a shared
// expert (b), ratio-1 layers only with one Engram table (c), Engram tables in the fork-fp8 pair
// of I8 tensors (d); between them every allowed type.
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
    {"tiny-d", R"({
      "name": "fuzz-d", "n_layer": 3, "n_embd": 32, "n_vocab": 64, "n_head": 1, "head_dim": 32,
      "rope_dims": 8, "q_lora_rank": 32, "output_groups": 1, "output_lora_rank": 32, "n_expert": 8,
      "n_expert_used": 2, "n_ff_exp": 32, "context_length": 64, "sliding_window": 4,
      "compress_ratios": [0, 0, 1], "kv_source_layers": [2], "gated_layers": [],
      "key_owner_layers": [2], "index_source_layers": [2], "indexer_heads": 1,
      "indexer_head_dim": 32, "indexer_top_k": 2, "engram_layers": [0, 1], "engram_heads": 1,
      "engram_row_width": 64, "engram_rows_per_table": 1024, "engram_compressed_vocab": 32,
      "dense_type": "q8_0", "expert_type": "mxfp4", "engram_type": "fork-fp8"})"},
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

// The fork-fp8 pair of tiny-d broken one way at a time (its scales tensor dropped; its values
// retyped to Q8_0 beside the scales), so the replay walks those refusals too.
void fork_pair_variants(const std::string& dir) {
    const bg::gguf::Reader r = bg::gguf::Reader::open(dir + "/tiny-d");
    for (const char* variant : {"tiny-d-no-scales", "tiny-d-values-q8_0"}) {
        const bool drop = std::string(variant) == "tiny-d-no-scales";
        Writer w;  // its set() of general.alignment also sets where tensor data goes
        for (const auto& kv : r.kvs()) w.set(kv.key, kv.value);
        for (const auto& t : r.tensors()) {
            if (drop && t.name == "blk.0.engram_embd_scale.weight") continue;
            const bool retype = !drop && t.name == "blk.0.engram_embd.weight";
            w.add_tensor(t.name, t.ne, retype ? GgmlType::Q8_0 : t.type);
        }
        write_with_zero_data(w, dir + "/" + variant);
    }
}

// Split models as gguf-split writes them (input format: shard_images.h): the hand-made files
// split one tensor per shard and in two, a tiny deepseek41 model in three, a merged file
// (split.count 0), and shards given out of order.
void gguf_split_seeds(const std::string& dir, const std::string& tmp_dir) {
    for (const auto& [name, w] : hand_made()) {
        if (w.tensors().empty()) continue;
        std::vector<std::vector<uint8_t>> each, halves;
        for (const Writer& s : bg::gguf::split_writer(w, 1)) each.push_back(zero_image(s));
        spit(dir + "/" + name + "-each", bgfuzz::encode_shard_images(each));
        uint64_t bytes = 0;
        for (const auto& t : w.tensors()) bytes += (t.n_bytes + 31) / 32 * 32;
        for (const Writer& s : bg::gguf::split_writer(w, std::max<uint64_t>(1, bytes / 2))) halves.push_back(zero_image(s));
        if (halves.size() != each.size()) spit(dir + "/" + name + "-halves", bgfuzz::encode_shard_images(halves));
        if (name == "all-types") {
            std::swap(each[1], each[2]);
            spit(dir + "/" + name + "-swapped", bgfuzz::encode_shard_images(each));
        }
    }
    {
        Writer w = hand_made()[1].second;
        w.set("split.no", Value::u16(0));
        w.set("split.count", Value::u16(0));
        w.set("split.tensors.count", Value::i32(static_cast<int32_t>(w.tensors().size())));
        spit(dir + "/merged", bgfuzz::encode_shard_images({zero_image(w)}));
    }
    const bg::ModelScale scale = bg::parse_scale(kModels[1].scale, kModels[1].name);
    bg::MakeModelConfig cfg;
    cfg.out_path = tmp_dir + "/.split-seed.gguf";
    cfg.seed = 1;
    cfg.threads = 1;
    cfg.progress = false;
    cfg.split_max_bytes = 70000;
    const bg::MakeModelResult res = bg::make_model(scale, cfg);
    const bg::gguf::Reader r = bg::gguf::Reader::open(res.paths.at(0));
    std::vector<std::vector<uint8_t>> images;
    for (size_t k = 0; k < res.paths.size(); ++k) {
        std::vector<uint8_t> bytes = slurp(res.paths[k]);
        ::unlink(res.paths[k].c_str());
        std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(r.shards()[k].data_offset), bytes.end(), uint8_t{0});
        images.push_back(std::move(bytes));
    }
    spit(dir + "/" + kModels[1].name + "-split", bgfuzz::encode_shard_images(images));
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
        for (const std::string& d : {out, out + "/gguf", out + "/gguf_split", out + "/model", out + "/blocks"}) ::mkdir(d.c_str(), 0755);
        gguf_seeds(out + "/gguf");
        gguf_split_seeds(out + "/gguf_split", out);
        model_seeds(out + "/model", out + "/gguf");
        fork_pair_variants(out + "/model");
        blocks_seeds(out + "/blocks");
    } catch (const bg::Error& e) {
        std::fprintf(stderr, "fuzz_make_corpus: %s\n", e.what());
        return 1;
    }
    return 0;
}
