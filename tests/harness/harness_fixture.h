// Shared set-up for the harness tests: temporary folders, a tiny scenario (the harness generates
// its model on first use), and running the harness binary as a user would.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cgroup.h"
#include "model_fixture.h"

namespace bghtest {

namespace fs = std::filesystem;
using nlohmann::json;

inline std::string harness_bin() { return std::string(BG_BINARY_DIR) + "/betelgeuse-harness"; }
inline std::string engine_bin() { return std::string(BG_BINARY_DIR) + "/betelgeuse"; }

struct TempDir {
    std::string path;
    TempDir() {
        std::string t = (fs::temp_directory_path() / "bg-harness-test-XXXXXX").string();
        path = ::mkdtemp(t.data());
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string operator/(const std::string& rel) const { return path + "/" + rel; }
};

inline std::string read_text(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline json read_json(const std::string& p) { return json::parse(read_text(p)); }

inline void write_text(const std::string& p, const std::string& s) {
    std::ofstream out(p);
    out << s;
}

// A scenario on the tiny scale, written into `dir` with `patch` merged over the defaults (RFC 7386
// merge patch: null removes a key). The model is generated into the build tree's test-models
// folder on first use, so every test shares one file.
inline std::string tiny_scenario(const std::string& dir, const std::string& name, const json& patch = json::object()) {
    const std::string models = std::string(BG_BINARY_DIR) + "/test-models";
    fs::create_directories(models);
    write_text(dir + "/tiny-scale.json", bgtest::kTinyScale);
    json s = {{"profile", "test"},
              {"model", {{"path", models + "/harness-tiny.gguf"}, {"scale", "tiny-scale.json"}, {"seed", 1}}},
              {"hardware", {{"vram_budget_mib", 1024}, {"host_budget_mib", 1024}, {"cgroup_memory_mib", 2048}}},
              {"changes", {{"partition", true}, {"layer_major", true}, {"promotion", true}}},
              {"engine", {{"slots", 8}, {"hot", 2}, {"threads", 1}}},
              {"prompt", {{"tokens", 16}, {"seed", 1}}},
              {"passes", 2},
              {"decode_tokens", 4},
              {"repetitions", 2}};
    s.merge_patch(patch);
    const std::string path = dir + "/" + name + ".json";
    write_text(path, s.dump(2));
    return path;
}

struct Exec {
    int code = -1;
    std::string out;
};

// Runs a command with its stdout and stderr merged into `out`; code is the exit status, or
// 128 + signal.
inline Exec exec(const std::vector<std::string>& args) {
    std::string cmd;
    for (const auto& a : args) cmd += "'" + a + "' ";
    cmd += "2>&1";
    Exec e;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) e.out.append(buf, n);
    const int st = ::pclose(p);
    e.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return e;
}

// Whether this process may create memory cgroups here (root with a writable hierarchy).
inline bool can_create_cgroups(std::string* why = nullptr) {
    try {
        auto g = bgh::MemoryCgroup::create("betelgeuse-test-probe-" + std::to_string(::getpid()), {64ull << 20, false});
        g->remove();
        return true;
    } catch (const bgh::CgroupError& e) {
        if (why) *why = e.what();
        return false;
    }
}

// Every cgroup the harness process `pid` left behind (it names them betelgeuse-<pid>-<n>).
inline std::vector<std::string> leftover_cgroups(const std::string& hierarchy, int pid) {
    std::vector<std::string> v;
    std::error_code ec;
    const std::string prefix = "betelgeuse-" + std::to_string(pid) + "-";
    for (auto& e : fs::directory_iterator(hierarchy, ec))
        if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path().string());
    return v;
}

// The single result JSON under out/<profile>/<scenario>/.
inline std::string only_result(const std::string& out_dir, const std::string& profile, const std::string& scenario) {
    std::vector<std::string> found;
    std::error_code ec;
    for (auto& e : fs::directory_iterator(out_dir + "/" + profile + "/" + scenario, ec))
        if (e.path().extension() == ".json") found.push_back(e.path().string());
    return found.size() == 1 ? found[0] : "";
}

}  // namespace bghtest
