// betelgeuse tokenize: a model's tokenizer on a text, as llama.cpp's llama-tokenize shows it.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/check.h"
#include "util/file_io.h"

namespace bg::cli {

namespace {

struct TokenizeArgs {
    std::string model, text, file;
    bool ids_only = false, no_bos = false, show_count = false;
};

// A token's bytes for display: printable as they are, others as \xNN.
std::string shown(const std::string& bytes) {
    std::string out;
    for (unsigned char c : bytes) {
        if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7F) out += strf("\\x%02x", c);
        else out += static_cast<char>(c);
    }
    return out;
}

void tokenize(const TokenizeArgs& a) {
    if (a.text.empty() == a.file.empty()) fail("tokenize: give the text or -f FILE (one of them)");
    std::string text = a.text;
    if (!a.file.empty()) text = read_file(a.file, "tokenize");
    const gguf::Reader r = gguf::Reader::open(a.model);
    std::optional<tok::Vocab> v = tok::Vocab::from_gguf(r);
    if (!v) fail("tokenize: '%s' carries no tokenizer (tokenizer.ggml.model)", a.model.c_str());
    const tok::Tokenizer t(std::move(*v));
    const std::vector<int32_t> ids = t.encode(text, !a.no_bos);
    if (a.ids_only) {
        std::string line = "[";
        for (size_t i = 0; i < ids.size(); ++i) line += strf("%s%d", i ? ", " : "", ids[i]);
        std::printf("%s]\n", line.c_str());
    } else {
        for (int32_t id : ids) std::printf("%6d -> '%s'\n", id, shown(t.piece(id)).c_str());
    }
    if (a.show_count) std::printf("Total number of tokens: %zu\n", ids.size());
}

}  // namespace

void register_tokenize(CLI::App& app) {
    auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text under a model's tokenizer");
    static TokenizeArgs a;
    cmd->add_option("model", a.model, "GGUF model file")->required();
    cmd->add_option("text", a.text, "Text to tokenize");
    cmd->add_option("-f,--file", a.file, "File of text to tokenize");
    cmd->add_flag("--ids", a.ids_only, "Print only the ids, as a list");
    cmd->add_flag("--no-bos", a.no_bos, "Do not put the bos token first");
    cmd->add_flag("--show-count", a.show_count, "Print the number of tokens");
    cmd->callback([] { tokenize(a); });
}

}  // namespace bg::cli
