#include "tokenizer/vocab.h"

#include "util/check.h"

namespace bg::tok {

namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";
constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kTemplate = "tokenizer.chat_template";

int64_t optional_id(const gguf::Reader& r, const char* key) {
    return r.find(key) ? static_cast<int64_t>(r.get_u32(key)) : -1;
}

}  // namespace

std::optional<Vocab> Vocab::from_gguf(const gguf::Reader& r) {
    if (!r.find(kModel)) return std::nullopt;
    Vocab v;
    v.model = r.get_str(kModel);
    if (v.model == "none") return std::nullopt;
    if (v.model != "gpt2") fail("tokenizer: model '%s' is not supported (known: gpt2, byte-level BPE)", v.model.c_str());
    v.pre = r.find(kPre) ? r.get_str(kPre) : "default";
    v.tokens = r.get_arr_str(kTokens);
    if (r.find(kTypes)) {
        for (int64_t t : r.get_arr_i64(kTypes)) {
            if (t < 0 || t > static_cast<int64_t>(TokenType::kByte)) fail("tokenizer: token type %lld is unknown", (long long)t);
            v.types.push_back(static_cast<TokenType>(t));
        }
    } else {
        v.types.assign(v.tokens.size(), TokenType::kNormal);
    }
    v.merges = r.get_arr_str(kMerges);
    v.bos_id = optional_id(r, kBos);
    v.eos_id = optional_id(r, kEos);
    v.pad_id = optional_id(r, kPad);
    v.add_bos = r.find(kAddBos) ? r.get_bool(kAddBos) : false;
    v.add_eos = r.find(kAddEos) ? r.get_bool(kAddEos) : false;
    if (r.find(kTemplate)) v.chat_template = r.get_str(kTemplate);
    v.validate();
    return v;
}

void Vocab::validate() const {
    if (tokens.empty()) fail("tokenizer: %s is empty", kTokens);
    if (types.size() != tokens.size())
        fail("tokenizer: %s has %zu entries, %s %zu", kTypes, types.size(), kTokens, tokens.size());
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (auto [name, id] : {std::pair{kBos, bos_id}, {kEos, eos_id}, {kPad, pad_id}})
        if (id >= n) fail("tokenizer: %s %lld is outside the %lld tokens", name, (long long)id, (long long)n);
    if (add_bos && bos_id < 0) fail("tokenizer: %s is set but there is no %s", kAddBos, kBos);
    if (add_eos && eos_id < 0) fail("tokenizer: %s is set but there is no %s", kAddEos, kEos);
}

void Vocab::write_gguf(gguf::Writer& w) const {
    using gguf::Value;
    w.set(kModel, Value::str(model));
    w.set(kPre, Value::str(pre));
    w.set(kTokens, Value::array_str(tokens));
    std::vector<int32_t> t;
    t.reserve(types.size());
    for (TokenType x : types) t.push_back(static_cast<int32_t>(x));
    w.set(kTypes, Value::array_i32(t));
    w.set(kMerges, Value::array_str(merges));
    if (bos_id >= 0) w.set(kBos, Value::u32(static_cast<uint32_t>(bos_id)));
    if (eos_id >= 0) w.set(kEos, Value::u32(static_cast<uint32_t>(eos_id)));
    if (pad_id >= 0) w.set(kPad, Value::u32(static_cast<uint32_t>(pad_id)));
    w.set(kAddBos, Value::boolean(add_bos));
    w.set(kAddEos, Value::boolean(add_eos));
    if (!chat_template.empty()) w.set(kTemplate, Value::str(chat_template));
}

}  // namespace bg::tok
