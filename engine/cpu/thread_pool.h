// A fixed pool of worker threads created at start-up. Two ways to give it work, neither of which
// allocates:
//  - parallel_for splits [0, n) into contiguous chunks, one a thread, and returns when all are
//    done;
//  - run starts one function on several threads at once (a team, the caller among them), whose
//    members can wait for each other inside it (Team::barrier): a job of several dependent
//    phases, such as a routed expert's gate and up rows, then its down rows, costs one start and
//    one join instead of one per phase.
//
// Workers spin for kSpinUs after a job (or until a stay_awake ends) before they sleep, the caller
// spins for the team's end,
// and barriers spin: a decode step hands the pool a few jobs each a few hundred microseconds
// long, and on 16 cores a start and join through a mutex and condition variable cost about 35 us
// each (bench_cpu's BM_PoolRoundTrip), a large part of such a job. A barrier or join that spins
// for 50 us without its team arriving sleeps on its atomic word instead (C++20 wait and notify):
// a member whose core was taken waits for an idle core, which spinning waiters never leave, so
// the team would wait a whole time slice (a pool larger than its cores, or another thread waking).
// A job is published by one atomic word holding its generation and team size, so a worker that
// sits a job out can never mistake the next job's size for this one's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "util/function_ref.h"

namespace bg::cpu {

class ThreadPool;

// The members of one ThreadPool::run, as each sees them.
class Team {
public:
    int index() const { return index_; }  // 0 .. size() - 1; the caller of run is 0
    int size() const { return size_; }
    // Returns once every member has called it (the same number of times): what each wrote before
    // is visible to all after.
    void barrier() const;
    // This member's part of [0, n) in `size()` balanced contiguous parts: [*b, *e).
    void share(int64_t n, int64_t* b, int64_t* e) const;

private:
    friend class ThreadPool;
    Team(ThreadPool* pool, int index, int size) : pool_(pool), index_(index), size_(size) {}
    ThreadPool* pool_;
    int index_, size_;
};

class ThreadPool {
public:
    // n_threads <= 0 means std::thread::hardware_concurrency().
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Calls fn(begin, end) over disjoint chunks covering [0, n); the calling thread takes part.
    // Chunks are at least `min_chunk` long (one chunk of n when n < min_chunk). Not re-entrant.
    // fn must not throw: it runs on worker threads. fn is referenced, not copied (no allocation).
    void parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t min_chunk = 1);
    // Calls fn(team) on `members` threads at once (1 <= members <= size()), the calling thread as
    // member 0, and returns when every member has returned. Not re-entrant; fn must not throw.
    void run(int members, FunctionRef<void(const Team&)> fn);

    // How long an idle worker spins for the next job before it sleeps.
    static constexpr int64_t kSpinUs = 200;

    // Work is coming within `us` microseconds: idle workers spin rather than sleep until then, and
    // sleeping ones are woken now, so the next jobs start on a team that is awake. A decode step
    // hands the pool about one expert a layer, a layer's GPU work apart (more than kSpinUs), and a
    // team woken from sleep took 1.8-2.3 ms an 18.8 MB expert where an awake one took 0.3 (the
    // H200's host, hybrid decode of the slice, c34636f): each late member made the others sleep
    // at a barrier, to be woken in turn. Lock-free when no worker sleeps.
    void stay_awake(int64_t us);
    // Workers asleep now (tests and metrics).
    int sleeping() const { return sleepers_.load(std::memory_order_relaxed); }

private:
    friend class Team;
    // The job as every member runs it: a function of (context, member index).
    using JobFn = void (*)(const void* ctx, ThreadPool* pool, int index, int members);
    void start(JobFn fn, const void* ctx, int members);
    void worker(int idx);
    void barrier_wait();

    int n_threads_ = 1;
    std::vector<std::thread> threads_;
    // The job: written before state_ publishes it, read only by the members, whom the caller
    // waits for before it writes the next.
    JobFn job_fn_ = nullptr;
    const void* job_ctx_ = nullptr;
    // (generation << 16) | member count of the current job.
    std::atomic<uint64_t> state_{0};
    std::atomic<int> pending_{0};   // members of the current job not yet done, the caller excluded
    std::atomic<int> sleepers_{0};  // workers that may be waiting on cv_
    // Until when (steady clock, ns since its epoch) idle workers spin: stay_awake.
    std::atomic<int64_t> awake_until_ns_{0};
    std::atomic<bool> stop_{false};
    std::atomic<bool> busy_{false};  // a job is running (re-entry is a bug)
    // The barrier of the current job's members: arrivals, and the phase the last arrival advances.
    std::atomic<int> barrier_count_{0};
    std::atomic<uint32_t> barrier_phase_{0};
    int barrier_members_ = 1;
    std::mutex mu_;
    std::condition_variable cv_;
};

}  // namespace bg::cpu
