// One function per subcommand registers its flags and its callback with the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace bg::cli {

void register_info(CLI::App& app);
void register_make_model(CLI::App& app);
void register_run(CLI::App& app);
void register_plan(CLI::App& app);
void register_probe_disk(CLI::App& app);
void register_profile(CLI::App& app);
void register_probe_host(CLI::App& app);
void register_probe_pcie(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_version(CLI::App& app);

}  // namespace bg::cli
