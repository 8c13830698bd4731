// Routing agreement between two runs of the same prompt (the GPU or its emulation against the
// CPU backend): each (layer, position)'s chosen experts as a set, compared entry by entry.
// Issue 14 asks for >= 99.5 % of decisions alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/dsv41_forward.h"

namespace bgtest {

constexpr double kRoutingAgreement = 0.995;

class RouteRecorder final : public bg::dsv41::RoutingObserver {
public:
    void on_route(int64_t layer, int64_t pos, const int32_t* ids, const float*, int k) override {
        std::vector<int32_t> v(ids, ids + k);
        std::sort(v.begin(), v.end());
        seen.push_back({layer, pos, v});
    }
    struct Entry {
        int64_t layer, pos;
        std::vector<int32_t> ids;
        bool operator==(const Entry& o) const { return layer == o.layer && pos == o.pos && ids == o.ids; }
    };
    std::vector<Entry> seen;
};

// Entries alike at the same index (callers check the sizes match first).
inline size_t same_routes(const RouteRecorder& a, const RouteRecorder& b) {
    size_t same = 0;
    for (size_t i = 0; i < std::min(a.seen.size(), b.seen.size()); ++i) same += a.seen[i] == b.seen[i];
    return same;
}

}  // namespace bgtest
