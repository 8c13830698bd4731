// UTF-8 helpers the tokenizer needs at its edges: making untrusted bytes valid before the
// pre-tokenizer sees them, and finding where a byte stream can be cut without splitting a
// character (streaming output).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bg::tok {

// Each ill-formed subsequence replaced by U+FFFD, the way the WHATWG Encoding Standard's UTF-8
// decoder does (one U+FFFD per maximal subpart). Node's TextDecoder does the same, so text read
// from a file gives the same code points to both tokenizers.
std::string sanitize_utf8(std::string_view bytes);

// Appends code point `cp` (<= 0x10FFFF) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// Decodes the code point at bytes[i] of a valid UTF-8 string; advances i.
uint32_t next_code_point(std::string_view valid_utf8, size_t& i);

// How many bytes at the end of `bytes` form the start of a character that more bytes could
// still complete (0 when the end is a character boundary or the tail can never become valid).
size_t incomplete_utf8_tail(std::string_view bytes);

}  // namespace bg::tok
