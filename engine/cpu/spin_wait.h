// What the CPU's waiting threads share (ThreadPool, JobThread): the pause between two looks at a
// word, the steady clock in nanoseconds, a deadline that only moves later, and a wait that spins
// a while before it sleeps on its word.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BG_CPU_RELAX() _mm_pause()  // frees the core's resources for its sibling
#else
#include <thread>
#define BG_CPU_RELAX() std::this_thread::yield()
#endif

namespace bg::cpu {

inline int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// deadline = max(deadline, until), however many threads raise it at once.
inline void raise_deadline(std::atomic<int64_t>& deadline, int64_t until) {
    int64_t old = deadline.load(std::memory_order_relaxed);
    while (old < until && !deadline.compare_exchange_weak(old, until)) {
    }
}

// Spins while `word` holds `old`, until the steady clock passes until_ns; returns whether it
// changed.
template <class T>
bool spin_while_equal(const std::atomic<T>& word, T old, int64_t until_ns) {
    for (int i = 1; word.load(std::memory_order_acquire) == old; ++i) {
        BG_CPU_RELAX();
        if (i % 256 == 0 && now_ns() > until_ns) return false;
    }
    return true;
}

// Returns once `word` no longer holds `old`: spins `spin_us`, then sleeps on it (its writer calls
// notify_all or notify_one after the store).
template <class T>
void spin_then_wait(const std::atomic<T>& word, T old, int64_t spin_us) {
    if (spin_while_equal(word, old, now_ns() + spin_us * 1000)) return;
    while (word.load(std::memory_order_acquire) == old) word.wait(old, std::memory_order_acquire);
}

}  // namespace bg::cpu
