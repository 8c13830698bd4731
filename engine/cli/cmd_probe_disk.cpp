#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/enum_option.h"
#include "io/reader.h"
#include "util/check.h"

namespace bg::cli {

namespace {

void probe(const std::string& path, const io::ProbeConfig& cfg, bool json) {
    const io::ProbeResult r = io::probe_disk(path, cfg);
    if (json) {
        nlohmann::json j = {{"file", path},
                            {"engine", r.engine},
                            {"io", enum_name(cfg.io.engine)},
                            {"queue_depth", cfg.io.queue_depth},
                            {"read_bytes", cfg.io.read_bytes},
                            {"seq_bytes", r.seq_bytes},
                            {"seq_seconds", r.seq_seconds},
                            {"seq_gb_s", r.seq_gb_s},
                            {"rand_reads", cfg.rand_reads},
                            {"rand_iops", r.rand_iops},
                            {"rand_gb_s", r.rand_gb_s},
                            {"batch_reads", r.batch_reads},
                            {"batches", cfg.batches},
                            {"batch_ms_median", r.batch_ms_median},
                            {"batch_ms_p90", r.batch_ms_p90}};
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf(
        "%s: sequential %.2f GB/s (%.3f GB in %.3f s), random 4 KiB %.0f IOPS (%.3f GB/s), %llu random "
        "4 KiB reads at once %.3f ms (median; p90 %.3f); %s, queue depth %u, read size %u\n",
        path.c_str(), r.seq_gb_s, r.seq_bytes / 1e9, r.seq_seconds, r.rand_iops, r.rand_gb_s,
        (unsigned long long)r.batch_reads, r.batch_ms_median, r.batch_ms_p90, r.engine.c_str(), cfg.io.queue_depth,
        cfg.io.read_bytes);
}

}  // namespace

void register_probe_disk(CLI::App& app) {
    auto* cmd = app.add_subcommand("probe-disk", "Measure raw sequential and random read speed of a file's disk");
    static std::string path;
    static io::ProbeConfig cfg;
    static bool json = false;
    cmd->add_option("file", path, "File to read (a model file, or any large file on the same disk)")->required();
    cmd->add_option("--queue-depth", cfg.io.queue_depth, "Reads in flight at most")->capture_default_str();
    cmd->add_option("--read-size", cfg.io.read_bytes, "Largest read in bytes, a multiple of 4096 (suffixes: K, M)")
        ->transform(CLI::AsSizeValue(false))
        ->capture_default_str();
    cmd->add_option("--seq-bytes", cfg.seq_bytes, "Bytes to read sequentially from offset 0 (capped at file size)")
        ->transform(CLI::AsSizeValue(false))
        ->capture_default_str();
    cmd->add_option("--rand-reads", cfg.rand_reads, "Random 4 KiB reads")->capture_default_str();
    cmd->add_option("--batch-reads", cfg.batch_reads,
                    "Random 4 KiB reads handed over at once in each timed batch (a decode layer's Engram rows)")
        ->capture_default_str();
    cmd->add_option("--batches", cfg.batches, "Timed batches (0: none)")->capture_default_str();
    add_enum_option(cmd, cfg.io.engine, "Read engine: uring (O_DIRECT) | pread");
    cmd->add_flag("--json", json, "Print the result as JSON");
    cmd->callback([] { probe(path, cfg, json); });
}

}  // namespace bg::cli
