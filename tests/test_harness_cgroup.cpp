// Memory cgroups: creation, limits and removal on the layout this machine has (through libcgroup)
// and on both layouts through a fake root; refusal without permission; an OOM kill at a
// deliberately tiny limit reported as OOM with the limit, results still written.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "harness/harness_fixture.h"

using bghtest::TempDir;
using nlohmann::json;

namespace {

std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

}  // namespace

TEST(HarnessCgroup, LimitFilesPerLayout) {
    using V = std::vector<std::pair<std::string, std::string>>;
    const bgh::CgroupLimits lim{256ull << 20, false};
    EXPECT_EQ(bgh::limit_files(bgh::CgroupLayout::kV2, lim, true),
              (V{{"memory.max", "268435456"}, {"memory.swap.max", "0"}}));
    // v1 refuses a memory+swap limit below the memory limit: memory first, then memsw equal.
    EXPECT_EQ(bgh::limit_files(bgh::CgroupLayout::kV1, lim, true),
              (V{{"memory.limit_in_bytes", "268435456"}, {"memory.memsw.limit_in_bytes", "268435456"}}));
    EXPECT_EQ(bgh::limit_files(bgh::CgroupLayout::kV1, lim, false), (V{{"memory.limit_in_bytes", "268435456"}}));
    EXPECT_EQ(bgh::limit_files(bgh::CgroupLayout::kV2, {1ull << 20, true}, true), (V{{"memory.max", "1048576"}}));
}

TEST(HarnessCgroup, KeyedValues) {
    EXPECT_EQ(bgh::keyed_value("low 0\nhigh 3\nmax 7\noom 2\noom_kill 1\n", "oom"), 2u);
    EXPECT_EQ(bgh::keyed_value("low 0\nhigh 3\nmax 7\noom 2\noom_kill 1\n", "oom_kill"), 1u);
    EXPECT_EQ(bgh::keyed_value("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n", "oom_kill"), 4u);
    EXPECT_EQ(bgh::keyed_value("", "oom_kill"), 0u);
}

TEST(HarnessCgroup, FakeV2CreateLimitAttachReadRemove) {
    TempDir root;
    auto g = bgh::MemoryCgroup::create_fake(root.path, bgh::CgroupLayout::kV2, "bench/run-1", {64ull << 20, false});
    const std::string p = root / "bench/run-1";
    EXPECT_EQ(g->path(), p);
    EXPECT_EQ(trimmed(bghtest::read_text(p + "/memory.max")), "67108864");
    EXPECT_EQ(trimmed(bghtest::read_text(p + "/memory.swap.max")), "0");
    EXPECT_NE(bghtest::read_text(root / "bench/cgroup.subtree_control").find("+memory"), std::string::npos)
        << "the parent hands the memory controller down";
    EXPECT_TRUE(g->swap_limited());
    g->attach(4242);
    EXPECT_EQ(trimmed(bghtest::read_text(p + "/cgroup.procs")), "4242");
    bghtest::write_text(p + "/memory.peak", "123456789\n");
    bghtest::write_text(p + "/memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n");
    const bgh::CgroupUsage u = g->usage();
    ASSERT_TRUE(u.peak_bytes);
    EXPECT_EQ(*u.peak_bytes, 123456789u);
    EXPECT_EQ(u.peak_source, "memory.peak");
    EXPECT_EQ(u.oom_events, 2u);
    EXPECT_EQ(u.oom_kills, 1u);
    const json d = g->describe();
    EXPECT_EQ(d["layout"], "v2");
    EXPECT_EQ(d["files_written"]["memory.swap.max"], "0");
    g->remove();
    EXPECT_FALSE(bghtest::fs::exists(p));
    g->remove();  // twice is fine
}

TEST(HarnessCgroup, FakeV2WithoutPeakFileFallsBackToSampling) {
    TempDir root;
    auto g = bgh::MemoryCgroup::create_fake(root.path, bgh::CgroupLayout::kV2, "g", {64ull << 20, false});
    bghtest::fs::remove(root / "g/memory.peak");
    bghtest::write_text(root / "g/memory.current", "5000\n");
    g->sample();
    bghtest::write_text(root / "g/memory.current", "2000\n");
    const bgh::CgroupUsage u = g->usage();
    ASSERT_TRUE(u.peak_bytes);
    EXPECT_EQ(*u.peak_bytes, 5000u);
    EXPECT_EQ(u.peak_source, "sampled memory.current");
}

TEST(HarnessCgroup, FakeV1CreateLimitAttachReadRemove) {
    TempDir root;
    {
        auto g = bgh::MemoryCgroup::create_fake(root.path, bgh::CgroupLayout::kV1, "run-2", {96ull << 20, false});
        const std::string p = root / "run-2";
        EXPECT_EQ(trimmed(bghtest::read_text(p + "/memory.limit_in_bytes")), "100663296");
        EXPECT_EQ(trimmed(bghtest::read_text(p + "/memory.memsw.limit_in_bytes")), "100663296");
        g->attach(777);
        EXPECT_EQ(trimmed(bghtest::read_text(p + "/cgroup.procs")), "777");
        bghtest::write_text(p + "/memory.max_usage_in_bytes", "99999\n");
        bghtest::write_text(p + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
        const bgh::CgroupUsage u = g->usage();
        EXPECT_EQ(*u.peak_bytes, 99999u);
        EXPECT_EQ(u.peak_source, "memory.max_usage_in_bytes");
        EXPECT_EQ(u.oom_kills, 3u);
    }
    EXPECT_FALSE(bghtest::fs::exists(root / "run-2")) << "the destructor removes the group";
}

TEST(HarnessCgroup, FakeSwapAllowedWritesNoSwapLimit) {
    TempDir root;
    auto g = bgh::MemoryCgroup::create_fake(root.path, bgh::CgroupLayout::kV1, "s", {64ull << 20, true});
    EXPECT_FALSE(g->swap_limited());
    EXPECT_EQ(g->describe()["files_written"].size(), 1u);
    EXPECT_EQ(trimmed(bghtest::read_text(root / "s/memory.memsw.limit_in_bytes")), "9223372036854771712");
}

// The layout this machine mounts, through libcgroup and the kernel.
TEST(HarnessCgroup, RealCreateLimitAttachRemove) {
    std::string why;
    if (!bghtest::can_create_cgroups(&why)) GTEST_SKIP() << "cannot create memory cgroups here: " << why;
    auto g = bgh::MemoryCgroup::create("betelgeuse-test-" + std::to_string(::getpid()), {64ull << 20, false});
    const std::string p = g->path();
    ASSERT_TRUE(bghtest::fs::is_directory(p));
    const bool v2 = g->layout() == bgh::CgroupLayout::kV2;
    std::printf("layout %s at %s\n", bgh::layout_name(g->layout()), p.c_str());
    EXPECT_EQ(trimmed(bghtest::read_text(p + (v2 ? "/memory.max" : "/memory.limit_in_bytes"))), "67108864");
    if (g->swap_limited()) {
        EXPECT_EQ(trimmed(bghtest::read_text(p + (v2 ? "/memory.swap.max" : "/memory.memsw.limit_in_bytes"))),
                  v2 ? "0" : "67108864");
    }
    const pid_t child = ::fork();
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    g->attach(child);
    EXPECT_NE(bghtest::read_text(p + "/cgroup.procs").find(std::to_string(child)), std::string::npos);
    g->sample();
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    const bgh::CgroupUsage u = g->usage();
    EXPECT_TRUE(u.peak_bytes);
    EXPECT_EQ(u.oom_kills, 0u);
    g->remove();
    EXPECT_FALSE(bghtest::fs::exists(p));
}

TEST(HarnessCgroup, NoPermissionIsARefusalWithTheReason) {
    std::string why;
    if (::geteuid() != 0 || !bghtest::can_create_cgroups(&why)) GTEST_SKIP() << "needs root with writable cgroups";
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        // An ordinary user may not create cgroups at the hierarchy's root.
        ::close(pipefd[0]);
        std::string msg = "created";
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) msg = "setuid failed";
        else {
            try {
                bgh::MemoryCgroup::create("betelgeuse-test-nobody-" + std::to_string(::getpid()), {64ull << 20, false});
            } catch (const bgh::CgroupError& e) {
                msg = e.what();
            }
        }
        ssize_t w = ::write(pipefd[1], msg.data(), msg.size());
        (void)w;
        ::_exit(0);
    }
    ::close(pipefd[1]);
    std::string msg;
    char buf[512];
    ssize_t n;
    while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) msg.append(buf, n);
    ::close(pipefd[0]);
    ::waitpid(child, nullptr, 0);
    EXPECT_NE(msg.find("cannot create memory cgroup"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--no-cgroup"), std::string::npos) << msg;
}

TEST(HarnessCgroup, HarnessRefusesWithoutACgroupUnlessTold) {
    TempDir dir;
    const std::string sc = bghtest::tiny_scenario(dir.path, "refuse", {{"repetitions", 1}});
    auto e = bghtest::exec({bghtest::harness_bin(), "run", sc, "--out", dir / "out", "--no-probe", "--quiet",
                            "--cgroup-parent", "no/such/parent/here"});
    EXPECT_EQ(e.code, 4) << e.out;
    EXPECT_NE(e.out.find("refusing to run"), std::string::npos) << e.out;
    EXPECT_FALSE(bghtest::fs::exists(dir / "out/test/refuse")) << "nothing is measured or written";

    e = bghtest::exec({bghtest::harness_bin(), "run", sc, "--out", dir / "out", "--no-probe", "--quiet", "--no-cgroup"});
    ASSERT_EQ(e.code, 0) << e.out;
    const json r = bghtest::read_json(bghtest::only_result(dir / "out", "test", "refuse"));
    EXPECT_EQ(r["status"], "complete");
    EXPECT_EQ(r["cgroup"]["enabled"], false);
    EXPECT_NE(r["cgroup"]["reason"].get<std::string>().find("--no-cgroup"), std::string::npos);
}

TEST(HarnessCgroup, HarnessRunsInFakeCgroupsOfEitherLayout) {
    for (const char* layout : {"v1", "v2"}) {
        SCOPED_TRACE(layout);
        TempDir dir;
        const std::string sc = bghtest::tiny_scenario(dir.path, "fake", {{"repetitions", 1}});
        const auto e = bghtest::exec({bghtest::harness_bin(), "run", sc, "--out", dir / "out", "--no-probe", "--quiet",
                                      "--fake-cgroup-root", dir / "cg", "--fake-cgroup-layout", layout});
        ASSERT_EQ(e.code, 0) << e.out;
        const json r = bghtest::read_json(bghtest::only_result(dir / "out", "test", "fake"));
        EXPECT_EQ(r["cgroup"]["layout"], layout);
        EXPECT_EQ(r["cgroup"]["fake"], true);
        EXPECT_EQ(r["cgroup"]["files_written"].size(), 2u);
        for (const auto& c : r["configurations"])
            for (const auto& run : c["runs"]) EXPECT_EQ(run["cgroup"]["removed"], true);
        size_t left = 0;
        for (auto& x : bghtest::fs::directory_iterator(dir / "cg"))
            if (x.is_directory()) ++left;
        EXPECT_EQ(left, 0u) << "every group removed";
    }
}

TEST(HarnessCgroup, OomKillIsReportedAsOomWithTheLimit) {
    std::string why;
    if (!bghtest::can_create_cgroups(&why)) GTEST_SKIP() << "cannot create memory cgroups here: " << why;
    TempDir dir;
    // The engine's resident set is well over 100 MiB even on the tiny model; 32 MiB cannot hold it.
    const std::string sc = bghtest::tiny_scenario(dir.path, "oom", {{"repetitions", 1}, {"hardware", {{"cgroup_memory_mib", 32}}}});
    const auto e = bghtest::exec({bghtest::harness_bin(), "run", sc, "--out", dir / "out", "--no-probe", "--quiet"});
    EXPECT_EQ(e.code, 3) << e.out;
    EXPECT_NE(e.out.find("OOM"), std::string::npos) << e.out;
    const std::string path = bghtest::only_result(dir / "out", "test", "oom");
    ASSERT_FALSE(path.empty());
    const json r = bghtest::read_json(path);
    EXPECT_EQ(r["status"], "oom");
    EXPECT_NE(r["status_detail"].get<std::string>().find("limit of 32 MiB"), std::string::npos) << r["status_detail"];
    const json& run = r["configurations"][0]["runs"][0];
    EXPECT_EQ(run["status"], "oom");
    EXPECT_GE(run["cgroup"]["oom_kills"].get<int>(), 1);
    EXPECT_EQ(run["cgroup"]["limit_mib"], 32);
    EXPECT_EQ(run["cgroup"]["removed"], true);
    EXPECT_TRUE(run.contains("partial")) << "what was measured before the kill is kept";
    const std::string md = bghtest::read_text(path.substr(0, path.size() - 5) + ".md");
    EXPECT_NE(md.find("OOM"), std::string::npos);
    EXPECT_NE(md.find("32.0 MiB"), std::string::npos) << md;
}
