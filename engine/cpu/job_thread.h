// One thread that runs the jobs handed to it, in the order they were handed, while the thread
// that hands them goes on with other work.
//
// Hybrid decode (issue 24) computes a layer's host-resident experts on the CPU while the GPU
// computes the ones in VRAM and the ones whose copies land. The thread that issues GPU work
// computed the CPU's experts itself, so an expert whose copy landed meanwhile waited for it
// (243 us in one traced layer of the slice, H200, ecf687b): on this thread the CPU's experts run
// beside the issuing thread, which stays free to launch each copied expert's kernel as it lands.
//
// The queue is bounded (its capacity fixed at construction) and nothing allocates after it. Like
// ThreadPool's workers, the thread spins a while after a job and while stay_awake asks, then
// sleeps: a decode layer hands it a few jobs a few hundred microseconds long, and a wake from
// sleep costs tens of microseconds.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace bg::cpu {

class JobThread {
public:
    // A job: fn(ctx, arg). It must not throw (it runs on this thread).
    using Fn = void (*)(void* ctx, int64_t arg);

    // At most `capacity` jobs handed and not yet finished at once.
    explicit JobThread(int64_t capacity);
    ~JobThread();
    JobThread(const JobThread&) = delete;
    JobThread& operator=(const JobThread&) = delete;

    // Queues fn(ctx, arg) after the jobs handed before. The queue must have room (a caller that
    // hands more than `capacity` between waits is a bug). Called from one thread only.
    void submit(Fn fn, void* ctx, int64_t arg);
    // Returns once every job handed so far has returned: what they wrote is visible after.
    void wait_idle();
    // Jobs handed and not yet finished.
    int64_t pending() const;
    // Work is coming within `us` microseconds: the thread spins rather than sleeps until then,
    // and is woken now if it sleeps.
    void stay_awake(int64_t us);

    // How long the thread spins for the next job before it sleeps.
    static constexpr int64_t kSpinUs = 200;

private:
    struct Job {
        Fn fn = nullptr;
        void* ctx = nullptr;
        int64_t arg = 0;
    };
    void run();

    std::vector<Job> ring_;  // [capacity]; job i at i % capacity
    // Counts since construction: jobs handed (written by the submitting thread) and jobs finished
    // (by this thread). Both only grow; the thread sleeps on submitted_, waiters on finished_.
    std::atomic<uint64_t> submitted_{0};
    std::atomic<uint64_t> finished_{0};
    std::atomic<int64_t> awake_until_ns_{0};
    // The thread sleeps on wake_, which a submit, a stay_awake or the stop bumps when it finds
    // sleeping_ set.
    std::atomic<uint32_t> wake_{0};
    std::atomic<bool> sleeping_{false};
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace bg::cpu
