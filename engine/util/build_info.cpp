#include "util/build_info.h"

#include <nlohmann/json.hpp>

namespace bg {

nlohmann::json BuildInfo::to_json() const {
    nlohmann::json j = {{"commit", known() ? nlohmann::json(commit) : nlohmann::json(nullptr)},
                        {"dirty", dirty ? nlohmann::json(*dirty) : nlohmann::json(nullptr)},
                        {"describe", describe},
                        {"subject", subject},
                        {"source", "embedded in the binaries at build time"}};
    if (!known()) j["note"] = note;
    return j;
}

std::string BuildInfo::line() const {
    std::string s = known() ? describe : std::string("unknown");
    s.append(" (").append(known() ? "commit " + commit : note);
    if (dirty.value_or(false)) s.append(", with uncommitted changes");
    return s.append(")");
}

}  // namespace bg
