// betelgeuse: the engine's command line (info, make-model, run, plan, tokenize, profile, probes,
// version).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "util/check.h"

int main(int argc, char** argv) {
    CLI::App app{"betelgeuse: an inference engine and benchmark for SSD-resident Mixture-of-Experts models "
                 "(DeepSeek-V4.1-Flash, GGUF)"};
    app.require_subcommand(1);
    bg::cli::register_info(app);
    bg::cli::register_make_model(app);
    bg::cli::register_run(app);
    bg::cli::register_plan(app);
    bg::cli::register_probe_disk(app);
    bg::cli::register_profile(app);
    bg::cli::register_probe_host(app);
    bg::cli::register_probe_pcie(app);
    bg::cli::register_tokenize(app);
    bg::cli::register_version(app);
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
