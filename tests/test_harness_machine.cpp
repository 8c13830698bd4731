// The machine description's probes (harness/machine.cpp), run against a stand-in engine and a
// stand-in nvidia-smi on PATH: each probe's figures land in their fields, and the pinned copy
// rate comes from the one probe-pcie run that also reads host memory (it measures the copies
// alone first), so a harness run starts probe-pcie once.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "machine.h"
#include "temp_dir.h"

namespace {

void write_script(const std::string& path, const std::string& body) {
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
}

int count_lines_starting(const std::string& path, const std::string& prefix) {
    std::ifstream f(path);
    std::string line;
    int n = 0;
    while (std::getline(f, line)) n += line.rfind(prefix, 0) == 0;
    return n;
}

// PATH with a folder in front for the test's lifetime.
class PathFront {
public:
    explicit PathFront(const std::string& dir) : old_(getenv("PATH") ? getenv("PATH") : "") {
        setenv("PATH", (dir + ":" + old_).c_str(), 1);
    }
    ~PathFront() { setenv("PATH", old_.c_str(), 1); }

private:
    std::string old_;
};

// A stand-in nvidia-smi listing one GPU and a stand-in engine running `engine_body` (a shell
// case on its arguments), both first on PATH, and a probe of the machine that runs the engine.
struct StandIns {
    bgtest::TempDir tmp{"harness_machine"};
    std::unique_ptr<PathFront> path;
    bgh::MachineProbe probe;
    explicit StandIns(const std::string& engine_body) {
        write_script(tmp.file("nvidia-smi"), "echo 'Stand-in GPU, 1.0, 81559'\n");
        write_script(tmp.file("engine"), engine_body);
        path = std::make_unique<PathFront>(tmp.path());
        probe.engine_path = tmp.file("engine");
        probe.model_path = probe.engine_path;  // a file on the disk the test runs on
    }
};

TEST(HarnessMachine, PinnedRateComesFromTheOneProbePcieRunBesideHostReads) {
    StandIns s("echo \"$*\" >> \"$(dirname \"$0\")/calls.log\"\n"
               "case \"$1 $2\" in\n"
               "  'probe-disk '*) echo '{\"seq_gb_s\": 2.5}' ;;\n"
               "  'probe-host '*) echo '{\"read_gb_s\": 100.0}' ;;\n"
               "  'probe-pcie --with-host-reads') echo '{\"pinned_gb_s\": 54.0, \"together_sum_gb_s\": 150.0}' ;;\n"
               "  'probe-pcie '*) echo '{\"pinned_gb_s\": 1.0}' ;;\n"
               "esac\n");
    bgh::MachineProbe& p = s.probe;
    const std::string calls = s.tmp.file("calls.log");
    const nlohmann::json m = bgh::describe_machine(p);
    ASSERT_TRUE(m["gpu"].is_object()) << m.dump();
    EXPECT_EQ(m["pinned_pcie_gb_s"], 54.0) << m.dump();
    EXPECT_EQ(m["pcie_and_host_read_gb_s"], 150.0);
    EXPECT_EQ(m["host_read_gb_s"], 100.0);
    EXPECT_EQ(m["pinned_pcie_from"], "pcie_and_host_read_probe");
    EXPECT_EQ(m["pcie_and_host_read_probe"]["pinned_gb_s"], 54.0);
    EXPECT_FALSE(m.contains("pcie_probe")) << "the run's output once, not twice";
    EXPECT_EQ(count_lines_starting(calls, "probe-pcie"), 1);

    // Without the host probe the plain run gives the pinned rate, and nothing runs both.
    p.probe_host = false;
    const nlohmann::json alone = bgh::describe_machine(p);
    EXPECT_EQ(alone["pinned_pcie_gb_s"], 1.0) << alone.dump();
    EXPECT_TRUE(alone["pcie_and_host_read_gb_s"].is_null());
    EXPECT_EQ(count_lines_starting(calls, "probe-pcie"), 2);
}

// A probe-pcie that fails says so in the pinned rate's note too.
TEST(HarnessMachine, AFailedProbePcieLeavesBothRatesNullWithANote) {
    StandIns s("case \"$1\" in\n"
               "  probe-pcie) echo 'no device here' >&2; exit 1 ;;\n"
               "  probe-host) echo '{\"read_gb_s\": 100.0}' ;;\n"
               "  *) echo '{}' ;;\n"
               "esac\n");
    const nlohmann::json m = bgh::describe_machine(s.probe);
    EXPECT_TRUE(m["pinned_pcie_gb_s"].is_null()) << m.dump();
    EXPECT_TRUE(m["pcie_and_host_read_gb_s"].is_null());
    EXPECT_NE(m.value("pinned_pcie_note", std::string()).find("probe-pcie failed"), std::string::npos) << m.dump();
}

}  // namespace
