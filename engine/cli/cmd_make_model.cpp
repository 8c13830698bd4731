#include <cstdio>

#include "cli/commands.h"
#include "model/make_model.h"

namespace bg::cli {

void register_make_model(CLI::App& app) {
    auto* cmd = app.add_subcommand("make-model", "Write a deterministic random-weight dsv41 GGUF at a given scale");
    static MakeModelConfig cfg;
    cmd->add_option("--scale", cfg.scale_path, "Scale file (scenarios/models/{ci,device,full}.json)")->required();
    cmd->add_option("--out", cfg.out_path, "Output GGUF path")->required();
    cmd->add_option("--seed", cfg.seed, "Seed: the same seed gives the same bytes")->capture_default_str();
    cmd->add_option("--threads", cfg.threads, "Worker threads (0: all cores)")->capture_default_str();
    cmd->callback([] {
        const ModelScale s = load_scale(cfg.scale_path);
        std::fprintf(stderr, "make-model: scale %s (%s), seed %llu -> %s\n", s.name.c_str(), cfg.scale_path.c_str(),
                     (unsigned long long)cfg.seed, cfg.out_path.c_str());
        const MakeModelResult r = make_model(s, cfg);
        std::fprintf(stderr, "make-model: wrote %.3f GB in %.1f s (%.0f MB/s)\n", r.file_bytes / 1e9, r.seconds,
                     r.file_bytes / 1e6 / std::max(r.seconds, 1e-3));
    });
}

}  // namespace bg::cli
