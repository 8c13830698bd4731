// The pre-tokenizer: splits text into the pieces BPE merges inside of, by a sequence of regular
// expressions. Each expression splits every piece the previous ones left into its matches and
// the text between them (both kept), as HF's Split(behavior "Isolated") and llama.cpp's
// regex splitting do. Unicode properties (\p{L}, \s, ...) come from PCRE2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace bg::tok {

class PreTokenizer {
public:
    // The expressions of a llama.cpp pre-tokenizer type (tokenizer.ggml.pre). Only
    // "deepseek-v3" is known; any other name is a bg::Error naming it.
    static PreTokenizer for_type(const std::string& pre_type);
    // The expressions of a known type; a bg::Error for an unknown one.
    static std::vector<std::string> patterns_for(const std::string& pre_type);
    explicit PreTokenizer(const std::vector<std::string>& patterns);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    // Appends the pieces of `text` (valid UTF-8) to `pieces`, in order; together they are
    // `text`. Thread-safe.
    void split(std::string_view text, std::vector<std::string_view>& pieces) const;

private:
    struct Compiled;
    std::vector<std::unique_ptr<Compiled>> exprs_;
};

}  // namespace bg::tok
