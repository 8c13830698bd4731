// A fixed pool of worker threads created at start-up; parallel_for splits [0, n) into
// contiguous chunks and blocks until all are done. Nothing is allocated per call.
//
// Workers spin for a while (kSpinUs) after each job before they sleep, and the caller spins
// while it waits for the last chunk: a decode step calls parallel_for three times per expert, a
// few hundred microseconds apart, and a wake-up through a mutex and condition variable for every
// worker of every call cost a large part of an expert's time on 16 cores. A job is published by
// one atomic word holding its generation and chunk count, so a worker that sits a job out can
// never mistake the next job's chunk count for this one's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace bg::cpu {

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
    // fn must not throw: it runs on worker threads.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                      int64_t min_chunk = 1);

    // How long an idle worker spins for the next job before it sleeps.
    static constexpr int64_t kSpinUs = 200;

private:
    void worker(int idx);
    int n_threads_ = 1;
    std::vector<std::thread> threads_;
    // The job: fn_ and n_ are written before state_ publishes them and read only by workers that
    // take a chunk, which the caller waits for before it writes the next job.
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    // (generation << 16) | chunk count of the current job.
    std::atomic<uint64_t> state_{0};
    std::atomic<int> pending_{0};   // chunks of the current job not yet done, the caller's excluded
    std::atomic<int> sleepers_{0};  // workers that may be waiting on cv_
    std::atomic<bool> stop_{false};
    std::atomic<bool> busy_{false};  // a parallel_for is running (re-entry is a bug)
    std::mutex mu_;
    std::condition_variable cv_;
};

}  // namespace bg::cpu
