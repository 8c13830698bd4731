// Where a result was measured and from which source: CPU, cores, RAM, GPU and driver, the disk
// and file system under the model file, raw disk and pinned PCIe bandwidth measured on the spot
// (a result is only comparable with the hardware's own ceiling beside it), and the commit the
// engine was built from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

struct MachineProbe {
    std::string engine_path;            // runs `probe-disk`, `probe-pcie` and `probe-host`
    std::string model_path;             // the disk and file system that matter are this file's
    std::vector<std::string> disk_probe_flags;  // the engine's I/O settings, so the probe matches
    bool probe_disk = true;
    bool probe_pcie = true;
    bool probe_host = true;  // the host's memory read rate (decode's CPU path: issue 24's bound)
};

// Every field the machine offers; missing facts are null with a "*_note" saying why.
nlohmann::json describe_machine(const MachineProbe& p);

// The commit the engine at `engine_path` was built from, as it reports it (`version --json`, the
// value embedded at its build: util/build_info.h), not that of any checkout the harness runs in;
// {"commit": null, "dirty": null, "note": why} when it cannot say.
nlohmann::json engine_build(const std::string& engine_path);

// Runs argv (argv[0] looked up in PATH) and returns its stdout (plus stderr when `merge_stderr`),
// or nullopt when it cannot run or exits non-zero.
std::optional<std::string> capture(const std::vector<std::string>& argv, bool merge_stderr = false,
                                   int* exit_code = nullptr);

// The GPUs nvidia-smi lists ("name, driver, MiB" each), empty without one.
std::vector<std::string> list_gpus();

}  // namespace bgh
