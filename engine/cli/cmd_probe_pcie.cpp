#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "util/check.h"
#ifdef BG_HAVE_CUDA
#include "cuda/cuda_backend.cuh"
#endif

namespace bg::cli {

void register_probe_pcie(CLI::App& app) {
    auto* cmd = app.add_subcommand("probe-pcie", "Measure host-to-device copy bandwidth (pinned and pageable)");
    static uint64_t bytes = 256ull << 20;
    static int reps = 5;
    static bool json = false;
    cmd->add_option("--bytes", bytes, "Bytes per copy")->capture_default_str();
    cmd->add_option("--reps", reps, "Copies timed (best is reported)")->capture_default_str();
    cmd->add_flag("--json", json, "Print JSON");
    cmd->callback([] {
#ifdef BG_HAVE_CUDA
        const cuda::PcieProbe p = cuda::probe_pcie(bytes, reps);
        if (json)
            std::printf("%s\n", nlohmann::json{{"device", p.device_name}, {"bytes", p.bytes}, {"pinned_gb_s", p.pinned_gb_s},
                                               {"pageable_gb_s", p.pageable_gb_s}}.dump().c_str());
        else
            std::printf("%s: host->device %.2f GB/s pinned, %.2f GB/s pageable (%llu-byte copies)\n", p.device_name.c_str(),
                        p.pinned_gb_s, p.pageable_gb_s, (unsigned long long)p.bytes);
#else
        fail("probe-pcie: this build has no CUDA backend (configure with nvcc present)");
#endif
    });
}

}  // namespace bg::cli
