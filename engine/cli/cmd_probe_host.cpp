#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cpu/read_probe.h"
#include "cpu/thread_pool.h"
#include "util/check.h"

namespace bg::cli {

// The host's memory read rate (cpu/read_probe.h): what the CPU could read of host-resident
// experts at best, beside probe-pcie's copy rate (the harness's decode bound takes both).
void register_probe_host(CLI::App& app) {
    auto* cmd = app.add_subcommand("probe-host", "Measure the host's memory read bandwidth (all threads, and one)");
    static uint64_t mib = 1024;
    static int threads = 0;
    static int reps = 5;
    static bool json = false;
    cmd->add_option("--mib", mib, "Buffer read, MiB (larger than the caches)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--threads", threads, "Threads reading at once (0: all cores)")->capture_default_str();
    cmd->add_option("--reps", reps, "Reads timed (best is reported)")->capture_default_str()->check(CLI::Range(1, 1000));
    cmd->add_flag("--json", json, "Print JSON");
    cmd->callback([] {
        std::vector<uint64_t> buf((mib << 20) / 8);
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;  // every page touched first
        cpu::ThreadPool pool(threads);
        const int64_t n = static_cast<int64_t>(buf.size());
        const double all = cpu::host_read_gb_s(&pool, buf.data(), n, reps);
        const double one = cpu::host_read_gb_s(nullptr, buf.data(), n, std::max(1, reps / 2));
        if (json)
            std::printf("%s\n", nlohmann::json{{"bytes", buf.size() * 8}, {"threads", pool.size()}, {"read_gb_s", all},
                                               {"one_thread_read_gb_s", one}}
                                    .dump()
                                    .c_str());
        else
            std::printf("host memory read: %.1f GB/s with %d threads, %.1f GB/s with one (%llu MiB buffer)\n", all,
                        pool.size(), one, (unsigned long long)mib);
    });
}

}  // namespace bg::cli
