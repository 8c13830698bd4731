// The heap allocations of each decode step of a session: the count of operator new calls
// between consecutive generated tokens. Through counting_new.h it replaces the program's global
// operator new: include it in one translation unit of a test executable only.
#pragma once

#include <cstdint>
#include <vector>

#include "counting_new.h"
#include "runtime/session.h"

namespace bgtest {

inline std::vector<uint64_t> allocations_per_step(bg::Session& s, int64_t gen) {
    std::vector<uint64_t> at;
    at.reserve(static_cast<size_t>(gen));  // the record itself allocates nothing while it runs
    s.run(false, [&](int32_t) { at.push_back(allocations()); });
    std::vector<uint64_t> per_step;
    for (size_t i = 1; i < at.size(); ++i) per_step.push_back(at[i] - at[i - 1]);
    return per_step;
}

inline std::vector<uint64_t> allocations_per_step(const bg::RunConfig& c) {
    bg::Session s(c);
    return allocations_per_step(s, c.gen);
}

}  // namespace bgtest
