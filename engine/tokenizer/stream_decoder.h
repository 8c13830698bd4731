// Turns generated token ids into text as they come: a token may end inside a UTF-8 character
// (byte-level BPE splits characters freely), so bytes that could still become a character are
// held back until the next token completes them or the stream ends.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace bg::tok {

class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& t) : t_(t) {}
    // The text that is final once token `id` is added (possibly empty).
    std::string push(int32_t id);
    // Whatever was held back, as it is (bytes of an unfinished character included), so that
    // the concatenation of every push and the finish equals Tokenizer::decode of all ids.
    std::string finish();

private:
    const Tokenizer& t_;
    std::string held_;
};

}  // namespace bg::tok
