#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "util/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BG_CPU_RELAX() _mm_pause()
#else
#define BG_CPU_RELAX() std::this_thread::yield()
#endif

namespace bg::cpu {

namespace {

// Chunk i of `parts` balanced chunks over [0, n): sizes differ by at most one, so every chunk
// is at least floor(n / parts) long.
inline void chunk_bounds(int64_t n, int parts, int i, int64_t* b, int64_t* e) {
    *b = n * i / parts;
    *e = n * (i + 1) / parts;
}

constexpr uint64_t kPartsBits = 16;
constexpr uint64_t kPartsMask = (uint64_t(1) << kPartsBits) - 1;

using Clock = std::chrono::steady_clock;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
    n_threads_ = std::clamp(n_threads, 1, static_cast<int>(kPartsMask));
    threads_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_chunk) {
    if (n <= 0) return;
    if (min_chunk < 1) min_chunk = 1;
    // As many chunks as threads, but never so many that one falls below min_chunk.
    const int64_t max_parts = std::max<int64_t>(1, n / min_chunk);
    const int parts = static_cast<int>(std::min<int64_t>(n_threads_, max_parts));
    if (parts == 1) {
        fn(0, n);  // not worth a wake-up
        return;
    }
    BG_CHECK_MSG(!busy_.exchange(true), "ThreadPool::parallel_for is not re-entrant");
    fn_ = &fn;
    n_ = n;
    pending_.store(parts - 1, std::memory_order_relaxed);
    const uint64_t gen = (state_.load(std::memory_order_relaxed) >> kPartsBits) + 1;
    // seq_cst, paired with a sleeping worker's: either it sees this job before it sleeps, or this
    // thread sees it counted among the sleepers and wakes it.
    state_.store((gen << kPartsBits) | static_cast<uint64_t>(parts));
    if (sleepers_.load() > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_.notify_all();
    }
    int64_t b, e;
    chunk_bounds(n, parts, 0, &b, &e);
    fn(b, e);
    while (pending_.load(std::memory_order_acquire) != 0) BG_CPU_RELAX();
    fn_ = nullptr;
    busy_.store(false, std::memory_order_release);
}

void ThreadPool::worker(int idx) {
    uint64_t seen = 0;  // the generation at construction: a job published before this thread runs is still new to it
    for (;;) {
        uint64_t s = state_.load(std::memory_order_acquire);
        if ((s >> kPartsBits) == seen) {
            // Spin a while, then sleep until the next job (or the end).
            const auto until = Clock::now() + std::chrono::microseconds(kSpinUs);
            for (int i = 0; (s >> kPartsBits) == seen && !stop_.load(std::memory_order_relaxed); ++i) {
                BG_CPU_RELAX();
                if ((i & 255) == 255 && Clock::now() > until) {
                    std::unique_lock<std::mutex> lk(mu_);
                    sleepers_.fetch_add(1);
                    cv_.wait(lk, [&] { return (state_.load() >> kPartsBits) != seen || stop_.load(); });
                    sleepers_.fetch_sub(1);
                }
                s = state_.load(std::memory_order_acquire);
            }
        }
        if (stop_.load()) return;
        seen = s >> kPartsBits;
        const int parts = static_cast<int>(s & kPartsMask);
        // Threads beyond this job's chunk count sit it out.
        if (idx >= parts) continue;
        int64_t b, e;
        chunk_bounds(n_, parts, idx, &b, &e);
        (*fn_)(b, e);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace bg::cpu
