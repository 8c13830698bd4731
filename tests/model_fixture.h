// Shared set-up for model-level tests: synthetic models generated once per build tree and
// reused (make-model is deterministic, so a cached file is the same file).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "model/make_model.h"

namespace bgtest {

// Paths baked in at build time, overridable at run time (tests run from a copied build tree on
// the GPU machine): BG_SOURCE_DIR, BG_TEST_MODELS_DIR.
inline std::string source_path(const std::string& rel) {
    const char* env = std::getenv("BG_SOURCE_DIR");
    return std::string(env ? env : BG_SOURCE_DIR) + "/" + rel;
}

inline std::string test_models_dir() {
    const char* env = std::getenv("BG_TEST_MODELS_DIR");
    return env ? std::string(env) : std::string(BG_BINARY_DIR) + "/test-models";
}

// A small variant of the ci scale: 6 layers, 64 experts, the same roles pattern compressed
// into those layers, so a test can make many files quickly.
inline const char* kTinyScale = R"({
  "name": "tiny", "n_layer": 6, "n_embd": 64, "n_vocab": 512, "n_head": 2, "head_dim": 64,
  "rope_dims": 16, "q_lora_rank": 32, "output_groups": 2, "output_lora_rank": 32, "n_expert": 64,
  "n_expert_used": 6, "n_ff_exp": 32, "context_length": 1024, "sliding_window": 8,
  "compress_ratios": [0, 0, 2, 2, 1, 1], "kv_source_layers": [2, 4], "gated_layers": [2],
  "key_owner_layers": [2, 4], "index_source_layers": [2, 5], "indexer_heads": 2,
  "indexer_head_dim": 32, "indexer_top_k": 4, "engram_layers": [1, 3], "engram_row_width": 32,
  "engram_rows_per_table": 8192, "engram_compressed_vocab": 300, "dense_type": "q8_0"
})";

inline bool file_exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

// Cached files are named with this: bump it when make-model's bytes for a scale and seed change,
// so that a build tree's files from before are made again instead of reused. 2: the file type
// keys of a preset's mix.
inline constexpr int kMakeModelBytesVersion = 2;

// Path of a model of `scale` with `seed`, generated on first use.
inline std::string cached_model(const bg::ModelScale& scale, uint64_t seed, int threads = 0) {
    const std::string dir = test_models_dir();
    ::mkdir(dir.c_str(), 0755);
    const std::string path = dir + "/" + scale.name + "-seed" + std::to_string(seed) + "-v" +
                             std::to_string(kMakeModelBytesVersion) + ".gguf";
    if (!file_exists(path)) {
        bg::MakeModelConfig cfg;
        cfg.out_path = path;
        cfg.seed = seed;
        cfg.threads = threads;
        cfg.progress = false;
        bg::make_model(scale, cfg);
    }
    return path;
}

// The model of cached_model(scale, seed) split as make-model --split-max-size max_bytes (and
// gguf-split) split it, generated on first use; the path of its first shard.
inline std::string cached_split_model(const bg::ModelScale& scale, uint64_t seed, uint64_t max_bytes) {
    const std::string dir = test_models_dir();
    ::mkdir(dir.c_str(), 0755);
    const std::string name = scale.name + "-seed" + std::to_string(seed) + "-split" + std::to_string(max_bytes);
    // make-model renames the first shard into place last, so finding it means every shard is there.
    const std::string first_stem = name + "-00001-of-";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string f = e.path().filename().string();
        if (f.rfind(first_stem, 0) == 0 && f.size() == first_stem.size() + 10 && f.compare(f.size() - 5, 5, ".gguf") == 0)
            return e.path().string();
    }
    bg::MakeModelConfig cfg;
    cfg.out_path = dir + "/" + name + ".gguf";
    cfg.seed = seed;
    cfg.progress = false;
    cfg.split_max_bytes = max_bytes;
    return bg::make_model(scale, cfg).paths.at(0);
}

// Largest absolute difference relative to the largest magnitude of `a`.
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double scale = 0.0, diff = 0.0;
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
        diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    return a.size() == b.size() ? diff / std::max(scale, 1e-30) : INFINITY;
}

// The tiny scale widened to whole 256-weight blocks (hidden 256, experts 256 wide, q_lora 256,
// Engram rows of 256), so a preset's K-quant and IQ2_XXS types land on the experts, the dense
// matrices, the output head, the token embedding and the Engram table; attn_output_a and
// indexer.attn_k keep 64-wide rows, which fall back to Q8_0. 16 experts, top-4, 2 Engram heads,
// 6 layers (so Q4_K_M's use_more_bits gives layers 2 and 5 Q6_K ffn_down: layers differ in
// expert bytes). About 26 M weights: the 256-weight quantisers make a file in seconds.
inline const char* kTinyBlocksScale = R"({
  "name": "tiny-blocks", "n_layer": 6, "n_embd": 256, "n_vocab": 512, "n_head": 2, "head_dim": 64,
  "rope_dims": 16, "q_lora_rank": 256, "output_groups": 2, "output_lora_rank": 128, "n_expert": 16,
  "n_expert_used": 4, "n_ff_exp": 256, "context_length": 1024, "sliding_window": 8,
  "compress_ratios": [0, 0, 2, 2, 1, 1], "kv_source_layers": [2, 4], "gated_layers": [2],
  "key_owner_layers": [2, 4], "index_source_layers": [2, 5], "indexer_heads": 2,
  "indexer_head_dim": 32, "indexer_top_k": 4, "engram_layers": [1, 3], "engram_heads": 2,
  "engram_row_width": 256, "engram_rows_per_table": 4096, "engram_compressed_vocab": 300
})";

// The tiny-blocks scale written with a llama-quantize preset (make-model --quant).
inline bg::ModelScale tiny_blocks_scale(bg::QuantPreset p) {
    bg::ModelScale s = bg::parse_scale(kTinyBlocksScale, "tiny-blocks");
    s.quant = p;
    s.name = std::string("tiny-blocks-") + bg::quant_preset_name(p);
    return s;
}
inline std::string preset_model(bg::QuantPreset p, uint64_t seed = 3) { return cached_model(tiny_blocks_scale(p), seed); }

inline std::string ci_model() { return cached_model(bg::load_scale(source_path("scenarios/models/ci.json")), 7); }
inline std::string tiny_model(uint64_t seed = 3) { return cached_model(bg::parse_scale(kTinyScale, "tiny"), seed); }

}  // namespace bgtest
