#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/check.h"

namespace bg::tok {

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

namespace {

struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        BG_CHECK(md != nullptr);
    }
    ~MatchData() { pcre2_match_data_free(md); }
};

// Splits every piece of `in` by one expression into `out`.
void split_by(const pcre2_code* code, const std::vector<std::string_view>& in, std::vector<std::string_view>& out) {
    MatchData m(code);
    for (std::string_view piece : in) {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
        size_t start = 0, prev = 0;
        while (start < piece.size()) {
            // The piece is the whole subject: look-arounds never see past its ends.
            const int rc = pcre2_match(code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK, m.md, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                fail("tokenizer: pre-tokenizer match failed: %s", reinterpret_cast<const char*>(msg));
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
            const size_t b = ov[0], e = ov[1];
            if (b > prev) out.push_back(piece.substr(prev, b - prev));
            if (e > b) {
                out.push_back(piece.substr(b, e - b));
                start = prev = e;
            } else {
                // An empty match: step over one character (never splitting it).
                start = b + 1;
                while (start < piece.size() && (static_cast<uint8_t>(piece[start]) & 0xC0) == 0x80) ++start;
            }
        }
        if (prev < piece.size()) out.push_back(piece.substr(prev));
    }
}

// ECMAScript's \s: the Unicode space separators, the ASCII layout controls, the line and
// paragraph separators and U+FEFF. Token ids are checked against the JavaScript tokenizer of
// the same vocabulary, and PCRE2's own \s differs from it on U+0085 and U+FEFF.
constexpr const char* kSpaceMembers = R"(\t\n\x{0B}\f\r\p{Zs}\x{2028}\x{2029}\x{FEFF})";

// `pattern` with \s and \S spelled as ECMAScript defines them.
std::string with_ecmascript_spaces(const std::string& pattern) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char e = pattern[++i];
            if (e == 's') {
                out += in_class ? kSpaceMembers : std::string("[") + kSpaceMembers + "]";
            } else if (e == 'S') {
                if (in_class) fail("tokenizer: \\S inside a character class is not supported");
                out += std::string("[^") + kSpaceMembers + "]";
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            // A ']' right after '[' or '[^' is a member, not the end.
            if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
            if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

}  // namespace

PreTokenizer PreTokenizer::for_type(const std::string& pre_type) { return PreTokenizer(patterns_for(pre_type)); }

std::vector<std::string> PreTokenizer::patterns_for(const std::string& pre_type) {
    if (pre_type == "deepseek-v3") {
        // DeepSeek-V3's tokenizer.json (and llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM):
        // digits in groups of at most three; runs of CJK ideographs and kana; then words, a
        // punctuation run with its line ends, and whitespace.
        return {
            R"(\p{N}{1,3})",
            "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
            R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
        };
    }
    fail("tokenizer: pre-tokenizer '%s' is not supported (known: deepseek-v3)", pre_type.c_str());
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
    for (const std::string& written : patterns) {
        const std::string p = with_ecmascript_spaces(written);
        int err = 0;
        PCRE2_SIZE at = 0;
        auto c = std::make_unique<Compiled>();
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
        if (!c->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail("tokenizer: cannot compile pre-tokenizer expression at offset %zu: %s", static_cast<size_t>(at),
                 reinterpret_cast<const char*>(msg));
        }
        // JIT makes matching several times faster where the platform has it; without it the
        // interpreter gives the same matches.
        pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
        exprs_.push_back(std::move(c));
    }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
    std::vector<std::string_view> cur{text}, next;
    if (text.empty()) return;
    for (const auto& e : exprs_) {
        next.clear();
        split_by(e->code, cur, next);
        cur.swap(next);
    }
    pieces.insert(pieces.end(), cur.begin(), cur.end());
}

}  // namespace bg::tok
