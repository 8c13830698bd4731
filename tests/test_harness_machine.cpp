// The machine description's probes (harness/machine.cpp), run against a stand-in engine and a
// stand-in nvidia-smi on PATH: each probe's figures land in their fields, and the pinned copy
// rate comes from the one probe-pcie run that also reads host memory (it measures the copies
// alone first), so a harness run starts probe-pcie once.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
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

TEST(HarnessMachine, PinnedRateComesFromTheOneProbePcieRunBesideHostReads) {
    bgtest::TempDir tmp("harness_machine");
    const std::string log = tmp.file("calls.log"), engine = tmp.file("engine");
    write_script(tmp.file("nvidia-smi"), "echo 'Stand-in GPU, 1.0, 81559'\n");
    write_script(engine, "echo \"$*\" >> " + log + "\n" +
                             "case \"$1 $2\" in\n"
                             "  'probe-disk '*) echo '{\"seq_gb_s\": 2.5}' ;;\n"
                             "  'probe-host '*) echo '{\"read_gb_s\": 100.0}' ;;\n"
                             "  'probe-pcie --with-host-reads') echo '{\"pinned_gb_s\": 54.0, \"together_sum_gb_s\": 150.0}' ;;\n"
                             "  'probe-pcie '*) echo '{\"pinned_gb_s\": 1.0}' ;;\n"
                             "esac\n");
    const PathFront path(tmp.path());
    bgh::MachineProbe p;
    p.engine_path = engine;
    p.model_path = engine;  // a file on the disk the test runs on
    const nlohmann::json m = bgh::describe_machine(p);
    ASSERT_TRUE(m["gpu"].is_object()) << m.dump();
    EXPECT_EQ(m["pinned_pcie_gb_s"], 54.0) << m.dump();
    EXPECT_EQ(m["pcie_and_host_read_gb_s"], 150.0);
    EXPECT_EQ(m["host_read_gb_s"], 100.0);
    EXPECT_EQ(m["pcie_probe"]["pinned_gb_s"], 54.0);
    EXPECT_EQ(count_lines_starting(log, "probe-pcie"), 1);

    // Without the host probe the plain run gives the pinned rate, and nothing runs both.
    p.probe_host = false;
    const nlohmann::json alone = bgh::describe_machine(p);
    EXPECT_EQ(alone["pinned_pcie_gb_s"], 1.0) << alone.dump();
    EXPECT_TRUE(alone["pcie_and_host_read_gb_s"].is_null());
    EXPECT_EQ(count_lines_starting(log, "probe-pcie"), 2);
}

// A probe-pcie that fails says so in the pinned rate's note too.
TEST(HarnessMachine, AFailedProbePcieLeavesBothRatesNullWithANote) {
    bgtest::TempDir tmp("harness_machine");
    const std::string engine = tmp.file("engine");
    write_script(tmp.file("nvidia-smi"), "echo 'Stand-in GPU, 1.0, 81559'\n");
    write_script(engine,
                 "case \"$1\" in\n"
                 "  probe-pcie) echo 'no device here' >&2; exit 1 ;;\n"
                 "  probe-host) echo '{\"read_gb_s\": 100.0}' ;;\n"
                 "  *) echo '{}' ;;\n"
                 "esac\n");
    const PathFront path(tmp.path());
    bgh::MachineProbe p;
    p.engine_path = engine;
    p.model_path = engine;
    const nlohmann::json m = bgh::describe_machine(p);
    EXPECT_TRUE(m["pinned_pcie_gb_s"].is_null()) << m.dump();
    EXPECT_TRUE(m["pcie_and_host_read_gb_s"].is_null());
    EXPECT_NE(m.value("pinned_pcie_note", std::string()).find("probe-pcie failed"), std::string::npos) << m.dump();
}

}  // namespace
