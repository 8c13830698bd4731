#include "tokenizer/byte_unicode.h"

#include "tokenizer/utf8.h"

namespace bg::tok {

ByteAlphabet::ByteAlphabet() {
    // Bytes that are printable Latin-1 characters stand for themselves; the other 68 take the
    // code points from U+0100 up, in byte order.
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
        append_utf8(text_[b], cp);
        byte_[cp] = static_cast<uint8_t>(b);
    }
}

int ByteAlphabet::byte_of(uint32_t code_point) const {
    const auto it = byte_.find(code_point);
    return it == byte_.end() ? -1 : it->second;
}

}  // namespace bg::tok
