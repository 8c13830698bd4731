// The CPU thread pool (engine/cpu/thread_pool.h): every index of every job is visited exactly
// once, whatever the chunk counts of consecutive jobs, whether the workers are busy or idle when
// a job comes, and for a job given right after construction.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"

namespace {

void run_and_check(bg::cpu::ThreadPool& pool, int64_t n, int64_t min_chunk) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    pool.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
        },
        min_chunk);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, EveryIndexOnceAcrossChangingChunkCounts) {
    for (int threads : {1, 2, 3, 8}) {
        SCOPED_TRACE(threads);
        bg::cpu::ThreadPool pool(threads);
        run_and_check(pool, 1000, 1);  // at once: the workers may not have started yet
        // Back to back, so spinning workers see jobs whose chunk counts rise and fall.
        for (int rep = 0; rep < 300; ++rep) run_and_check(pool, 1 + (rep * 37) % 97, 1 + rep % 5);
    }
}

TEST(ThreadPool, WakesIdleWorkers) {
    bg::cpu::ThreadPool pool(4);
    for (int rep = 0; rep < 5; ++rep) {
        // The workers have been idle a while when the job comes.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        run_and_check(pool, 64, 1);
    }
}

TEST(ThreadPool, EveryThreadTakesPart) {
    // 4 chunks on 4 threads: each chunk on a thread of its own (the caller's among them).
    bg::cpu::ThreadPool pool(4);
    std::vector<std::thread::id> ids(4);
    pool.parallel_for(4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ids[static_cast<size_t>(i)] = std::this_thread::get_id();
    });
    for (size_t i = 0; i < ids.size(); ++i)
        for (size_t j = i + 1; j < ids.size(); ++j) EXPECT_NE(ids[i], ids[j]);
}

}  // namespace
