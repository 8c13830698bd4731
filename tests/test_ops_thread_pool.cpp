// The CPU thread pool (engine/cpu/thread_pool.h): every index of every job is visited exactly
// once, whatever the chunk counts of consecutive jobs, whether the workers are spinning or asleep
// when a job comes, and for a job given right after construction; a team's members each run on a
// thread of their own and see, after each barrier, everything every member wrote before it;
// stay_awake wakes sleeping workers and keeps them up for its window only.
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

TEST(ThreadPool, WakesSleepingWorkers) {
    bg::cpu::ThreadPool pool(4);
    for (int rep = 0; rep < 5; ++rep) {
        // Longer than the spin: the workers have gone to sleep when the job comes.
        std::this_thread::sleep_for(std::chrono::microseconds(3 * bg::cpu::ThreadPool::kSpinUs));
        run_and_check(pool, 64, 1);
    }
}

// Each member adds its index into its own slot of round r, waits at the barrier, then checks that
// every member's slot of round r holds its index: a barrier that let one member through early
// would leave a slot unwritten. Team sizes change between runs, back to back and after sleeps.
TEST(ThreadPool, TeamMembersSeeEachOthersWritesAfterEachBarrier) {
    for (const int threads : {1, 2, 3, 5}) {
        SCOPED_TRACE(threads);
        bg::cpu::ThreadPool pool(threads);
        constexpr int kRounds = 20;
        for (int rep = 0; rep < 60; ++rep) {
            const int members = 1 + rep % threads;
            if (rep % 20 == 19) std::this_thread::sleep_for(std::chrono::microseconds(3 * bg::cpu::ThreadPool::kSpinUs));
            std::vector<int> slot(static_cast<size_t>(kRounds * members), -1);
            std::vector<int> ran(static_cast<size_t>(members), 0), wrong(static_cast<size_t>(members), 0);
            std::vector<int> sizes(static_cast<size_t>(members), 0);
            std::vector<std::thread::id> ids(static_cast<size_t>(members));
            pool.run(members, [&](const bg::cpu::Team& team) {
                const auto me = static_cast<size_t>(team.index());
                ids[me] = std::this_thread::get_id();
                sizes[me] = team.size();
                ++ran[me];
                for (int r = 0; r < kRounds; ++r) {
                    slot[static_cast<size_t>(r * members) + me] = team.index();
                    team.barrier();
                    for (int j = 0; j < members; ++j)
                        if (slot[static_cast<size_t>(r * members + j)] != j) ++wrong[me];
                }
            });
            for (int i = 0; i < members; ++i) {
                ASSERT_EQ(ran[static_cast<size_t>(i)], 1) << "member " << i << " of " << members;
                ASSERT_EQ(sizes[static_cast<size_t>(i)], members);
                ASSERT_EQ(wrong[static_cast<size_t>(i)], 0) << "member " << i << " passed a barrier early";
                for (int j = i + 1; j < members; ++j) ASSERT_NE(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(j)]);
            }
            ASSERT_EQ(ids[0], std::this_thread::get_id()) << "the caller is member 0";
        }
    }
}

// Team::share: the members' parts tile [0, n) in order, sizes within one of each other.
TEST(ThreadPool, TeamSharesTileTheRange) {
    bg::cpu::ThreadPool pool(4);
    for (const int64_t n : {0, 1, 3, 4, 7, 100}) {
        std::vector<int64_t> b(4), e(4);
        pool.run(4, [&](const bg::cpu::Team& team) {
            team.share(n, &b[static_cast<size_t>(team.index())], &e[static_cast<size_t>(team.index())]);
        });
        EXPECT_EQ(b[0], 0);
        EXPECT_EQ(e[3], n);
        for (size_t i = 0; i < 4; ++i) {
            if (i > 0) {
                EXPECT_EQ(b[i], e[i - 1]);
            }
            EXPECT_LE(e[i] - b[i], n / 4 + 1);
            EXPECT_GE(e[i] - b[i], n / 4);
        }
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

// Polls pred every millisecond for up to ten seconds (a loaded CI machine schedules threads late).
template <class Pred>
bool eventually(Pred pred) {
    for (int i = 0; i < 10000; ++i) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pred();
}

TEST(ThreadPool, StayAwakeWakesSleepersKeepsThemUpThenLetsThemSleep) {
    bg::cpu::ThreadPool pool(4);
    // Idle past the spin: the three workers sleep.
    ASSERT_TRUE(eventually([&] { return pool.sleeping() == 3; }));
    // Woken at once, and up for the whole window (their spin alone ends after kSpinUs).
    pool.stay_awake(2'000'000);
    ASSERT_TRUE(eventually([&] { return pool.sleeping() == 0; }));
    std::this_thread::sleep_for(std::chrono::microseconds(5 * bg::cpu::ThreadPool::kSpinUs));
    EXPECT_EQ(pool.sleeping(), 0);
    run_and_check(pool, 1000, 1);
    // After the window they sleep again, and a job still wakes them.
    EXPECT_TRUE(eventually([&] { return pool.sleeping() == 3; }));
    run_and_check(pool, 1000, 1);
    // A shorter window never cuts a longer one short.
    pool.stay_awake(2'000'000);
    pool.stay_awake(1);
    std::this_thread::sleep_for(std::chrono::microseconds(5 * bg::cpu::ThreadPool::kSpinUs));
    EXPECT_TRUE(eventually([&] { return pool.sleeping() == 0; }));
}

}  // namespace
