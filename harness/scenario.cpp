#include "scenario.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/decode_split.h"

namespace bgh {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
}

// A value in a message: its JSON, cut to 60 bytes at a character boundary (so the message stays
// valid UTF-8).
std::string shown(const json& j) {
    std::string s = j.dump();
    if (s.size() <= 60) return s;
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return s.substr(0, cut) + "...";
}

// A key in a message's key path: as written when plain (letters, digits, '_', '-', and the
// parser's own "[i]"), else as a JSON string, so a key holding a newline, a control character,
// a '.' or a ": " cannot break or blur the one-line "key: reason" form.
std::string key_text(const std::string& k) {
    bool plain = !k.empty();
    for (char c : k)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '[' || c == ']'))
            plain = false;
    return plain ? k : json(k).dump();
}

// A path in a message: as it is, or as a JSON string (whole, not cut) when it holds a control
// character, so that a path from the file with a newline in it cannot split the problem line.
std::string path_text(const std::string& p) {
    for (unsigned char c : p)
        if (c < 0x20 || c == 0x7F) return json(p).dump();
    return p;
}

// Text from elsewhere (a JSON parser's message quotes the bytes it read) made printable ASCII:
// every other byte as \xNN.
std::string printable(const std::string& t) {
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : t) {
        if (c >= 0x20 && c < 0x7F) {
            out += char(c);
        } else {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

// [first][rest]*, each a character class given as a predicate (std::regex recurses once per
// character, so a long hostile string overflowed the stack).
template <class First, class Rest>
bool matches(const std::string& s, First first, Rest rest) {
    if (s.empty() || !first(s[0])) return false;
    return std::all_of(s.begin() + 1, s.end(), rest);
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_alnum(char c) { return is_digit(c) || is_lower(c) || (c >= 'A' && c <= 'Z'); }
bool is_name_char(char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; }
bool is_profile_first(char c) { return is_lower(c) || is_digit(c); }
bool is_profile_char(char c) { return is_lower(c) || is_digit(c) || c == '_' || c == '-'; }

// Walks one JSON object, remembering which keys were read so that every key nobody asked for
// is reported as unknown. Each accessor records a problem (path and reason) and returns nullopt
// instead of throwing, so one pass finds every mistake in the file.
class Obj {
public:
    Obj(const json* j, std::string path, std::vector<std::string>& problems)
        : j_(j), path_(std::move(path)), problems_(problems) {
        if (j_ && !j_->is_object()) {
            problem("", "must be an object, got " + shown(*j_));
            j_ = nullptr;
        }
    }

    bool valid() const { return j_ != nullptr; }
    bool has(const std::string& key) const { return j_ && j_->contains(key); }
    std::string at(const std::string& key) const {
        return path_.empty() ? key_text(key) : path_ + "." + key_text(key);
    }

    void problem(const std::string& key, const std::string& reason) {
        const std::string p = key.empty() ? path_ : at(key);
        problems_.push_back((p.empty() ? std::string("(top level)") : p) + ": " + reason);
    }

    const json* get(const std::string& key, bool required) {
        seen_.insert(key);
        if (!j_) return nullptr;
        auto it = j_->find(key);
        if (it == j_->end()) {
            if (required) problem(key, "required key is missing");
            return nullptr;
        }
        return &*it;
    }

    std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi, bool required = false) {
        const json* v = get(key, required);
        if (!v) return std::nullopt;
        if (!v->is_number_integer()) {
            problem(key, "must be an integer, got " + shown(*v));
            return std::nullopt;
        }
        // Above INT64_MAX is out of every range (it was once clamped to INT64_MAX and accepted).
        const bool huge = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX);
        const int64_t x = huge ? 0 : v->get<int64_t>();
        if (huge || x < lo || x > hi) {
            problem(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + shown(*v));
            return std::nullopt;
        }
        return x;
    }

    std::optional<double> number(const std::string& key, double lo, double hi, bool required = false) {
        const json* v = get(key, required);
        if (!v) return std::nullopt;
        if (!v->is_number()) {
            problem(key, "must be a number, got " + shown(*v));
            return std::nullopt;
        }
        const double x = v->get<double>();
        if (!(x >= lo && x <= hi)) {
            std::ostringstream r;
            r << "must be between " << lo << " and " << hi << ", got " << shown(*v);
            problem(key, r.str());
            return std::nullopt;
        }
        return x;
    }

    std::optional<bool> boolean(const std::string& key, bool required = false) {
        const json* v = get(key, required);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) {
            problem(key, "must be true or false, got " + shown(*v));
            return std::nullopt;
        }
        return v->get<bool>();
    }

    std::optional<std::string> string(const std::string& key, bool required = false,
                                      const std::vector<std::string>& allowed = {},
                                      bool (*pattern)(const std::string&) = nullptr,
                                      const char* pattern_reason = nullptr) {
        const json* v = get(key, required);
        if (!v) return std::nullopt;
        if (!v->is_string()) {
            problem(key, "must be a string, got " + shown(*v));
            return std::nullopt;
        }
        std::string s = v->get<std::string>();
        if (s.find('\0') != std::string::npos) {
            // Paths and engine arguments end at a NUL for the OS: another file than the one named.
            problem(key, "must not contain a NUL character (\\u0000), got " + shown(*v));
            return std::nullopt;
        }
        if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
            problem(key, "must be one of " + join(allowed, ", ") + ", got " + shown(*v));
            return std::nullopt;
        }
        if (pattern && !pattern(s)) {
            problem(key, std::string(pattern_reason) + ", got " + shown(*v));
            return std::nullopt;
        }
        return s;
    }

    Obj object(const std::string& key, bool required = false) {
        return Obj(get(key, required), at(key), problems_);
    }

    // Reports every key that no accessor asked for.
    void finish() {
        if (!j_) return;
        for (auto it = j_->begin(); it != j_->end(); ++it)
            if (!seen_.count(it.key())) {
                std::vector<std::string> known(seen_.begin(), seen_.end());
                // at(), not problem(): an empty key is a key here, not the object itself.
                problems_.push_back(at(it.key()) + ": unknown key (known here: " + join(known, ", ") + ")");
            }
    }

private:
    const json* j_;
    std::string path_;
    std::vector<std::string>& problems_;
    std::set<std::string> seen_;
};

// A path in a scenario is relative to the scenario file's folder, so a scenario means the same
// thing whatever directory the harness is started from.
std::string resolve(const std::string& base_dir, const std::string& p) {
    fs::path q(p);
    if (q.is_relative()) q = fs::path(base_dir) / q;
    return q.lexically_normal().string();
}

bool is_file(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::optional<Figure> figure(Obj& o, const std::string& key) {
    const json* v = o.get(key, false);
    if (!v) return std::nullopt;
    if (v->is_number() && v->get<double>() >= 0) return Figure{v->get<double>(), v->get<double>()};
    if (v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number() && (*v)[0].get<double>() >= 0 &&
        (*v)[0].get<double>() <= (*v)[1].get<double>())
        return Figure{(*v)[0].get<double>(), (*v)[1].get<double>()};
    o.problem(key, "must be a non-negative number or a range [low, high] with low <= high, got " + shown(*v));
    return std::nullopt;
}

// Flags the harness sets itself, and the key that sets each, so extra_args cannot contradict
// the scenario behind its back.
const std::map<std::string, std::string>& reserved_flags() {
    static const std::map<std::string, std::string> m = {
        {"--model", "model.path"},          {"-m", "model.path"},
        {"--metrics-json", "the harness"},
        {"--passes", "passes"},             {"--gen", "decode_tokens"},          {"-n", "decode_tokens"},
        {"--ignore-eos", "the harness"},
        {"--prompt-tokens", "prompt.tokens"}, {"--prompt-seed", "prompt.seed"},
        {"--file", "prompt.text_file"},     {"-f", "prompt.text_file"},
        {"--prompt", "prompt"},             {"-p", "prompt"},
        {"--prompt-ids", "prompt.ids_file"}, {"--prefill", "changes.layer_major"},
        {"--ubatch", "changes.layer_major"}, {"--routing", "changes.partition"},
        {"--promote", "changes.promotion"}, {"--slots", "engine.slots"},
        {"--hot", "engine.hot"},            {"--transient-slots", "engine.transient_slots"},
        {"--lru-slots", "engine.lru_slots"}, {"--io", "engine.io"},
        {"--queue-depth", "engine.queue_depth"}, {"--read-size", "engine.read_size"},
        {"--host-budget", "hardware.host_budget_mib"}, {"--vram-budget", "hardware.vram_budget_mib"},
        {"--threads", "engine.threads"},    {"--residency", "engine.residency"},
        {"--engram-buffer", "engine.engram_buffer_kib"}, {"--backend", "engine.backend"},
        {"--engram-read-ahead", "engine.engram_read_ahead_kib"},
        {"--decode-experts", "engine.decode_experts"},
        {"--host-expert-positions", "engine.host_expert_positions"}};
    return m;
}

}  // namespace

ScenarioError::ScenarioError(const std::vector<std::string>& p)
    : std::runtime_error(join(p, "\n")), problems(p) {}

const char* partition_rule_name(PartitionRule r) {
    switch (r) {
        case PartitionRule::kPinnedTop1: return "pinned-top1";
        case PartitionRule::kHotPool: return "hot-pool";
        case PartitionRule::kResidentOnly: break;
    }
    return "resident-only";
}

std::optional<PartitionRule> parse_partition_rule(const std::string& name) {
    if (name == "resident-only") return PartitionRule::kResidentOnly;
    if (name == "pinned-top1") return PartitionRule::kPinnedTop1;
    if (name == "hot-pool") return PartitionRule::kHotPool;
    return std::nullopt;
}

std::vector<std::string> change_flags(const Changes& c) {
    std::vector<std::string> f = {"--routing", c.partition ? partition_rule_name(c.rule) : "exact"};
    if (c.layer_major) f.insert(f.end(), {"--prefill", "layer-major", "--ubatch", "16"});
    else f.insert(f.end(), {"--prefill", "token-major", "--ubatch", "3"});
    if (c.promotion) f.push_back("--promote");
    return f;
}

std::string changes_name(const Changes& c) {
    const std::string rule =
        c.partition && c.rule != PartitionRule::kResidentOnly ? std::string(" (") + partition_rule_name(c.rule) + ")" : "";
    if (c.count() == 0) return "baseline";
    if (c.count() == 3) return "all three" + rule;
    const char* names[3] = {"partition", "layer-major", "promotion"};
    const bool on[3] = {c.partition, c.layer_major, c.promotion};
    for (int i = 0; i < 3; ++i) {
        if (c.count() == 1 && on[i]) return std::string(names[i]) + " only" + rule;
        if (c.count() == 2 && !on[i]) return std::string("without ") + names[i] + rule;
    }
    return "?";
}

json changes_to_json(const Changes& c) {
    json j = {{"partition", c.partition}, {"layer_major", c.layer_major}, {"promotion", c.promotion}};
    if (c.partition) j["partition_rule"] = partition_rule_name(c.rule);
    return j;
}

Changes changes_from_json(const json& j) {
    Changes c;
    if (!j.is_object()) return c;
    c.partition = j.value("partition", false);
    c.layer_major = j.value("layer_major", false);
    c.promotion = j.value("promotion", false);
    if (c.partition) {
        const auto r = j.contains("partition_rule") && j["partition_rule"].is_string()
                           ? parse_partition_rule(j["partition_rule"].get<std::string>())
                           : std::optional<PartitionRule>(PartitionRule::kPinnedTop1);
        c.rule = r.value_or(PartitionRule::kPinnedTop1);
    }
    return c;
}

std::vector<Changes> Scenario::configurations() const {
    if (mode == "ablation") {
        return {{false, false, false}, {true, false, false}, {false, true, false}, {false, false, true},
                {true, true, true},    {false, true, true},  {true, false, true},  {true, true, false},
                {true, true, true, PartitionRule::kPinnedTop1}};
    }
    std::vector<Changes> v = {changes};
    if (baseline_reference && changes.count() > 0) v.push_back(Changes{});
    return v;
}

std::string Scenario::pass_label(int64_t pass) const {
    if (pass >= 1 && pass <= int64_t(pass_labels.size())) return pass_labels[pass - 1];
    return std::to_string(pass);
}

Scenario parse_scenario(const std::string& text, const std::string& path) {
    const std::string abs = fs::absolute(path).lexically_normal().string();
    const std::string dir = fs::path(abs).parent_path().string();
    std::vector<std::string> problems;
    json j;
    try {
        // Copying, printing and comparing a JSON value recurse once per level: a hostile file of
        // nested brackets overflowed the stack. No scenario needs more than a few levels.
        constexpr int max_depth = 64;
        j = json::parse(text, [&](int depth, json::parse_event_t, json&) {
            if (depth > max_depth)
                throw ScenarioError({abs + ": (top level): arrays and objects nested deeper than " +
                                     std::to_string(max_depth) + " levels"});
            return true;
        });
    } catch (const json::exception& e) {
        // parse_error, and out_of_range for a number beyond a double (1e999).
        throw ScenarioError({abs + ": not valid JSON: " + printable(e.what())});
    }
    Scenario s;
    s.file = abs;
    s.source = j;
    Obj top(&j, "", problems);
    if (!top.valid()) throw ScenarioError({abs + ": " + problems.front()});

    const auto name_ok = [](const std::string& n) { return matches(n, is_alnum, is_name_char); };
    const auto profile_ok = [](const std::string& n) { return matches(n, is_profile_first, is_profile_char); };
    s.name = top.string("name", false, {}, name_ok, "must be letters, digits, '.', '_' or '-'")
                 .value_or(fs::path(abs).stem().string());
    s.description = top.string("description").value_or("");
    s.profile = top.string("profile", true, {}, profile_ok, "must be lower-case letters, digits, '_' or '-'")
                    .value_or("");
    s.mode = top.string("mode", false, {"run", "ablation"}).value_or("run");

    Obj model = top.object("model", true);
    if (auto p = model.string("path", true)) s.model_path = resolve(dir, *p);
    if (auto p = model.string("scale")) {
        s.model_scale_path = resolve(dir, *p);
        if (!is_file(s.model_scale_path)) model.problem("scale", "no scale file at " + path_text(s.model_scale_path));
    }
    s.model_seed = model.integer("seed", 0, INT64_MAX).value_or(1);
    model.finish();
    if (model.valid() && !s.model_path.empty() && s.model_scale_path.empty() && !is_file(s.model_path))
        model.problem("path", "no model file at " + path_text(s.model_path) + ", and no model.scale to generate it from");

    Obj hw = top.object("hardware", true);
    const int64_t big = int64_t(1) << 40;
    s.vram_budget_mib = hw.integer("vram_budget_mib", 1, big, true).value_or(0);
    s.host_budget_mib = hw.integer("host_budget_mib", 1, big, true).value_or(0);
    // Below a few MiB no process can even start; the OOM test uses tens of MiB.
    s.cgroup_memory_mib = hw.integer("cgroup_memory_mib", 8, big, true).value_or(0);
    s.swap = hw.boolean("swap").value_or(false);
    hw.finish();
    if (s.host_budget_mib > s.cgroup_memory_mib && s.cgroup_memory_mib > 0)
        s.warnings.push_back("hardware.host_budget_mib (" + std::to_string(s.host_budget_mib) +
                             ") exceeds hardware.cgroup_memory_mib (" + std::to_string(s.cgroup_memory_mib) +
                             "): the engine's own budget check cannot stop an OOM kill");

    if (s.mode == "ablation") {
        if (top.has("changes")) top.problem("changes", "not used in mode \"ablation\": the ablation sets every combination itself");
        top.get("changes", false);
        if (top.has("baseline_reference"))
            top.problem("baseline_reference", "not used in mode \"ablation\": its baseline is part of the matrix");
        top.get("baseline_reference", false);
    } else {
        Obj ch = top.object("changes", true);
        s.changes.partition = ch.boolean("partition", true).value_or(false);
        s.changes.layer_major = ch.boolean("layer_major", true).value_or(false);
        s.changes.promotion = ch.boolean("promotion", true).value_or(false);
        if (auto r = ch.string("partition_rule", false, {"resident-only", "pinned-top1", "hot-pool"})) {
            if (!s.changes.partition) ch.problem("partition_rule", "only meaningful with changes.partition true");
            else s.changes.rule = *parse_partition_rule(*r);
        }
        ch.finish();
        s.baseline_reference = top.boolean("baseline_reference").value_or(true);
    }

    Obj en = top.object("engine");
    EngineOptions& e = s.engine;
    // An integer, or "max": the engine's --slots/--hot max.
    auto count_or_max = [&](const char* key, int64_t fallback) {
        const json* v = en.get(key, false);
        if (v && v->is_string()) {
            if (v->get<std::string>() == "max") return EngineOptions::kMost;
            en.problem(key, std::string("must be an integer or \"max\", got ") + shown(*v));
            return fallback;
        }
        return en.integer(key, 0, 1 << 20).value_or(fallback);
    };
    e.slots = count_or_max("slots", e.slots);
    e.hot = count_or_max("hot", e.hot);
    if (e.slots != EngineOptions::kMost && e.hot != EngineOptions::kMost && e.hot > e.slots)
        en.problem("hot", "must be at most engine.slots (" + std::to_string(e.slots) + ")");
    e.transient_slots = en.integer("transient_slots", 1, 1 << 20).value_or(e.transient_slots);
    e.lru_slots = en.integer("lru_slots", 0, 1 << 24).value_or(e.lru_slots);
    e.io = en.string("io", false, {"uring", "pread"}).value_or(e.io);
    e.queue_depth = en.integer("queue_depth", 1, 4096).value_or(e.queue_depth);
    if (auto rs = en.integer("read_size", 4096, int64_t(1) << 30)) {
        if (*rs % 4096) en.problem("read_size", "must be a multiple of 4096 (O_DIRECT), got " + std::to_string(*rs));
        else e.read_size_bytes = *rs;
    }
    e.threads = en.integer("threads", 0, 4096).value_or(e.threads);
    e.engram_buffer_kib = en.integer("engram_buffer_kib", 4, 1 << 22).value_or(e.engram_buffer_kib);
    e.engram_read_ahead_kib = en.integer("engram_read_ahead_kib", 0, 1 << 22).value_or(e.engram_read_ahead_kib);
    e.backend = en.string("backend", false, {"auto", "cpu", "cuda"}).value_or("");
    e.decode_experts = en.string("decode_experts", false, {"auto", "gpu", "cpu", "hybrid"}).value_or("");
    e.host_expert_positions =
        en.integer("host_expert_positions", 1, bg::kMaxHostExpertPositions).value_or(e.host_expert_positions);
    if (auto r = en.string("residency")) {
        e.residency_path = resolve(dir, *r);
        if (!is_file(e.residency_path)) en.problem("residency", "no residency plan at " + path_text(e.residency_path));
    }
    if (const json* xa = en.get("extra_args", false)) {
        if (!xa->is_array()) {
            en.problem("extra_args", "must be an array of strings, got " + shown(*xa));
        } else {
            for (size_t i = 0; i < xa->size(); ++i) {
                const std::string at = "extra_args[" + std::to_string(i) + "]";
                if (!(*xa)[i].is_string()) {
                    en.problem(at, "must be a string, got " + shown((*xa)[i]));
                    continue;
                }
                const std::string a = (*xa)[i].get<std::string>();
                if (a.find('\0') != std::string::npos) {
                    en.problem(at, "must not contain a NUL character (\\u0000), got " + shown((*xa)[i]));
                    continue;
                }
                const std::string flag = a.substr(0, a.find('='));
                auto it = reserved_flags().find(flag);
                if (it != reserved_flags().end()) en.problem(at, flag + " is set by " + it->second + ", not here");
                else e.extra_args.push_back(a);
            }
        }
    }
    en.finish();

    Obj pr = top.object("prompt", true);
    const int sources = pr.has("tokens") + pr.has("text_file") + pr.has("ids_file");
    if (pr.valid() && sources != 1)
        pr.problem("", "give one of \"tokens\" (with an optional \"seed\"), \"text_file\" or \"ids_file\"");
    s.prompt_tokens = pr.integer("tokens", 1, 1 << 20).value_or(0);
    s.prompt_seed = pr.integer("seed", 0, INT64_MAX).value_or(1);
    for (auto [key, dst] : {std::pair{"text_file", &s.prompt_text_file}, {"ids_file", &s.prompt_ids_file}}) {
        if (auto f = pr.string(key)) {
            *dst = resolve(dir, *f);
            if (!is_file(*dst)) pr.problem(key, "no prompt file at " + path_text(*dst));
            if (pr.has("seed")) pr.problem("seed", "only meaningful with prompt.tokens");
        }
    }
    pr.finish();

    s.passes = top.integer("passes", 1, 1000).value_or(s.passes);
    if (const json* pl = top.get("pass_labels", false)) {
        if (!pl->is_array() || int64_t(pl->size()) != s.passes ||
            !std::all_of(pl->begin(), pl->end(),
                         [](const json& x) { return x.is_string() && x.get<std::string>().find('\0') == std::string::npos; }))
            top.problem("pass_labels", "must be an array of " + std::to_string(s.passes) + " strings (one per pass, no NUL), got " + shown(*pl));
        else
            for (const auto& x : *pl) s.pass_labels.push_back(x.get<std::string>());
    }
    s.decode_tokens = top.integer("decode_tokens", 0, 1 << 20).value_or(s.decode_tokens);
    s.repetitions = top.integer("repetitions", 1, 1000).value_or(s.repetitions);

    s.derive_layers = top.integer("derive_layers", 1, 4096).value_or(0);

    Obj tol = top.object("tolerances");
    s.speed_ratio_tolerance = tol.number("speed_ratio", 0.0, 1.0).value_or(s.speed_ratio_tolerance);
    tol.finish();

    top.get("published", false);  // listed among the known keys even when absent
    if (top.has("published")) {
        Obj pub = top.object("published");
        Published p;
        p.source = pub.string("source").value_or("");
        if (const json* ps = pub.get("passes", false)) {
            if (!ps->is_array() || int64_t(ps->size()) > s.passes) {
                pub.problem("passes", "must be an array of at most " + std::to_string(s.passes) + " objects (one per pass run)");
            } else {
                for (size_t i = 0; i < ps->size(); ++i) {
                    Obj po(&(*ps)[i], pub.at("passes[" + std::to_string(i) + "]"), problems);
                    PublishedPass pp;
                    pp.prefill_tok_s = figure(po, "prefill_tok_s");
                    pp.disk_read_pct = figure(po, "disk_read_pct");
                    pp.disk_wait_ms = figure(po, "disk_wait_ms");
                    po.finish();
                    p.passes.push_back(pp);
                }
            }
        }
        p.decode_tok_s = figure(pub, "decode_tok_s");
        p.vram_peak_mib = figure(pub, "vram_peak_mib");
        p.vram_note = pub.string("vram_note").value_or("");
        pub.finish();
        if (s.mode == "ablation") top.problem("published", "only shown for mode \"run\"");
        s.published = p;
    }
    top.finish();

    if (!problems.empty()) {
        for (auto& p : problems) p = abs + ": " + p;
        throw ScenarioError(problems);
    }
    return s;
}

Scenario load_scenario(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw ScenarioError({path + ": cannot read the scenario file: " + std::strerror(errno)});
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_scenario(ss.str(), path);
}

std::vector<std::string> engine_args(const Scenario& s, const Changes& c, const std::string& metrics_json_path) {
    const EngineOptions& e = s.engine;
    std::vector<std::string> a = {"run", "--model", s.model_path};
    if (!s.prompt_text_file.empty())
        a.insert(a.end(), {"--file", s.prompt_text_file});
    else if (!s.prompt_ids_file.empty())
        a.insert(a.end(), {"--prompt-ids", s.prompt_ids_file});
    else
        a.insert(a.end(), {"--prompt-tokens", std::to_string(s.prompt_tokens), "--prompt-seed", std::to_string(s.prompt_seed)});
    // Every run decodes exactly decode_tokens: a run that stopped at an end-of-generation token
    // would time fewer steps than the next one.
    a.insert(a.end(), {"--passes", std::to_string(s.passes), "--gen", std::to_string(s.decode_tokens), "--ignore-eos"});
    const auto cf = change_flags(c);
    a.insert(a.end(), cf.begin(), cf.end());
    auto count = [](int64_t n) { return n == EngineOptions::kMost ? std::string("max") : std::to_string(n); };
    a.insert(a.end(), {"--slots", count(e.slots), "--hot", count(e.hot), "--transient-slots",
                       std::to_string(e.transient_slots), "--lru-slots", std::to_string(e.lru_slots), "--io", e.io,
                       "--queue-depth", std::to_string(e.queue_depth), "--read-size", std::to_string(e.read_size_bytes),
                       "--host-budget", std::to_string(s.host_budget_mib), "--vram-budget", std::to_string(s.vram_budget_mib),
                       "--engram-buffer", std::to_string(e.engram_buffer_kib), "--threads", std::to_string(e.threads)});
    if (e.engram_read_ahead_kib >= 0) a.insert(a.end(), {"--engram-read-ahead", std::to_string(e.engram_read_ahead_kib)});
    if (!e.backend.empty()) a.insert(a.end(), {"--backend", e.backend});
    if (!e.decode_experts.empty()) a.insert(a.end(), {"--decode-experts", e.decode_experts});
    a.insert(a.end(), {"--host-expert-positions", std::to_string(e.host_expert_positions)});
    if (!e.residency_path.empty()) a.insert(a.end(), {"--residency", e.residency_path});
    a.insert(a.end(), e.extra_args.begin(), e.extra_args.end());
    a.insert(a.end(), {"--metrics-json", metrics_json_path});
    return a;
}

}  // namespace bgh
