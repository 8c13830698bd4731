// The byte-level BPE alphabet (GPT-2's): every byte is written as one printable code point, so
// token texts in tokenizer.json and GGUF never hold raw control bytes or spaces.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace bg::tok {

class ByteAlphabet {
public:
    ByteAlphabet();
    // UTF-8 text of the code point standing for byte b.
    const std::string& text_of(uint8_t b) const { return text_[b]; }
    // The byte a code point stands for; -1 when it stands for none.
    int byte_of(uint32_t code_point) const;

private:
    std::array<std::string, 256> text_;
    std::unordered_map<uint32_t, uint8_t> byte_;
};

}  // namespace bg::tok
