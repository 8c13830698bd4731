#include "tokenizer/end_of_generation.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "util/check.h"

namespace bg::tok {

namespace {

// The tables below are llama.cpp's data (src/llama-vocab.cpp, llama_vocab::impl::load), kept as
// data: which default eos each tokenizer model has, and which token texts mark a role.

struct DefaultEos {
    std::string_view model;
    int32_t eos;
};
constexpr DefaultEos kDefaultEos[] = {{"llama", 2}, {"gpt2", 11}, {"t5", 1}, {"plamo2", 2}};

// Texts that end generation wherever they appear in a vocabulary.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["};

// The fill-in-the-middle roles that end generation, found by text when their key is absent.
struct FimRole {
    const char* key;
    std::vector<std::string_view> texts;
};

const std::vector<FimRole>& fim_roles() {
    static const std::vector<FimRole> roles = {
        {"tokenizer.ggml.fim_pad_token_id", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
        {"tokenizer.ggml.fim_rep_token_id", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
        {"tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"}},
    };
    return roles;
}

template <size_t N>
bool one_of(const std::string& s, const std::string_view (&list)[N]) {
    return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

}  // namespace

bool EndOfGeneration::contains(int32_t id) const { return std::binary_search(ids.begin(), ids.end(), id); }

EndOfGeneration end_of_generation(const gguf::Reader& r) {
    EndOfGeneration out;
    constexpr const char* kModel = "tokenizer.ggml.model";
    const std::string model = r.find(kModel) ? r.get_str(kModel) : "none";
    if (model == "none" || model == "no_vocab") return out;
    const std::vector<std::string> tokens = r.get_arr_str("tokenizer.ggml.tokens");
    const int64_t n = static_cast<int64_t>(tokens.size());

    // An id key: its value when present and inside the vocabulary.
    auto key_id = [&](const char* key) -> std::optional<int32_t> {
        if (!r.find(key)) return std::nullopt;
        const uint32_t id = r.get_u32(key);
        if (static_cast<int64_t>(id) >= n) {
            out.ignored.push_back(strf("%s %u is outside the %lld tokens: ignored", key, id, (long long)n));
            return std::nullopt;
        }
        return static_cast<int32_t>(id);
    };

    std::vector<int32_t> set;
    for (const FimRole& role : fim_roles()) {
        std::optional<int32_t> id = key_id(role.key);
        for (int64_t t = 0; t < n && !id; ++t)
                if (std::find(role.texts.begin(), role.texts.end(), tokens[t]) != role.texts.end())
                    id = static_cast<int32_t>(t);
        if (id) set.push_back(*id);
    }
    for (int64_t t = 0; t < n; ++t)
        if (one_of(tokens[t], kEogTexts)) set.push_back(static_cast<int32_t>(t));

    // Without a usable key (absent, or outside the vocabulary) the model's default stands.
    constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
    std::optional<int32_t> eos = key_id(kEos);
    for (const DefaultEos& d : kDefaultEos)
        if (!eos && d.model == model && d.eos < n) eos = d.eos;
    if (eos) set.push_back(*eos);
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
        if (std::optional<int32_t> id = key_id(key)) set.push_back(*id);

    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());

    // llama.cpp's two exceptions, decided on the whole set.
    auto with_text = [&](std::string_view text) -> std::optional<int32_t> {
        for (int32_t id : set)
            if (tokens[id] == text) return id;
        return std::nullopt;
    };
    const bool has_return = with_text("<|return|>").has_value(), has_flush = with_text("<|flush|>").has_value();
    const bool has_call = with_text("<|call|>").has_value() || with_text("<|calls|>").has_value();
    std::vector<int32_t> drop;
    if (const auto end = with_text("<|end|>"); end && has_call && (has_return || has_flush)) drop.push_back(*end);
    if (const auto s = with_text("</s>"); s && with_text("<|tool_response>")) drop.push_back(*s);
    for (int32_t id : set)
        if (std::find(drop.begin(), drop.end(), id) == drop.end()) out.ids.push_back(id);
    return out;
}

}  // namespace bg::tok
