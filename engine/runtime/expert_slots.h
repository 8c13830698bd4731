// The sizes of the expert store's slots, from each layer's expert bytes: what the store
// allocates and what `betelgeuse plan` counts, from one place.
//
// Layers' experts may differ in size: llama-quantize gives ffn_down more bits on some layers
// (Q4_K_M's use_more_bits layers, IQ2_XXS's first eighth), and any file may mix types by layer.
// A resident slot belongs to one layer and holds that layer's expert, so it is sized per layer;
// the slots every layer shares (device transient slots, host staging and LRU slots) hold any
// layer's expert, so they are sized for the largest. Every slot is rounded up to 4 KiB (O_DIRECT
// reads land in it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace bg {

struct ExpertSlots {
    std::vector<uint64_t> layer;  // [n_layer] bytes of one resident slot of the layer
    uint64_t largest = 0;         // bytes of one shared slot
    uint64_t layer_sum = 0;       // one resident slot of every layer

    static uint64_t round_up(uint64_t expert_bytes) { return (expert_bytes + 4095) / 4096 * 4096; }
    // From the bytes of one expert (gate, up and down) of each layer.
    static ExpertSlots of(const std::vector<uint64_t>& expert_bytes_by_layer) {
        ExpertSlots s;
        for (uint64_t b : expert_bytes_by_layer) {
            s.layer.push_back(round_up(b));
            s.largest = std::max(s.largest, s.layer.back());
            s.layer_sum += s.layer.back();
        }
        return s;
    }
    int64_t n_layer() const { return static_cast<int64_t>(layer.size()); }
    bool uniform() const {
        return std::all_of(layer.begin(), layer.end(), [&](uint64_t b) { return b == largest; });
    }

    // The device pool: `hot` slots in every layer, then the transient area.
    uint64_t device_pool_bytes(int64_t hot, int64_t transient) const {
        return static_cast<uint64_t>(hot) * layer_sum + static_cast<uint64_t>(transient) * largest;
    }
    // The host pool: `slots - hot` slots in every layer, then the staging and LRU slots.
    uint64_t host_pool_bytes(int64_t slots, int64_t hot, int64_t transient, int64_t lru) const {
        return static_cast<uint64_t>(slots - hot) * layer_sum + static_cast<uint64_t>(transient + lru) * largest;
    }
    // Where layer l's resident slots start in a pool holding `per_layer` of them per layer.
    uint64_t layer_base(int64_t l, int64_t per_layer) const {
        uint64_t before = 0;
        for (int64_t j = 0; j < l; ++j) before += layer[static_cast<size_t>(j)];
        return static_cast<uint64_t>(per_layer) * before;
    }
};

}  // namespace bg
