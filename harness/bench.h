// Running a scenario end to end: refuse early if no cgroup can be made, generate the model if
// needed, describe the machine, then run every configuration x repetition of the scenario, each
// in a fresh memory cgroup with the model's page cache dropped, writing the result files after
// each engine run.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cgroup.h"
#include "json_value.h"
#include "scenario.h"

namespace bgh {

struct BenchOptions {
    std::string out_dir = "results";
    std::string engine_path;               // the betelgeuse binary
    bool use_cgroup = true;                // false: --no-cgroup, recorded in the result
    std::string cgroup_parent;             // inside the memory hierarchy; "" = its root
    std::string fake_cgroup_root;          // tests: plain folders stand in for the hierarchy
    CgroupLayout fake_layout = CgroupLayout::kV2;
    bool probe = true;                     // measure raw disk and PCIe bandwidth
    bool progress = false;                 // a status line on stderr (a terminal)
    bool print_tables = true;              // the Markdown on stdout at the end
    std::vector<std::string> command_line; // the harness's own, for the record
};

struct BenchOutcome {
    std::string status;                    // complete | interrupted | oom | failed
    std::string detail;
    std::string json_path, md_path, svg_path;
    int exit_code = 0;                     // 0 complete, 1 failed, 3 OOM, 130 interrupted
    JsonValue result;
};

// Throws CgroupError (refusal: no cgroup can be created) or std::runtime_error (the model
// cannot be generated) before anything is measured; everything after that ends in a result file.
BenchOutcome run_bench(const Scenario& s, const BenchOptions& o);

// The scenario as recorded in a result (the settings compare and the Markdown need, plus the
// file's own JSON).
nlohmann::json scenario_json(const Scenario& s);

}  // namespace bgh
