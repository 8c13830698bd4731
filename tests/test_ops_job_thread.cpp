// The CPU's job thread (engine/cpu/job_thread.h): jobs run one at a time, in the order they were
// handed, on a thread other than the caller's; wait_idle returns only after every job handed
// before it has returned and its writes are visible; a thread asleep (past its spin) is woken by
// a job and by stay_awake; a full queue is refused; the destructor waits for what was handed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu/job_thread.h"

namespace {

struct Log {
    std::vector<int64_t> order;  // written by the job thread only
    std::atomic<int> running{0};
    std::atomic<int> overlapped{0};
    std::thread::id caller;
    std::atomic<int> on_caller{0};
};

void record(void* ctx, int64_t arg) {
    auto* log = static_cast<Log*>(ctx);
    if (log->running.fetch_add(1) != 0) log->overlapped.fetch_add(1);
    if (std::this_thread::get_id() == log->caller) log->on_caller.fetch_add(1);
    // Long enough that a second job started early would overlap this one.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20 + arg % 7);
    while (std::chrono::steady_clock::now() < until) {
    }
    log->order.push_back(arg);
    log->running.fetch_sub(1);
}

TEST(JobThread, RunsJobsInOrderOneAtATimeOffTheCaller) {
    bg::cpu::JobThread jt(4);
    Log log;
    log.caller = std::this_thread::get_id();
    int64_t next = 0;
    for (int round = 0; round < 200; ++round) {
        const int n = 1 + round % 4;  // 1..capacity jobs between waits
        for (int j = 0; j < n; ++j) jt.submit(record, &log, next++);
        jt.wait_idle();
        ASSERT_EQ(jt.pending(), 0);
        ASSERT_EQ(static_cast<int64_t>(log.order.size()), next);  // every job done and visible
    }
    for (int64_t i = 0; i < next; ++i) ASSERT_EQ(log.order[static_cast<size_t>(i)], i);
    EXPECT_EQ(log.overlapped.load(), 0);
    EXPECT_EQ(log.on_caller.load(), 0);
}

TEST(JobThread, WakesFromSleepForAJobAndForStayAwake) {
    bg::cpu::JobThread jt(2);
    Log log;
    log.caller = std::this_thread::get_id();
    for (int rep = 0; rep < 5; ++rep) {
        // Past the spin: the thread sleeps when the job comes.
        std::this_thread::sleep_for(std::chrono::microseconds(3 * bg::cpu::JobThread::kSpinUs));
        jt.submit(record, &log, rep);
        jt.wait_idle();
        ASSERT_EQ(log.order.size(), static_cast<size_t>(rep + 1));
    }
    // Asleep, then asked to stay awake, then given a job inside that window and after it.
    std::this_thread::sleep_for(std::chrono::microseconds(3 * bg::cpu::JobThread::kSpinUs));
    jt.stay_awake(2000);
    jt.submit(record, &log, 5);
    jt.wait_idle();
    std::this_thread::sleep_for(std::chrono::microseconds(4000));
    jt.submit(record, &log, 6);
    jt.wait_idle();
    ASSERT_EQ(log.order.size(), 7u);
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(log.order[static_cast<size_t>(i)], i);
}

void block_until(void* ctx, int64_t) {
    auto* gate = static_cast<std::atomic<bool>*>(ctx);
    while (!gate->load()) std::this_thread::yield();
}

TEST(JobThreadDeathTest, RefusesMoreJobsThanItsCapacity) {
    EXPECT_DEATH(
        {
            std::atomic<bool> gate{false};
            bg::cpu::JobThread jt(2);
            for (int j = 0; j < 3; ++j) jt.submit(block_until, &gate, j);  // the first never ends
        },
        "capacity");
}

TEST(JobThread, DestructorWaitsForHandedJobs) {
    Log log;
    log.caller = std::this_thread::get_id();
    {
        bg::cpu::JobThread jt(8);
        for (int j = 0; j < 8; ++j) jt.submit(record, &log, j);
    }
    EXPECT_EQ(log.order.size(), 8u);
}

}  // namespace
