// Routing agreement between two runs of the same prompt (the GPU or its emulation against the
// CPU backend): each (layer, position)'s chosen experts as a set, compared entry by entry.
// Issue 14 asks for >= 99.5 % of decisions alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/dsv41_forward.h"
#include "runtime/session.h"

namespace bgtest {

constexpr double kRoutingAgreement = 0.995;

class RouteRecorder final : public bg::RoutingObserver {
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

struct RoutingAgreement {
    size_t same = 0, total = 0;
    double fraction() const { return total ? static_cast<double>(same) / static_cast<double>(total) : 0.0; }
};

// Runs a, then b, each recording its routing; the sessions keep no observer afterwards.
// b_metrics receives b's run metrics where given; by_layer, the agreement of each layer.
inline RoutingAgreement run_both_recording_routes(bg::Session& a, bg::Session& b, nlohmann::json* b_metrics = nullptr,
                                                  std::vector<RoutingAgreement>* by_layer = nullptr) {
    RouteRecorder ra, rb;
    a.forward().set_observer(&ra);
    a.run(false);
    b.forward().set_observer(&rb);
    const nlohmann::json m = b.run(false);
    a.forward().set_observer(nullptr);
    b.forward().set_observer(nullptr);
    if (b_metrics) *b_metrics = m;
    if (ra.seen.size() != rb.seen.size()) return {0, std::max(ra.seen.size(), rb.seen.size())};
    if (by_layer) {
        by_layer->clear();
        for (size_t i = 0; i < ra.seen.size(); ++i) {
            const size_t l = static_cast<size_t>(ra.seen[i].layer);
            if (by_layer->size() <= l) by_layer->resize(l + 1);
            (*by_layer)[l].total += 1;
            (*by_layer)[l].same += ra.seen[i] == rb.seen[i];
        }
    }
    return {same_routes(ra, rb), ra.seen.size()};
}

// The device scale's file (BG_DEVICE_MODEL) over a short prompt, exact routing, budgets that
// hold it all: the agreement tests' configuration there.
inline bg::RunConfig device_scale_config(const char* path) {
    bg::RunConfig c;
    c.model_path = path;
    c.prompt_tokens = 32;
    c.prompt_seed = 5;
    c.gen = 4;
    c.routing = bg::RoutingPolicy::kExact;
    c.vram_budget_mib = 16384;
    c.host_budget_mib = 65536;
    return c;
}

}  // namespace bgtest
