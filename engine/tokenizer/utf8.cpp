#include "tokenizer/utf8.h"

namespace bg::tok {

namespace {

// Expected continuation count and the allowed range of the first continuation byte for a lead
// byte; the narrower first ranges rule out overlong forms, surrogates and code points above
// U+10FFFF. need = -1: the byte can never start a character.
struct Lead {
    int need;
    uint8_t lo, hi;
};

Lead lead_of(uint8_t b) {
    if (b < 0x80) return {0, 0, 0};
    if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
    if (b == 0xE0) return {2, 0xA0, 0xBF};
    if (b == 0xED) return {2, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
    if (b == 0xF0) return {3, 0x90, 0xBF};
    if (b == 0xF4) return {3, 0x80, 0x8F};
    if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
    return {-1, 0, 0};
}

// Length of the valid prefix of the character starting at s[i] (lead byte included), and
// whether it is complete.
size_t valid_prefix(std::string_view s, size_t i, bool& complete) {
    const Lead l = lead_of(static_cast<uint8_t>(s[i]));
    complete = false;
    if (l.need < 0) return 0;
    if (l.need == 0) {
        complete = true;
        return 1;
    }
    size_t j = i + 1;
    for (int k = 0; k < l.need; ++k, ++j) {
        if (j >= s.size()) return j - i;
        const uint8_t c = static_cast<uint8_t>(s[j]);
        const uint8_t lo = k == 0 ? l.lo : 0x80, hi = k == 0 ? l.hi : 0xBF;
        if (c < lo || c > hi) return j - i;
    }
    complete = true;
    return j - i;
}

}  // namespace

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        bool complete = false;
        const size_t n = valid_prefix(s, i, complete);
        if (complete) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out.append("\xEF\xBF\xBD");
            i += n > 0 ? n : 1;  // the byte that broke the sequence starts the next attempt
        }
    }
    return out;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

uint32_t next_code_point(std::string_view s, size_t& i) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    int n = b < 0x80 ? 0 : b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
    uint32_t cp = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
    ++i;
    for (; n > 0 && i < s.size(); --n, ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[i]) & 0x3F);
    return cp;
}

size_t incomplete_utf8_tail(std::string_view s) {
    // Only the last character start can be unfinished, and a character is at most 4 bytes: look
    // back over at most 3 continuation bytes for it.
    for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
        const size_t i = s.size() - back;
        if ((static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) continue;  // a continuation byte
        bool complete = false;
        const size_t n = valid_prefix(s, i, complete);
        return !complete && n > 0 && i + n == s.size() ? back : 0;
    }
    return 0;
}

}  // namespace bg::tok
