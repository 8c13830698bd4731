#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "util/build_info.h"

namespace bg::cli {

void register_version(CLI::App& app) {
    auto* cmd = app.add_subcommand("version", "Print the commit this binary was built from (embedded at build time)");
    static bool json = false;
    cmd->add_flag("--json", json, "Print JSON (what run's metrics and the harness's results record)");
    cmd->callback([] {
        if (json) std::printf("%s\n", build_info().to_json().dump().c_str());
        else std::printf("betelgeuse %s\n", build_info().line().c_str());
    });
}

}  // namespace bg::cli
