// A fixed pool of worker threads created at start-up; parallel_for splits [0, n) into
// contiguous chunks and blocks until all are done. Nothing is allocated per call.
#pragma once

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

private:
    void worker(int idx);
    int n_threads_ = 1;
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0, job_chunk_ = 1;
    int job_parts_ = 1;   // chunks of the current job: chunk i goes to thread i (caller = 0)
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
};

}  // namespace bg::cpu
