#include "runtime/expert_homes.h"

#include <algorithm>

#include "util/check.h"

namespace bg {

ExpertHomes::ExpertHomes(const ResidencyPlan& plan, int64_t n_expert, int64_t lru_slots) {
    const int64_t L = plan.n_layer(), S = plan.slots, H = plan.hot;
    BG_CHECK(n_expert > 0 && lru_slots >= 0 && H >= 0 && H <= S);
    homes_.assign(L, std::vector<Home>(n_expert));
    hot_owner_.assign(L, std::vector<int32_t>(H, -1));
    host_owner_.assign(L, std::vector<int32_t>(S - H, -1));
    usage_.assign(L, std::vector<uint64_t>(n_expert, 0));
    reads_pass_.assign(L, std::vector<uint16_t>(n_expert, 0));
    for (int64_t l = 0; l < L; ++l) {
        int32_t hs = 0, ss = 0;
        for (int32_t e : plan.hot_ids[l]) {
            homes_[l][e] = {Tier::kHot, false, hs};
            hot_owner_[l][hs++] = e;
        }
        for (int32_t e : plan.resident[l]) {
            if (homes_[l][e].tier != Tier::kNone) continue;
            homes_[l][e] = {Tier::kHost, false, ss};
            host_owner_[l][ss++] = e;
        }
    }
    lru_owner_.assign(static_cast<size_t>(lru_slots), {-1, -1});
    lru_stamp_.assign(static_cast<size_t>(lru_slots), 0);
}

std::vector<int32_t> ExpertHomes::hot_experts(int64_t layer) const {
    std::vector<int32_t> v = hot_owner_[layer];
    std::sort(v.begin(), v.end());
    return v;
}

void ExpertHomes::evict_all() {
    for (auto& layer : homes_)
        for (Home& h : layer) h.loaded = false;
}

void ExpertHomes::begin_pass() {
    for (auto& u : usage_) std::fill(u.begin(), u.end(), 0);
    for (auto& r : reads_pass_) std::fill(r.begin(), r.end(), 0);
}

void ExpertHomes::add_usage(int64_t layer, int32_t expert, int64_t tokens) {
    if (homes_[layer][expert].resident()) usage_[layer][expert] += static_cast<uint64_t>(tokens);
}

uint16_t ExpertHomes::count_read(int64_t layer, int32_t expert) {
    uint16_t& r = reads_pass_[layer][expert];
    r = static_cast<uint16_t>(std::min<int>(r + 1, 65535));
    return r;
}

uint64_t ExpertHomes::begin_lru_layer(int64_t layer, const int32_t* experts, int64_t n) {
    const uint64_t stamp = ++lru_clock_;
    for (int64_t i = 0; i < n; ++i) {
        const Home& h = homes_[layer][experts[i]];
        if (h.tier == Tier::kLru) lru_stamp_[h.slot] = stamp;  // in use by this layer: not a victim
    }
    return stamp;
}

bool ExpertHomes::take_lru(int64_t layer, int32_t expert, uint64_t stamp) {
    Home& h = homes_[layer][expert];
    BG_CHECK(h.tier == Tier::kNone);
    int64_t victim = -1;
    for (size_t j = 0; j < lru_stamp_.size(); ++j)
        if (lru_stamp_[j] != stamp && (victim < 0 || lru_stamp_[j] < lru_stamp_[victim])) victim = static_cast<int64_t>(j);
    if (victim < 0) return false;
    const auto [ol, oe] = lru_owner_[victim];
    if (ol >= 0) homes_[ol][oe] = Home{};
    h = Home{Tier::kLru, false, static_cast<int32_t>(victim)};
    lru_owner_[victim] = {static_cast<int32_t>(layer), expert};
    lru_stamp_[victim] = stamp;
    return true;
}

std::vector<ExpertHomes::Swap> ExpertHomes::promotion(int64_t layer, const std::vector<int32_t>& resident) const {
    const int64_t H = static_cast<int64_t>(hot_owner_[layer].size());
    std::vector<int32_t> res = resident;
    std::stable_sort(res.begin(), res.end(), [&](int32_t a, int32_t b) {
        if (usage_[layer][a] != usage_[layer][b]) return usage_[layer][a] > usage_[layer][b];
        return a < b;
    });
    std::vector<uint8_t> want_hot(homes_[layer].size(), 0);
    for (int64_t j = 0; j < H; ++j) want_hot[res[j]] = 1;
    std::vector<int32_t> leaving, entering;
    for (int32_t e : hot_owner_[layer])
        if (!want_hot[e]) leaving.push_back(e);
    for (int64_t j = 0; j < H; ++j)
        if (homes_[layer][res[j]].tier != Tier::kHot) entering.push_back(res[j]);
    BG_CHECK(leaving.size() == entering.size());
    std::vector<Swap> swaps(leaving.size());
    for (size_t j = 0; j < leaving.size(); ++j) swaps[j] = {leaving[j], entering[j]};
    return swaps;
}

void ExpertHomes::apply(int64_t layer, const Swap& s) {
    Home& out = homes_[layer][s.leaving];
    Home& in = homes_[layer][s.entering];
    BG_CHECK(out.tier == Tier::kHot && in.tier == Tier::kHost);
    std::swap(out.slot, in.slot);
    std::swap(out.tier, in.tier);
    hot_owner_[layer][in.slot] = s.entering;
    host_owner_[layer][out.slot] = s.leaving;
}

}  // namespace bg
