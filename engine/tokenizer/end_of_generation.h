// The tokens that end generation, decided from a GGUF file's tokenizer keys the way llama.cpp
// decides its end-of-generation set (src/llama-vocab.cpp, llama_vocab::impl::load, the set it
// calls special_eog_ids; `run` stops at any of them as llama.cpp's programs stop at
// llama_vocab_is_eog):
//  - the ids tokenizer.ggml.eos_token_id, eot_token_id and eom_token_id name; without a usable
//    eos key (absent or outside the vocabulary), the tokenizer model's default eos (gpt2: 11,
//    llama: 2, t5: 1, plamo2: 2; none for the others), where it is inside the vocabulary;
//  - the ids fim_pad_token_id, fim_rep_token_id and fim_sep_token_id name or, without a usable
//    key, the token whose text is one of llama.cpp's for that role ("<|fim_pad|>", "<|file_sep|>",
//    ...; llama.cpp takes whichever its hash map yields first when several match, this takes
//    the lowest id);
//  - every token whose text is in llama.cpp's end-of-generation list ("<|eot_id|>",
//    "<|im_end|>", "<|endoftext|>", DeepSeek's "<｜end▁of▁sentence｜>", ...). llama.cpp also
//    finds eot and eom ids by text when their keys are absent; all of those texts are in this
//    list, so they add nothing here;
//  - then, as llama.cpp does, "<|end|>" leaves the set when "<|return|>" and "<|call|>" (or
//    "<|calls|>" and "<|flush|>") are in it, and "</s>" when "<|tool_response>" is.
// An id key outside the vocabulary is ignored, as llama.cpp ignores it (with a warning: see
// `ignored`). A file without a vocabulary (no tokenizer.ggml.model, or "none" / "no_vocab") has
// no end-of-generation tokens, as in llama.cpp, whatever ids its keys name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace bg::tok {

struct EndOfGeneration {
    std::vector<int32_t> ids;          // ascending, distinct
    std::vector<std::string> ignored;  // one line per id key that was ignored, and why

    bool contains(int32_t id) const;
    bool empty() const { return ids.empty(); }
};

// Throws bg::Error when the file names a tokenizer model but has no tokenizer.ggml.tokens array
// of strings, or an id key is not an unsigned integer.
EndOfGeneration end_of_generation(const gguf::Reader& r);

}  // namespace bg::tok
