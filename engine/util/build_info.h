// The commit the binaries were built from, embedded at build time: CMake runs git on the source
// tree at every build (cmake/build_info.cmake) and compiles the answer in, so a result names the
// code that produced it wherever the binary runs (a build copied to another machine has no
// checkout there, or another one).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace bg {

struct BuildInfo {
    std::string commit;         // full hash of HEAD; "unknown" when built outside a git checkout
    std::string describe;       // `git describe --always --dirty --abbrev=12`; "unknown" likewise
    std::optional<bool> dirty;  // tracked files differed from HEAD at build time; none when unknown
    std::string subject;        // HEAD's subject line ("" when unknown)
    std::string note;           // why the commit is unknown ("" when it is known)

    bool known() const { return commit != "unknown"; }
    // {"commit", "dirty", "describe", "subject", "source"} and, when unknown, "note"; commit and
    // dirty are null when unknown (the form results had before the commit was embedded).
    nlohmann::json to_json() const;
    // One line for start-up prints: "<describe> (commit <hash>)", or "unknown (<note>)".
    std::string line() const;
};

// Defined in the file cmake/build_info.cmake generates in the build tree.
const BuildInfo& build_info();

}  // namespace bg
