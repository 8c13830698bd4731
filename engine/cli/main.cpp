// betelgeuse: the engine's command line (info, make-model, run, plan, tokenize, profile, probes).
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "util/check.h"

int main(int argc, char** argv) {
    // Load every CUDA kernel when the context is made rather than at its first launch, so the
    // device memory the runtime takes is all there at start-up, where the VRAM budget's reserve
    // for it is measured (a user's own setting wins).
    ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    CLI::App app{"betelgeuse: an inference engine and benchmark for SSD-resident Mixture-of-Experts models "
                 "(DeepSeek-V4.1-Flash, GGUF)"};
    app.require_subcommand(1);
    bg::cli::register_info(app);
    bg::cli::register_make_model(app);
    bg::cli::register_run(app);
    bg::cli::register_plan(app);
    bg::cli::register_probe_disk(app);
    bg::cli::register_profile(app);
    bg::cli::register_probe_pcie(app);
    bg::cli::register_tokenize(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const bg::Error& e) {
        std::fprintf(stderr, "betelgeuse: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
