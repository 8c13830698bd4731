// The tiered expert store's memory: one device pool and one host pool, allocated once at
// construction after the budgets are checked, and the addresses of their slots. The device pool
// holds each layer's hot slots, then the transient slots every layer shares; the host pool each
// layer's host slots, then the staging slots and the LRU slots (sizes: runtime/expert_slots.h,
// which `betelgeuse plan` counts from too). Transient and staging slots are handed out from
// bounded free lists. Buffers and copies only: it knows nothing of experts or kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "runtime/expert_homes.h"
#include "runtime/expert_slots.h"
#include "runtime/slot_free_list.h"

namespace bg {

struct SlotPoolConfig {
    int64_t n_layer = 0, slots = 0, hot = 0;  // S and H per layer
    int64_t transient_slots = 1;              // T device transient slots (and as many staging slots)
    int64_t lru_slots = 0;
    uint64_t vram_budget_bytes = 0, host_budget_bytes = 0;
    uint64_t device_fixed_bytes = 0;  // other device memory charged to the budget
    uint64_t host_fixed_bytes = 0;    // other host memory charged to the budget
};

class ExpertSlotPool {
public:
    // Throws bg::Error, naming what would fit, when the budgets cannot hold the pools.
    ExpertSlotPool(Backend& backend, const ExpertSlots& slots, const SlotPoolConfig& cfg);
    ~ExpertSlotPool();
    ExpertSlotPool(const ExpertSlotPool&) = delete;
    ExpertSlotPool& operator=(const ExpertSlotPool&) = delete;

    // The slot of an expert's home (or LRU slot) in layer `layer`.
    uint8_t* slot_of(int64_t layer, const Home& h) const;
    uint8_t* transient(int32_t t) const { return device_ + transient_base_ + static_cast<uint64_t>(t) * sizes_.largest; }
    uint8_t* staging(int32_t s) const { return host_ + staging_base_ + static_cast<uint64_t>(s) * sizes_.largest; }

    // Free transient and staging slots (runtime/slot_free_list.h, T of each): take returns -1
    // when none is free.
    int32_t take_transient() { return free_transient_.take(); }
    void give_transient(int32_t t) { free_transient_.give(t); }
    int32_t take_staging() { return free_staging_.take(); }
    void give_staging(int32_t s) { free_staging_.give(s); }
    int64_t free_transient() const { return free_transient_.free_count(); }
    int64_t free_staging() const { return free_staging_.free_count(); }
    // The free slots, in the order take would not hand them out first (for the start-up probe).
    const std::vector<int32_t>& free_staging_list() const { return free_staging_.free_slots(); }
    const std::vector<int32_t>& free_transient_list() const { return free_transient_.free_slots(); }

    const ExpertSlots& sizes() const { return sizes_; }
    uint64_t device_bytes() const { return device_bytes_; }
    uint64_t host_bytes() const { return host_bytes_; }
    int64_t transient_slots() const { return T_; }

private:
    Backend& backend_;
    ExpertSlots sizes_;
    int64_t T_ = 0;
    uint64_t device_bytes_ = 0, host_bytes_ = 0;
    uint8_t* device_ = nullptr;  // [L][H] hot slots (each layer's size), then [T] transient slots (largest)
    uint8_t* host_ = nullptr;    // [L][S-H] host slots (each layer's size), then [T] staging, then [lru] slots
    std::vector<uint64_t> hot_base_, host_base_;  // [L] where each layer's slots start in its pool
    uint64_t transient_base_ = 0, staging_base_ = 0, lru_base_ = 0;
    SlotFreeList free_staging_{0}, free_transient_{0};  // T slots each, once the budgets are checked
};

}  // namespace bg
