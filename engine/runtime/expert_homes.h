// Where each routed expert lives, as bookkeeping only (no memory, no threads): the residency
// policy of the tiered expert store (runtime/expert_store.h). Per layer, each of the plan's S
// resident experts owns a home slot, H of them in the device ("hot") pool and the others in the
// host pool; non-resident experts may borrow a host LRU slot. The store asks it where an expert's
// bytes are, which LRU slot a non-resident expert takes, and which experts promotion swaps; it
// moves the bytes itself (runtime/expert_slot_pool.h holds the memory).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/residency.h"

namespace bg {

enum class Tier : uint8_t {
    kNone,  // not resident and in no LRU slot: read from disk when used
    kHost,  // resident, its home a host slot
    kHot,   // resident, its home a device ("hot") slot
    kLru,   // not resident, kept in a host LRU slot
};

struct Home {
    Tier tier = Tier::kNone;
    bool loaded = false;  // its bytes are in its slot
    int32_t slot = -1;    // index among its layer's slots of that tier (the LRU's slots are shared)
    bool resident() const { return tier == Tier::kHost || tier == Tier::kHot; }
    // Its slot (loaded or not) is host memory.
    bool host_slot() const { return tier == Tier::kHost || tier == Tier::kLru; }
};

class ExpertHomes {
public:
    ExpertHomes(const ResidencyPlan& plan, int64_t n_expert, int64_t lru_slots);

    Home& at(int64_t layer, int32_t expert) { return homes_[layer][expert]; }
    const Home& at(int64_t layer, int32_t expert) const { return homes_[layer][expert]; }
    int64_t n_layer() const { return static_cast<int64_t>(homes_.size()); }
    int64_t n_expert() const { return homes_.empty() ? 0 : static_cast<int64_t>(homes_[0].size()); }
    // The expert in each host slot of a layer (-1: none).
    const std::vector<int32_t>& host_owners(int64_t layer) const { return host_owner_[layer]; }
    // Which experts of a layer sit in hot slots now (ascending ids).
    std::vector<int32_t> hot_experts(int64_t layer) const;
    // Every slot empty (a cold pass): homes stay, their bytes are gone.
    void evict_all();

    // Per pass: tokens routed to each resident expert (promotion's input) and disk reads of
    // each expert, both cleared by begin_pass.
    void begin_pass();
    void add_usage(int64_t layer, int32_t expert, int64_t tokens);
    // Counts one disk read of the expert this pass; returns the pass's count so far (at most 65535).
    uint16_t count_read(int64_t layer, int32_t expert);

    // LRU slots for non-resident experts. begin_lru_layer marks the LRU slots the layer's
    // experts hold (they are not victims while it runs) and returns the layer's stamp;
    // take_lru gives a non-resident expert without a slot the least recently used slot that
    // the layer does not hold, evicting its owner (that expert's home becomes kNone). Returns
    // whether it took one (none when there are no LRU slots or all are this layer's).
    uint64_t begin_lru_layer(int64_t layer, const int32_t* experts, int64_t n);
    bool take_lru(int64_t layer, int32_t expert, uint64_t stamp);

    // Promotion: the swaps that put the H most-used resident experts of the pass (ties by id)
    // into the layer's hot slots, the others to host slots: each swap exchanges the homes of one
    // hot expert leaving and one host expert entering. A pure function of the usage and the
    // resident list.
    struct Swap {
        int32_t leaving = -1;   // hot -> host
        int32_t entering = -1;  // host -> hot
    };
    std::vector<Swap> promotion(int64_t layer, const std::vector<int32_t>& resident) const;
    // Exchanges the two homes (tier and slot) and their owners; `loaded` stays with each expert
    // (the caller moved its bytes with it).
    void apply(int64_t layer, const Swap& s);

private:
    std::vector<std::vector<Home>> homes_;          // [layer][expert]
    std::vector<std::vector<int32_t>> hot_owner_;   // [layer][H] expert in each hot slot (-1 none)
    std::vector<std::vector<int32_t>> host_owner_;  // [layer][S-H]
    std::vector<std::vector<uint64_t>> usage_;      // [layer][expert] tokens routed this pass
    std::vector<std::vector<uint16_t>> reads_pass_; // [layer][expert] disk reads this pass
    std::vector<std::pair<int32_t, int32_t>> lru_owner_;  // [lru] (layer, expert) or (-1, -1)
    std::vector<uint64_t> lru_stamp_;                     // [lru] the last layer stamp that used it
    uint64_t lru_clock_ = 0;
};

}  // namespace bg
