// The end-of-generation set (tokenizer/end_of_generation.h) on DeepSeek-V3's real vocabulary
// and on small vocabularies built to exercise each of llama.cpp's rules: id keys, the tokenizer
// model's default eos, keys outside the vocabulary, fill-in-the-middle roles found by text, the
// text list, and the two exceptions.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "tokenizer/end_of_generation.h"
#include "tokenizer/tokenizer_fixture.h"
#include "util/check.h"

namespace {

using bg::gguf::Value;
using V = std::vector<int32_t>;

// A header-only GGUF with `tokens` (ids in order) and the given keys.
struct VocabFile {
    std::string model = "gpt2";
    std::vector<std::string> tokens;
    std::vector<std::pair<std::string, uint32_t>> ids;

    bg::tok::EndOfGeneration eog() const {
        bg::gguf::Writer w;
        w.set("tokenizer.ggml.model", Value::str(model));
        w.set("tokenizer.ggml.tokens", Value::array_str(tokens));
        for (const auto& [k, v] : ids) w.set(k, Value::u32(v));
        const std::vector<uint8_t> bytes = w.header_bytes();
        return bg::tok::end_of_generation(bg::gguf::Reader::parse(bytes.data(), bytes.size()));
    }
};

// n plain tokens "w0", "w1", ..., then `special` placed at the given ids.
std::vector<std::string> vocab(int n, const std::vector<std::pair<int, std::string>>& special) {
    std::vector<std::string> t;
    for (int i = 0; i < n; ++i) t.push_back(std::string(1, 'w').append(std::to_string(i)));
    for (const auto& [id, text] : special) t[id] = text;
    return t;
}

TEST(EndOfGeneration, DeepSeekV3StopsAtEndOfSentenceOnly) {
    const bg::tok::Vocab& v = bgtest::deepseek_tokenizer().vocab();
    bg::gguf::Writer w;
    v.write_gguf(w);
    const std::vector<uint8_t> bytes = w.header_bytes();
    const bg::tok::EndOfGeneration e = bg::tok::end_of_generation(bg::gguf::Reader::parse(bytes.data(), bytes.size()));
    // eos_token_id 1 is "<｜end▁of▁sentence｜>", which llama.cpp's list names too; DeepSeek's
    // other control tokens (<｜User｜>, <｜fim▁hole｜>, <|EOT|>, ...) are none of llama.cpp's texts.
    ASSERT_EQ(v.tokens[1], "<｜end▁of▁sentence｜>");
    EXPECT_EQ(e.ids, V{1});
    EXPECT_TRUE(e.ignored.empty());
    EXPECT_TRUE(e.contains(1));
    EXPECT_FALSE(e.contains(0));
}

TEST(EndOfGeneration, KeysNameTheirIdsAndTextsAddTheirs) {
    VocabFile f;
    f.tokens = vocab(40, {{5, "<|im_end|>"}, {9, "<|eot_id|>"}, {30, "<｜end▁of▁sentence｜>"}, {31, "<|im_start|>"}});
    f.ids = {{"tokenizer.ggml.eos_token_id", 2}, {"tokenizer.ggml.eot_token_id", 3}, {"tokenizer.ggml.eom_token_id", 4},
             {"tokenizer.ggml.fim_pad_token_id", 20}, {"tokenizer.ggml.fim_rep_token_id", 21},
             {"tokenizer.ggml.fim_sep_token_id", 22}, {"tokenizer.ggml.bos_token_id", 7}};
    EXPECT_EQ(f.eog().ids, (V{2, 3, 4, 5, 9, 20, 21, 22, 30}));
}

TEST(EndOfGeneration, WithoutAnEosKeyTheTokenizerModelsDefaultStands) {
    VocabFile f;
    f.tokens = vocab(20, {});
    EXPECT_EQ(f.eog().ids, V{11}) << "gpt2's default eos";
    f.model = "llama";
    EXPECT_EQ(f.eog().ids, V{2});
    f.model = "t5";
    EXPECT_EQ(f.eog().ids, V{1});
    f.model = "bert";
    EXPECT_EQ(f.eog().ids, V{}) << "bert has no default eos";
    f.model = "gpt2";
    f.tokens = vocab(11, {});
    EXPECT_EQ(f.eog().ids, V{}) << "a default outside the vocabulary is dropped";
}

TEST(EndOfGeneration, AKeyOutsideTheVocabularyIsIgnoredAndSaidSo) {
    VocabFile f;
    f.tokens = vocab(20, {{6, "<|fim_pad|>"}});
    f.ids = {{"tokenizer.ggml.eos_token_id", 20}, {"tokenizer.ggml.eot_token_id", 500},
             {"tokenizer.ggml.fim_pad_token_id", 99}};
    const bg::tok::EndOfGeneration e = f.eog();
    // eos falls back to gpt2's default 11; fim_pad to the token found by its text.
    EXPECT_EQ(e.ids, (V{6, 11}));
    ASSERT_EQ(e.ignored.size(), 3u);
    EXPECT_NE(e.ignored[0].find("fim_pad_token_id 99 is outside the 20 tokens"), std::string::npos) << e.ignored[0];
    EXPECT_NE(e.ignored[1].find("eos_token_id 20 is outside"), std::string::npos) << e.ignored[1];
    EXPECT_NE(e.ignored[2].find("eot_token_id 500 is outside"), std::string::npos) << e.ignored[2];
}

TEST(EndOfGeneration, FimRolesAreFoundByTextOnlyWithoutTheirKey) {
    VocabFile f;
    f.tokens = vocab(30, {{3, "<PAD>"}, {8, "<|fim_pad|>"}, {12, "<reponame>"}, {14, "<|file_sep|>"}, {16, "<|fim_prefix|>"}});
    f.ids = {{"tokenizer.ggml.eos_token_id", 1}};
    // pad: the lowest of its two texts; repo and separator by theirs; a prefix never ends.
    EXPECT_EQ(f.eog().ids, (V{1, 3, 12, 14}));
    f.ids.push_back({"tokenizer.ggml.fim_pad_token_id", 25});
    f.ids.push_back({"tokenizer.ggml.fim_rep_token_id", 26});
    EXPECT_EQ(f.eog().ids, (V{1, 14, 25, 26})) << "a key replaces the text search of its role";
}

TEST(EndOfGeneration, LlamaCppsTwoExceptionsApply) {
    VocabFile f;
    f.ids = {{"tokenizer.ggml.eos_token_id", 1}};
    f.tokens = vocab(20, {{4, "<|end|>"}, {5, "<|return|>"}, {6, "<|call|>"}});
    EXPECT_EQ(f.eog().ids, (V{1, 5, 6})) << "harmony: <|end|> does not end generation";
    f.tokens = vocab(20, {{4, "<|end|>"}, {5, "<|flush|>"}, {6, "<|calls|>"}});
    EXPECT_EQ(f.eog().ids, (V{1, 5, 6})) << "solar-open likewise";
    f.tokens = vocab(20, {{4, "<|end|>"}, {6, "<|call|>"}});
    EXPECT_EQ(f.eog().ids, (V{1, 4, 6})) << "<|call|> alone keeps <|end|>";
    f.tokens = vocab(20, {{4, "</s>"}, {7, "<|tool_response>"}});
    EXPECT_EQ(f.eog().ids, (V{1, 7})) << "gemma4: </s> does not end generation";
    f.tokens = vocab(20, {{4, "</s>"}});
    EXPECT_EQ(f.eog().ids, (V{1, 4}));
    f.ids = {{"tokenizer.ggml.eos_token_id", 4}};
    f.tokens = vocab(20, {{4, "<|end|>"}, {5, "<|return|>"}, {6, "<|call|>"}});
    EXPECT_EQ(f.eog().ids, (V{5, 6})) << "the exception applies to an id a key names too";
}

TEST(EndOfGeneration, AFileWithoutAVocabularyHasNone) {
    VocabFile f;
    f.model = "none";
    f.tokens = vocab(20, {{3, "<|im_end|>"}});
    f.ids = {{"tokenizer.ggml.eos_token_id", 1}};
    EXPECT_TRUE(f.eog().empty());
    bg::gguf::Writer w;
    w.set("tokenizer.ggml.eos_token_id", Value::u32(1));
    const std::vector<uint8_t> bytes = w.header_bytes();
    EXPECT_TRUE(bg::tok::end_of_generation(bg::gguf::Reader::parse(bytes.data(), bytes.size())).empty());
}

TEST(EndOfGeneration, AModelWithoutTokensIsAnError) {
    bg::gguf::Writer w;
    w.set("tokenizer.ggml.model", Value::str("gpt2"));
    const std::vector<uint8_t> bytes = w.header_bytes();
    EXPECT_THROW(bg::tok::end_of_generation(bg::gguf::Reader::parse(bytes.data(), bytes.size())), bg::Error);
}

}  // namespace
