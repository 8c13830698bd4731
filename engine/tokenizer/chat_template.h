// Chat prompts: the conversation format a model's tokenizer.chat_template describes,
// recognised by marker strings in the template text the way llama.cpp recognises templates
// (no Jinja interpreter), and applied to a system and a user message.
#pragma once

#include <string>

namespace bg::tok {

enum class ChatFormat { kDeepSeek3 };

// The format of a template; a bg::Error saying which formats are known when the text matches
// none (or is empty: the model carries no template).
ChatFormat detect_chat_format(const std::string& chat_template);
const char* chat_format_name(ChatFormat f);

// The prompt text for one user turn (after an optional system message), ending where the
// assistant's answer starts. The bos token is not included: encoding with add_special adds it.
std::string format_chat(ChatFormat f, const std::string& system, const std::string& user);

}  // namespace bg::tok
