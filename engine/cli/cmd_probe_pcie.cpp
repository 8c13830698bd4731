#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cpu/read_probe.h"
#include "cpu/thread_pool.h"
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
    static bool with_reads = false;
    static int threads = 0;
    // probe-host's buffer: with 256 MiB passes a host whose L3 holds 300 MB (an H100 machine's
    // Xeon, 2026-12-06) read 81 GB/s where probe-host's 1 GiB read 67.
    static uint64_t read_mib = 1024;
    cmd->add_option("--bytes", bytes, "Bytes per copy")->capture_default_str();
    cmd->add_option("--reps", reps, "Copies timed (best is reported)")->capture_default_str();
    cmd->add_flag("--json", json, "Print JSON");
    cmd->add_flag("--with-host-reads", with_reads,
                  "Also copy from pinned memory while the cores read host memory (probe-host's reads, repeated), "
                  "and report both rates at once: what a decode step's two paths for host-resident experts share");
    cmd->add_option("--threads", threads, "With --with-host-reads: threads reading (0: all cores)")->capture_default_str();
    cmd->add_option("--read-mib", read_mib, "With --with-host-reads: buffer each read pass reads, MiB")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    cmd->callback([] {
#ifdef BG_HAVE_CUDA
        const cuda::PcieProbe p = cuda::probe_pcie(bytes, reps);
        nlohmann::json j{{"device", p.device_name}, {"bytes", p.bytes}, {"pinned_gb_s", p.pinned_gb_s},
                         {"pageable_gb_s", p.pageable_gb_s}};
        if (with_reads) {
            std::vector<uint64_t> buf((read_mib << 20) / 8);
            for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;  // every page touched first
            cpu::ThreadPool pool(threads);
            const int64_t n = static_cast<int64_t>(buf.size());
            const double read_alone = cpu::host_read_gb_s(&pool, buf.data(), n, reps);
            // Copies enough for about a second at the pinned rate alone: about a hundred read passes
            // fit, so the last one, which may outlast the copies, is about 1 % of the reads.
            const int copies = std::max(4, static_cast<int>(p.pinned_gb_s * 1e9 / static_cast<double>(bytes)));
            const cuda::PcieBesideReads b = cuda::probe_pcie_beside_reads(
                bytes, copies, [&] { return cpu::host_read_pass(&pool, buf.data(), n); });
            j["threads"] = pool.size();
            j["read_bytes_each_pass"] = buf.size() * 8;
            j["host_read_gb_s"] = read_alone;
            j["together"] = {{"pinned_gb_s", b.pinned_gb_s}, {"host_read_gb_s", b.read_gb_s},
                             {"copied_bytes", b.copied_bytes}, {"read_bytes", b.read_bytes}};
            j["together_sum_gb_s"] = b.pinned_gb_s + b.read_gb_s;
        }
        if (json) {
            std::printf("%s\n", j.dump().c_str());
        } else {
            std::printf("%s: host->device %.2f GB/s pinned, %.2f GB/s pageable (%llu-byte copies)\n", p.device_name.c_str(),
                        p.pinned_gb_s, p.pageable_gb_s, (unsigned long long)p.bytes);
            if (with_reads)
                std::printf("apart: pinned %.2f + host reads %.2f = %.2f GB/s; at once: pinned %.2f + host reads %.2f = "
                            "%.2f GB/s (%d threads reading)\n",
                            p.pinned_gb_s, j["host_read_gb_s"].get<double>(),
                            p.pinned_gb_s + j["host_read_gb_s"].get<double>(), j["together"]["pinned_gb_s"].get<double>(),
                            j["together"]["host_read_gb_s"].get<double>(), j["together_sum_gb_s"].get<double>(),
                            j["threads"].get<int>());
        }
#else
        fail("probe-pcie: this build has no CUDA backend (configure with nvcc present)");
#endif
    });
}

}  // namespace bg::cli
