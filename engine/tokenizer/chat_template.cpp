#include "tokenizer/chat_template.h"

#include "util/check.h"

namespace bg::tok {

namespace {

constexpr const char* kUser = "<\uFF5CUser\uFF5C>";
constexpr const char* kAssistant = "<\uFF5CAssistant\uFF5C>";
constexpr const char* kEndOfSentence = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

}  // namespace

ChatFormat detect_chat_format(const std::string& t) {
    if (t.empty()) fail("chat: the model carries no chat template (tokenizer.chat_template)");
    // DeepSeek-V3 and later: user and assistant turns marked by full-width-bar tokens.
    if (contains(t, kUser) && contains(t, kAssistant) && contains(t, kEndOfSentence)) return ChatFormat::kDeepSeek3;
    fail("chat: the model's chat template is not one this engine knows (known: DeepSeek-V3 style, with %s, %s "
         "and %s); its first 80 bytes: '%s'",
         kUser, kAssistant, kEndOfSentence, t.substr(0, 80).c_str());
}

const char* chat_format_name(ChatFormat f) {
    switch (f) {
        case ChatFormat::kDeepSeek3: return "deepseek3";
    }
    return "?";
}

std::string format_chat(ChatFormat f, const std::string& system, const std::string& user) {
    switch (f) {
        case ChatFormat::kDeepSeek3:
            // As the model's own template renders it: the system text right after bos, then the
            // user turn, then the assistant marker that the answer follows.
            return system + kUser + user + kAssistant;
    }
    BG_CHECK(false);
    return {};
}

}  // namespace bg::tok
