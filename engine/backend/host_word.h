// A 32-bit word in host memory that one host thread advances and a queue of ops waits for
// (Ops::wait_host_word): a sequence number, so one word serves every wait of a run. The values
// wrap; a wait for v is over once the word is at v or past it (by less than 2^31).
#pragma once

#include <atomic>
#include <cstdint>

namespace bg {

inline bool host_word_reached(uint32_t word, uint32_t value) { return static_cast<int32_t>(word - value) >= 0; }

// The writer's store: what it wrote before is visible to whoever sees the new value.
inline void publish_host_word(uint32_t* word_host, uint32_t value) {
    std::atomic_ref<uint32_t>(*word_host).store(value, std::memory_order_release);
}

inline uint32_t load_host_word(const uint32_t* word_host) {
    return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(word_host)).load(std::memory_order_acquire);
}

}  // namespace bg
