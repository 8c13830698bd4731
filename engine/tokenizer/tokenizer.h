// Byte-level BPE over a Vocab: special (added) tokens are found first, the text between them is
// split by the pre-tokenizer, and each piece's bytes are merged by rank into token ids.
// Decoding maps ids back to bytes. Matches HF tokenizers / llama.cpp for the gpt2 model type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace bg::tok {

class Tokenizer {
public:
    // Builds the lookup tables; throws bg::Error when the vocabulary is inconsistent (a merge
    // naming an unknown token, a byte with no token, an unknown pre-tokenizer).
    explicit Tokenizer(Vocab v);

    // Token ids of `text`. Ill-formed UTF-8 is first replaced (see sanitize_utf8). With
    // `add_special`, bos is put first when the vocabulary asks for it (add_bos_token), and eos
    // last likewise. Thread-safe.
    std::vector<int32_t> encode(std::string_view text, bool add_special) const;

    // The bytes of one token: normal tokens through the byte alphabet, control and user-defined
    // tokens as their text, unused (padding) tokens as nothing. Throws bg::Error for an id
    // outside the vocabulary.
    const std::string& piece(int32_t id) const;
    // The bytes of a sequence (may end inside a character; see StreamDecoder).
    std::string decode(const std::vector<int32_t>& ids) const;

    const Vocab& vocab() const { return v_; }
    int64_t size() const { return static_cast<int64_t>(v_.tokens.size()); }

private:
    struct Merge {
        uint32_t rank;
        int32_t result;
    };
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
    int32_t merge_of(int32_t left, int32_t right, uint32_t& rank) const;

    Vocab v_;
    ByteAlphabet alphabet_;
    PreTokenizer pre_;
    std::array<int32_t, 256> byte_token_{};         // byte -> its single-byte token
    std::unordered_map<uint64_t, Merge> merges_;   // (left id << 32 | right id) -> merge
    std::vector<std::string> pieces_;              // id -> decoded bytes
    // Special tokens by their first byte, longest first: found before BPE, leftmost-longest.
    std::array<std::vector<int32_t>, 256> special_by_first_;
};

}  // namespace bg::tok
