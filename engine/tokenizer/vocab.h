// The tokenizer's data as llama.cpp keeps it in GGUF metadata (tokenizer.ggml.*): token texts
// in id order, their types, the BPE merges by rank, the special ids and the chat template.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace bg::tok {

// llama.cpp's token types (gguf-py TokenType); stored as int32 in tokenizer.ggml.token_type.
enum class TokenType : int32_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Vocab {
    std::string model;                // tokenizer.ggml.model: "gpt2" (byte-level BPE)
    std::string pre;                  // tokenizer.ggml.pre: "deepseek-v3"
    std::vector<std::string> tokens;  // id -> text (byte-level alphabet for normal tokens)
    std::vector<TokenType> types;     // id -> type
    std::vector<std::string> merges;  // rank -> "left right"
    int64_t bos_id = -1, eos_id = -1, pad_id = -1;  // -1: none
    bool add_bos = false, add_eos = false;
    std::string chat_template;        // tokenizer.chat_template ("" when absent)

    // The vocabulary a GGUF file carries; nullopt when it carries none (no tokenizer.ggml.model
    // key, or "none"). Throws bg::Error for a tokenizer that is present but malformed.
    static std::optional<Vocab> from_gguf(const gguf::Reader& r);
    // Sets the keys above on `w` (the ids only where >= 0, the template only where not empty).
    void write_gguf(gguf::Writer& w) const;
    // Checks the parts against each other (lengths, ids in range); throws bg::Error.
    void validate() const;
};

}  // namespace bg::tok
