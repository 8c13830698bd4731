#include "runtime/residency.h"

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "util/file_io.h"

namespace bg {

namespace {

void check_sizes(const MoeModel& m, int64_t slots, int64_t hot) {
    const MoeShape& shape = m.moe_shape();
    if (slots < shape.n_expert_used || slots > shape.n_expert)
        fail("residency: --slots %lld must be in [%lld (experts per token), %lld (experts per layer)]",
             (long long)slots, (long long)shape.n_expert_used, (long long)shape.n_expert);
    if (hot < 0 || hot > slots) fail("residency: --hot %lld must be in [0, --slots %lld]", (long long)hot, (long long)slots);
}

void finish(ResidencyPlan& p, const MoeModel& m) {
    p.mask.assign(p.resident.size(), std::vector<uint8_t>(static_cast<size_t>(m.moe_shape().n_expert), 0));
    for (size_t l = 0; l < p.resident.size(); ++l)
        for (int32_t e : p.resident[l]) p.mask[l][e] = 1;
}

ResidencyPlan plan_by_key(const MoeModel& m, int64_t slots, int64_t hot,
                          const std::vector<std::vector<uint64_t>>* counts) {
    check_sizes(m, slots, hot);
    const MoeShape& shape = m.moe_shape();
    ResidencyPlan p;
    p.slots = slots;
    p.hot = hot;
    for (int64_t l = 0; l < shape.n_layer; ++l) {
        const float* bias = m.router_bias(l);
        std::vector<int32_t> order(static_cast<size_t>(shape.n_expert));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            if (counts && (*counts)[l][a] != (*counts)[l][b]) return (*counts)[l][a] > (*counts)[l][b];
            if (bias[a] != bias[b]) return bias[a] > bias[b];
            return a < b;
        });
        p.resident.emplace_back(order.begin(), order.begin() + slots);
        p.hot_ids.emplace_back(order.begin(), order.begin() + hot);
    }
    finish(p, m);
    return p;
}

}  // namespace

nlohmann::json ResidencyPlan::to_json() const {
    nlohmann::json layers = nlohmann::json::array();
    for (size_t l = 0; l < resident.size(); ++l)
        layers.push_back({{"layer", l}, {"resident", resident[l]}, {"hot", hot_ids[l]}});
    return {{"slots", slots}, {"hot", hot}, {"source", source}, {"layers", layers}};
}

std::vector<std::vector<uint8_t>> ResidencyPlan::hot_masks(int64_t n_expert) const {
    std::vector<std::vector<uint8_t>> m(hot_ids.size(), std::vector<uint8_t>(static_cast<size_t>(n_expert), 0));
    for (size_t l = 0; l < hot_ids.size(); ++l)
        for (int32_t e : hot_ids[l]) m[l][e] = 1;
    return m;
}

ResidencyPlan plan_from_bias(const MoeModel& m, int64_t slots, int64_t hot) {
    ResidencyPlan p = plan_by_key(m, slots, hot, nullptr);
    p.source = "bias";
    return p;
}

ResidencyPlan plan_from_counts(const MoeModel& m, const std::vector<std::vector<uint64_t>>& counts,
                               int64_t slots, int64_t hot) {
    BG_CHECK(static_cast<int64_t>(counts.size()) == m.moe_shape().n_layer);
    ResidencyPlan p = plan_by_key(m, slots, hot, &counts);
    p.source = "profile";
    return p;
}

ResidencyPlan load_plan(const std::string& path, const MoeModel& m) {
    const std::string text = read_file(path, "residency");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail("residency: '%s' is not valid JSON: %s", path.c_str(), e.what());
    }
    auto need = [&](const nlohmann::json& o, const char* k) -> const nlohmann::json& {
        if (!o.is_object() || !o.contains(k)) fail("residency: '%s': missing key '%s'", path.c_str(), k);
        return o.at(k);
    };
    const MoeShape& shape = m.moe_shape();
    ResidencyPlan p;
    try {
        p.slots = need(j, "slots").get<int64_t>();
        p.hot = need(j, "hot").get<int64_t>();
        check_sizes(m, p.slots, p.hot);
        const auto& layers = need(j, "layers");
        if (!layers.is_array() || static_cast<int64_t>(layers.size()) != shape.n_layer)
            fail("residency: '%s': 'layers' must hold %lld entries", path.c_str(), (long long)shape.n_layer);
        for (int64_t l = 0; l < shape.n_layer; ++l) {
            const auto& e = layers[l];
            if (need(e, "layer").get<int64_t>() != l) fail("residency: '%s': layers[%lld] is not layer %lld", path.c_str(), (long long)l, (long long)l);
            std::vector<int32_t> res = need(e, "resident").get<std::vector<int32_t>>();
            std::vector<int32_t> hot = need(e, "hot").get<std::vector<int32_t>>();
            if (static_cast<int64_t>(res.size()) != p.slots || static_cast<int64_t>(hot.size()) != p.hot)
                fail("residency: '%s': layer %lld must list %lld resident and %lld hot experts", path.c_str(),
                     (long long)l, (long long)p.slots, (long long)p.hot);
            std::vector<uint8_t> seen(static_cast<size_t>(shape.n_expert), 0);
            for (int32_t x : res) {
                if (x < 0 || x >= shape.n_expert || seen[x])
                    fail("residency: '%s': layer %lld lists expert %d twice or out of range", path.c_str(), (long long)l, x);
                seen[x] = 1;
            }
            for (int32_t x : hot)
                if (x < 0 || x >= shape.n_expert || !seen[x])
                    fail("residency: '%s': layer %lld hot expert %d is not resident", path.c_str(), (long long)l, x);
            p.resident.push_back(res);
            p.hot_ids.push_back(hot);
        }
    } catch (const nlohmann::json::exception& e) {
        fail("residency: '%s': %s", path.c_str(), e.what());
    }
    p.source = path;
    finish(p, m);
    return p;
}

void save_plan(const ResidencyPlan& p, const std::string& path) { write_file_atomic(path, p.to_json().dump(1) + "\n"); }

}  // namespace bg
