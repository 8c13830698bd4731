#include "runtime/prompt.h"


#include "runtime/runner.h"
#include "tokenizer/chat_template.h"
#include "util/check.h"
#include "util/file_io.h"

namespace bg {

std::unique_ptr<tok::Tokenizer> load_tokenizer(const MoeModel& m) {
    std::optional<tok::Vocab> v = tok::Vocab::from_gguf(m.gguf());
    if (!v) return nullptr;
    if (static_cast<int64_t>(v->tokens.size()) != m.moe_shape().n_vocab)
        fail("tokenizer: %zu tokens, but the model's vocabulary has %lld rows", v->tokens.size(), (long long)m.moe_shape().n_vocab);
    return std::make_unique<tok::Tokenizer>(std::move(*v));
}

std::vector<int32_t> build_prompt(const RunConfig& cfg, const MoeModel& m, const tok::Tokenizer* tokenizer) {
    return build_prompt(cfg, m.moe_shape().n_vocab, m.moe_shape().bos_id, tokenizer);
}

std::vector<int32_t> build_prompt(const RunConfig& cfg, int64_t n_vocab, uint32_t bos_id, const tok::Tokenizer* tokenizer) {
    const int sources = !cfg.prompt_text.empty() + !cfg.prompt_text_file.empty() + !cfg.prompt_ids_file.empty();
    if (sources > 1) fail("prompt: give one of --prompt, --file and --prompt-ids");
    const bool text = !cfg.prompt_text.empty() || !cfg.prompt_text_file.empty();
    if (!text) {
        if (cfg.chat) fail("prompt: --chat needs a text prompt (--prompt or --file)");
        if (!cfg.system.empty()) fail("prompt: --system needs --chat");
        return cfg.prompt_ids_file.empty()
                   ? random_prompt(cfg.prompt_tokens, cfg.prompt_seed, n_vocab, static_cast<int32_t>(bos_id))
                   : read_prompt_file(cfg.prompt_ids_file, n_vocab);
    }
    if (!tokenizer)
        fail("prompt: '%s' carries no tokenizer (tokenizer.ggml.model), so it cannot read text; give token ids with "
             "--prompt-ids FILE or --prompt-tokens N",
             cfg.model_path.c_str());
    std::string s = cfg.prompt_text;
    if (!cfg.prompt_text_file.empty()) {
        s = read_file(cfg.prompt_text_file, "prompt");
        if (s.empty()) fail("prompt: '%s' is empty", cfg.prompt_text_file.c_str());
    }
    if (!cfg.system.empty() && !cfg.chat) fail("prompt: --system needs --chat");
    if (cfg.chat) s = tok::format_chat(tok::detect_chat_format(tokenizer->vocab().chat_template), cfg.system, s);
    return tokenizer->encode(s, true);
}

}  // namespace bg
