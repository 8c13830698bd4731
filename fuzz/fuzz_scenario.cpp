// Fuzz target: the harness's scenario parser and validator (bgh::parse_scenario) on the bytes as
// the text of a scenario file.
//
// A rejected input must raise bgh::ScenarioError whose problems are one line each, of the form
// "FILE: key: reason" (SPEC §6: the key and the reason), valid UTF-8 (they are printed and
// recorded). An accepted scenario must keep what the parser promises: every field within the
// range it validates, the integers it read equal to the file's, the engine command line free of
// duplicate harness flags, and the same scenario again from its own recorded source (results
// keep `source`, and a later compare or ablation re-reads it). Anything else, another exception
// included, is a finding.
//
// The file is named as if it lay in the source tree's scenarios/ci/, so the shipped scenarios'
// relative model and scale paths resolve to real files and the seeds reach the accepted path
// (an input's verdict can depend on which files exist, e.g. models/ci.gguf once generated; the
// invariants hold either way).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "scenario.h"

#ifndef BG_FUZZ_SCENARIO_DIR
#error "BG_FUZZ_SCENARIO_DIR: the folder the fuzzed scenario is taken to lie in"
#endif

namespace {

using bgfuzz::finding;
using nlohmann::json;

// BG_FUZZ_SCENARIO_DIR in the environment overrides the built-in folder (a copy of the tree
// elsewhere).
const std::string& anchor() {
    static const std::string a = [] {
        const char* env = std::getenv("BG_FUZZ_SCENARIO_DIR");
        const std::string dir = env && *env ? env : BG_FUZZ_SCENARIO_DIR;
        return std::filesystem::absolute(dir + "/fuzz-input.json").lexically_normal().string();
    }();
    return a;
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(const std::string& s) {
    size_t i = 0;
    const size_t n = s.size();
    while (i < n) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        int len;
        uint32_t cp;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < size_t(len)) return false;
        for (int k = 1; k < len; ++k) {
            const unsigned char d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

void check_line(const std::string& line, const char* what) {
    if (line.find('\n') != std::string::npos || line.find('\r') != std::string::npos)
        finding(what, ("not one line: " + line).c_str());
    if (!valid_utf8(line)) finding(what, "not valid UTF-8");
}

void check_rejected(const bgh::ScenarioError& e) {
    static const bool verbose = std::getenv("BG_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "rejected:\n%s\n", e.what());
    if (e.problems.empty()) finding("ScenarioError", "lists no problem");
    std::string joined;
    for (const std::string& p : e.problems) {
        check_line(p, "scenario problem");
        const std::string prefix = anchor() + ": ";
        if (p.compare(0, prefix.size(), prefix) != 0) finding("scenario problem does not name the file", p.c_str());
        const std::string rest = p.substr(prefix.size());
        const size_t colon = rest.find(": ");
        if (colon == std::string::npos || colon == 0 || colon + 2 == rest.size())
            finding("scenario problem is not 'key: reason'", p.c_str());
        joined += (joined.empty() ? "" : "\n") + p;
    }
    if (joined != e.what()) finding("ScenarioError::what()", "is not its problems, one a line");
}

// The flags engine_args sets from the scenario's own keys (extra_args may not repeat them).
const std::set<std::string>& harness_flags() {
    static const std::set<std::string> f = {
        "--model", "-m", "--metrics-json", "--passes", "--gen", "-n", "--prompt-tokens", "--prompt-seed", "--file", "-f",
        "--prompt", "-p", "--prompt-ids",
        "--prefill", "--ubatch", "--routing", "--promote", "--slots", "--hot", "--transient-slots", "--lru-slots",
        "--io", "--queue-depth", "--read-size", "--host-budget", "--vram-budget", "--threads", "--residency",
        "--engram-buffer", "--backend"};
    return f;
}

bool name_ok(const std::string& s, bool lower_only) {
    if (s.empty()) return false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (!lower_only && c >= 'A' && c <= 'Z');
        const bool punct = lower_only ? (c == '_' || c == '-') : (c == '.' || c == '_' || c == '-');
        if (!alnum && !(i > 0 && punct)) return false;
    }
    return true;
}

void in_range(int64_t v, int64_t lo, int64_t hi, const char* what) {
    if (v < lo || v > hi) finding("accepted field out of its range", what);
}

bool abs_path(const std::string& p) { return !p.empty() && p[0] == '/'; }

void check_figure(const std::optional<bgh::Figure>& f, const char* what) {
    if (!f) return;
    if (!std::isfinite(f->low) || !std::isfinite(f->high) || f->low < 0 || f->low > f->high)
        finding("accepted published figure", what);
}

// An integer the file gave must be the value the scenario holds.
void same_int(const json& src, const char* obj, const char* key, int64_t value) {
    const json* o = obj ? (src.contains(obj) ? &src[obj] : nullptr) : &src;
    if (!o || !o->is_object() || !o->contains(key)) return;
    const json& v = (*o)[key];
    const bool same = v.is_number_unsigned() ? v.get<uint64_t>() == static_cast<uint64_t>(value) && value >= 0
                                             : v.is_number_integer() && v.get<int64_t>() == value;
    if (!same) finding("accepted integer differs from the file's", (std::string(obj ? obj : "") + "." + key).c_str());
}

// Everything a run uses from a scenario, for comparing two parses.
json canon(const bgh::Scenario& s) {
    const bgh::EngineOptions& e = s.engine;
    json j = {{"name", s.name}, {"description", s.description}, {"profile", s.profile}, {"mode", s.mode},
              {"model", {s.model_path, s.model_scale_path, s.model_seed}},
              {"hw", {s.vram_budget_mib, s.host_budget_mib, s.cgroup_memory_mib, s.swap}},
              {"changes", bgh::changes_to_json(s.changes)},
              {"engine", {e.slots, e.hot, e.transient_slots, e.lru_slots, e.io, e.queue_depth, e.read_size_bytes,
                          e.threads, e.engram_buffer_kib, e.backend, e.residency_path, e.extra_args}},
              {"prompt", {s.prompt_tokens, s.prompt_seed, s.prompt_text_file, s.prompt_ids_file}},
              {"passes", {s.passes, s.pass_labels, s.decode_tokens, s.repetitions, s.baseline_reference}},
              {"tolerance", s.speed_ratio_tolerance},
              {"warnings", s.warnings}};
    if (s.published) {
        auto fig = [](const std::optional<bgh::Figure>& f) { return f ? json{f->low, f->high} : json(); };
        json passes = json::array();
        for (const auto& p : s.published->passes)
            passes.push_back({fig(p.prefill_tok_s), fig(p.disk_read_pct), fig(p.disk_wait_ms)});
        j["published"] = {s.published->source, passes, fig(s.published->decode_tok_s), fig(s.published->vram_peak_mib),
                          s.published->vram_note};
    }
    return j;
}

void check_accepted(const bgh::Scenario& s, const std::string& text) {
    if (std::getenv("BG_FUZZ_VERBOSE")) std::fprintf(stderr, "accepted: %s\n", s.name.c_str());
    if (s.file != anchor()) finding("accepted file", s.file.c_str());
    if (!name_ok(s.name, false)) finding("accepted name", s.name.c_str());
    if (!name_ok(s.profile, true)) finding("accepted profile", s.profile.c_str());
    if (s.mode != "run" && s.mode != "ablation") finding("accepted mode", s.mode.c_str());
    if (!abs_path(s.model_path)) finding("accepted model.path", "not absolute");
    if (!s.model_scale_path.empty() && !abs_path(s.model_scale_path)) finding("accepted model.scale", "not absolute");
    in_range(static_cast<int64_t>(s.model_seed), 0, INT64_MAX, "model.seed");
    const int64_t big = int64_t(1) << 40;
    in_range(s.vram_budget_mib, 1, big, "hardware.vram_budget_mib");
    in_range(s.host_budget_mib, 1, big, "hardware.host_budget_mib");
    in_range(s.cgroup_memory_mib, 8, big, "hardware.cgroup_memory_mib");
    const bgh::EngineOptions& e = s.engine;
    in_range(e.slots, 0, 1 << 20, "engine.slots");
    in_range(e.hot, 0, e.slots, "engine.hot");
    in_range(e.transient_slots, 1, 1 << 20, "engine.transient_slots");
    in_range(e.lru_slots, 0, 1 << 24, "engine.lru_slots");
    if (e.io != "uring" && e.io != "pread") finding("accepted engine.io", e.io.c_str());
    in_range(e.queue_depth, 1, 4096, "engine.queue_depth");
    in_range(e.read_size_bytes, 4096, int64_t(1) << 30, "engine.read_size");
    if (e.read_size_bytes % 4096) finding("accepted engine.read_size", "not a multiple of 4096");
    in_range(e.threads, 0, 4096, "engine.threads");
    in_range(e.engram_buffer_kib, 4, 1 << 22, "engine.engram_buffer_kib");
    if (e.backend != "" && e.backend != "auto" && e.backend != "cpu" && e.backend != "cuda")
        finding("accepted engine.backend", e.backend.c_str());
    if (!e.residency_path.empty() && !abs_path(e.residency_path)) finding("accepted engine.residency", "not absolute");
    if (s.prompt_text_file.empty() && s.prompt_ids_file.empty()) {
        in_range(s.prompt_tokens, 1, 1 << 20, "prompt.tokens");
    } else {
        if (!s.prompt_text_file.empty() && !s.prompt_ids_file.empty()) finding("accepted prompt", "both a text and an ids file");
        for (const std::string* f : {&s.prompt_text_file, &s.prompt_ids_file})
            if (!f->empty() && !abs_path(*f)) finding("accepted prompt file", "not absolute");
        if (s.prompt_tokens != 0) finding("accepted prompt", "both a file and a token count");
    }
    in_range(static_cast<int64_t>(s.prompt_seed), 0, INT64_MAX, "prompt.seed");
    in_range(s.passes, 1, 1000, "passes");
    if (!s.pass_labels.empty() && int64_t(s.pass_labels.size()) != s.passes) finding("accepted pass_labels", "count");
    in_range(s.decode_tokens, 0, 1 << 20, "decode_tokens");
    in_range(s.repetitions, 1, 1000, "repetitions");
    if (!(s.speed_ratio_tolerance >= 0 && s.speed_ratio_tolerance <= 1)) finding("accepted tolerances.speed_ratio", "");
    if (s.published) {
        if (s.mode != "run") finding("accepted published", "in mode ablation");
        if (int64_t(s.published->passes.size()) > s.passes) finding("accepted published.passes", "more than run");
        for (const auto& p : s.published->passes) {
            check_figure(p.prefill_tok_s, "prefill_tok_s");
            check_figure(p.disk_read_pct, "disk_read_pct");
            check_figure(p.disk_wait_ms, "disk_wait_ms");
        }
        check_figure(s.published->decode_tok_s, "decode_tok_s");
        check_figure(s.published->vram_peak_mib, "vram_peak_mib");
    }
    for (const std::string& w : s.warnings) check_line(w, "scenario warning");
    // The OS reads a path or an argument only up to a NUL: it would name another file.
    for (const std::string* p : {&s.model_path, &s.model_scale_path, &e.residency_path, &s.prompt_text_file, &s.prompt_ids_file, &s.name})
        if (p->find('\0') != std::string::npos) finding("accepted path or name holds a NUL", p->c_str());
    for (const std::string& a : e.extra_args)
        if (a.find('\0') != std::string::npos) finding("accepted engine.extra_args holds a NUL", a.c_str());

    // The recorded source is the file's JSON, and the integers were taken from it unchanged.
    if (*s.source != json::parse(text)) finding("source", "differs from the file's JSON");
    same_int(*s.source, "model", "seed", static_cast<int64_t>(s.model_seed));
    same_int(*s.source, "hardware", "vram_budget_mib", s.vram_budget_mib);
    same_int(*s.source, "hardware", "host_budget_mib", s.host_budget_mib);
    same_int(*s.source, "hardware", "cgroup_memory_mib", s.cgroup_memory_mib);
    const std::map<std::string, int64_t> engine_ints = {
        {"slots", e.slots},          {"hot", e.hot},         {"transient_slots", e.transient_slots},
        {"lru_slots", e.lru_slots},  {"queue_depth", e.queue_depth}, {"threads", e.threads},
        {"engram_buffer_kib", e.engram_buffer_kib}};
    for (const auto& [k, v] : engine_ints) same_int(*s.source, "engine", k.c_str(), v);
    same_int(*s.source, "engine", "read_size", e.read_size_bytes);
    same_int(*s.source, "prompt", "tokens", s.prompt_tokens);
    same_int(*s.source, "prompt", "seed", static_cast<int64_t>(s.prompt_seed));
    same_int(*s.source, nullptr, "passes", s.passes);
    same_int(*s.source, nullptr, "decode_tokens", s.decode_tokens);
    same_int(*s.source, nullptr, "repetitions", s.repetitions);

    // The configurations, their names and command lines.
    const std::vector<bgh::Changes> configs = s.configurations();
    if (s.mode == "ablation" ? configs.size() != 9 : (configs.empty() || configs.front() != s.changes))
        finding("configurations", s.mode.c_str());
    for (const bgh::Changes& c : configs) {
        if (bgh::changes_name(c) == "?") finding("changes_name", "unnamed configuration");
        std::map<std::string, int> seen;
        for (const std::string& a : bgh::engine_args(s, c, "/tmp/m.json")) {
            const std::string flag = a.substr(0, a.find('='));
            if (harness_flags().count(flag) && ++seen[flag] > 1) finding("engine_args repeats a harness flag", flag.c_str());
        }
    }

    // The same scenario again from its recorded source (what results keep and re-read).
    const std::string again = s.source->dump();
    try {
        const bgh::Scenario s2 = bgh::parse_scenario(again, anchor());
        if (canon(s2) != canon(s)) finding("round trip", "the recorded source parses to another scenario");
    } catch (const bgh::ScenarioError& e2) {
        finding("round trip: the recorded source is rejected", e2.what());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const bgh::Scenario s = bgh::parse_scenario(text, anchor());
        check_accepted(s, text);
    } catch (const bgh::ScenarioError& e) {
        check_rejected(e);
    } catch (const std::exception& e) {
        finding("exception other than ScenarioError", e.what());
    }
    return 0;
}
