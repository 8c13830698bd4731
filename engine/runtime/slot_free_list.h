// A bounded free list of slot indices 0..capacity-1, all free at start: take() hands out the most
// recently given one (-1 when none is free), give() returns one. Giving a slot that is already
// free, or one out of range, is a bug and aborts with file and line. Its memory is sized once,
// at construction: nothing allocates on the token path.
#pragma once

#include <cstdint>
#include <vector>

#include "util/check.h"

namespace bg {

class SlotFreeList {
public:
    explicit SlotFreeList(int64_t capacity)
        : free_(static_cast<size_t>(capacity)), is_free_(static_cast<size_t>(capacity), 1) {
        BG_CHECK(capacity >= 0 && capacity <= INT32_MAX);
        // Slot 0 on top, so the first take hands out slot 0.
        for (int64_t i = 0; i < capacity; ++i) free_[static_cast<size_t>(i)] = static_cast<int32_t>(capacity - 1 - i);
    }

    int32_t take() {
        if (free_.empty()) return -1;
        const int32_t s = free_.back();
        free_.pop_back();
        is_free_[static_cast<size_t>(s)] = 0;
        return s;
    }
    void give(int32_t s) {
        BG_CHECK_MSG(s >= 0 && s < capacity() && !is_free_[static_cast<size_t>(s)], "a slot given back twice, or not ours");
        is_free_[static_cast<size_t>(s)] = 1;
        free_.push_back(s);  // within the capacity reserved at construction: one entry per slot
    }
    int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
    int64_t capacity() const { return static_cast<int64_t>(is_free_.size()); }
    // The free slots, the next one take() hands out last.
    const std::vector<int32_t>& free_slots() const { return free_; }

private:
    std::vector<int32_t> free_;     // stack; its capacity is the slot count from construction on
    std::vector<uint8_t> is_free_;  // [capacity]
};

}  // namespace bg
