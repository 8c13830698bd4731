// The commit the binaries were built from (util/build_info.h): what cmake/build_info.cmake
// finds in a checkout, a dirty one, a folder inside a checkout and a folder outside any; that it
// rewrites its file only when the answer changes; and that the engine reports the embedded value
// (`version`, the start-up print, run's metrics). The harness's record of it is checked in
// test_harness_results.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model_fixture.h"
#include "util/build_info.h"

namespace {

namespace fs = std::filesystem;

struct Ran {
    int code = -1;
    std::string out;
};

// A shell command; stdout only (stderr with `merge`), and its exit status.
Ran sh(const std::string& cmd, bool merge = false) {
    Ran r;
    FILE* p = ::popen((cmd + (merge ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string read_text(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct TempDir {
    std::string path;
    TempDir() {
        std::string t = (fs::temp_directory_path() / "bg-build-info-XXXXXX").string();
        path = ::mkdtemp(t.data());
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::string engine() { return std::string(BG_BINARY_DIR) + "/betelgeuse"; }

// The generated file for `source` (the script run as the build runs it), and the BuildInfo
// initialiser it holds: {commit, describe, dirty, subject, note}.
std::string generate(const std::string& source, const std::string& out) {
    const Ran r = sh(std::string("'") + BG_CMAKE_COMMAND + "' -DSOURCE_DIR='" + source + "' -DOUT='" + out + "' -DGIT='" +
                         BG_GIT + "' -P '" + BG_SOURCE_DIR + "/cmake/build_info.cmake'",
                     true);
    EXPECT_EQ(r.code, 0) << r.out;
    return read_text(out);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string git(const std::string& dir, const std::string& args) {
    return trim(sh("git -C '" + dir + "' -c user.name=test -c user.email=test@example.com " + args).out);
}

TEST(BuildInfo, TheScriptNamesTheCheckoutsCommitAndWhetherItIsDirty) {
    if (std::string(BG_GIT).empty()) GTEST_SKIP() << "no git was found when this tree was configured";
    TempDir d;
    const std::string repo = d.path + "/repo", out = d.path + "/values.cpp";
    fs::create_directories(repo + "/sub");
    std::ofstream(repo + "/a.txt") << "one\n";
    ASSERT_EQ(sh("git init -q '" + repo + "'").code, 0);
    git(repo, "add a.txt");
    git(repo, "commit -q -m 'First: a \"quoted\" subject\\with a backslash'");
    const std::string head = git(repo, "rev-parse HEAD");
    ASSERT_EQ(head.size(), 40u);

    std::string text = generate(repo, out);
    EXPECT_TRUE(has(text, "R\"bg_(" + head + ")bg_\"")) << text;
    EXPECT_TRUE(has(text, "R\"bg_(" + head.substr(0, 12) + ")bg_\", false,")) << "clean: describe is the short hash" << text;
    EXPECT_TRUE(has(text, "R\"bg_(First: a \"quoted\" subject\\with a backslash)bg_\"")) << text;

    // Unchanged: the file is not rewritten (an unchanged tree rebuilds nothing).
    struct stat before {}, after {};
    ::stat(out.c_str(), &before);
    ::usleep(20000);
    EXPECT_EQ(generate(repo, out), text);
    ::stat(out.c_str(), &after);
    EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
    EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);

    // An edit to a tracked file makes the build dirty; a new commit moves the hash.
    std::ofstream(repo + "/a.txt") << "two\n";
    text = generate(repo, out);
    EXPECT_TRUE(has(text, "R\"bg_(" + head.substr(0, 12) + "-dirty)bg_\", true,")) << text;
    git(repo, "commit -q -am Second");
    const std::string head2 = git(repo, "rev-parse HEAD");
    text = generate(repo, out);
    EXPECT_TRUE(has(text, "R\"bg_(" + head2 + ")bg_\"")) << text;
    EXPECT_TRUE(has(text, ", false,")) << text;

    // A folder inside a checkout is not one: its binaries would name the outer tree's commit.
    for (const std::string& src : {repo + "/sub", d.path}) {
        text = generate(src, out);
        EXPECT_TRUE(has(text, "R\"bg_(unknown)bg_\", R\"bg_(unknown)bg_\", std::nullopt,")) << src << "\n" << text;
        EXPECT_TRUE(has(text, "built outside a git checkout")) << text;
    }
}

TEST(BuildInfo, WithoutGitTheCommitIsUnknown) {
    TempDir d;
    const Ran r = sh(std::string("'") + BG_CMAKE_COMMAND + "' -DSOURCE_DIR='" + BG_SOURCE_DIR + "' -DOUT='" + d.path +
                     "/nogit.cpp' -DGIT= -P '" + BG_SOURCE_DIR + "/cmake/build_info.cmake'");
    ASSERT_EQ(r.code, 0);
    const std::string nogit = read_text(d.path + "/nogit.cpp");
    EXPECT_TRUE(has(nogit, "R\"bg_(unknown)bg_\", R\"bg_(unknown)bg_\", std::nullopt,")) << nogit;
    EXPECT_TRUE(has(nogit, "built without git")) << nogit;
}

TEST(BuildInfo, UnknownIsSaidPlainly) {
    const bg::BuildInfo unknown{"unknown", "unknown", std::nullopt, "", "built outside a git checkout: the commit is unknown"};
    EXPECT_FALSE(unknown.known());
    EXPECT_EQ(unknown.line(), "unknown (built outside a git checkout: the commit is unknown)");
    const nlohmann::json j = unknown.to_json();
    EXPECT_TRUE(j["commit"].is_null());
    EXPECT_TRUE(j["dirty"].is_null());
    EXPECT_EQ(j["note"], unknown.note);
    const bg::BuildInfo known{"0123456789abcdef0123456789abcdef01234567", "0123456789ab-dirty", true, "Subject", ""};
    EXPECT_EQ(known.line(), "0123456789ab-dirty (commit 0123456789abcdef0123456789abcdef01234567, with uncommitted changes)");
    EXPECT_EQ(known.to_json()["commit"], known.commit);
    EXPECT_EQ(known.to_json()["dirty"], true);
    EXPECT_FALSE(known.to_json().contains("note"));
}

// The engine of this build tree carries the value this test was built with (the same build).
TEST(BuildInfo, TheEngineReportsTheEmbeddedCommit) {
    const nlohmann::json want = bg::build_info().to_json();
    const Ran v = sh("'" + engine() + "' version --json");
    ASSERT_EQ(v.code, 0) << v.out;
    EXPECT_EQ(nlohmann::json::parse(v.out), want);
    EXPECT_EQ(trim(sh("'" + engine() + "' version").out), "betelgeuse " + bg::build_info().line());

    TempDir d;
    const std::string metrics = d.path + "/m.json";
    const Ran run = sh("'" + engine() + "' run -m '" + bgtest::tiny_model() + "' --prompt-tokens 4 -n 1 --threads 1 " +
                           "--metrics-json '" + metrics + "'",
                       true);
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_TRUE(has(run.out, "  build              " + bg::build_info().line() + "\n")) << "the start-up print" << run.out;
    EXPECT_EQ(nlohmann::json::parse(read_text(metrics))["build"], want);
}

}  // namespace
