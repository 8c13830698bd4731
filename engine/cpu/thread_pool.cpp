#include "cpu/thread_pool.h"

#include <algorithm>

#include "util/check.h"

namespace bg::cpu {

namespace {

// Chunk i of `parts` balanced chunks over [0, n): sizes differ by at most one, so every chunk
// is at least floor(n / parts) long.
inline void chunk_bounds(int64_t n, int parts, int i, int64_t* b, int64_t* e) {
    *b = n * i / parts;
    *e = n * (i + 1) / parts;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
    n_threads_ = std::max(1, n_threads);
    threads_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_start_.notify_all();
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
    {
        std::lock_guard<std::mutex> lk(mu_);
        BG_CHECK_MSG(job_ == nullptr, "ThreadPool::parallel_for is not re-entrant");
        job_ = &fn;
        job_n_ = n;
        job_chunk_ = min_chunk;
        job_parts_ = parts;
        pending_ = parts - 1;
        ++generation_;
    }
    cv_start_.notify_all();
    int64_t b, e;
    chunk_bounds(n, parts, 0, &b, &e);
    fn(b, e);
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [this] { return pending_ == 0; });
    job_ = nullptr;
}

void ThreadPool::worker(int idx) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        // Threads beyond this job's chunk count sit it out.
        if (idx >= job_parts_) continue;
        const auto* fn = job_;
        const int64_t n = job_n_;
        const int parts = job_parts_;
        lk.unlock();
        int64_t b, e;
        chunk_bounds(n, parts, idx, &b, &e);
        (*fn)(b, e);
        lk.lock();
        if (--pending_ == 0) cv_done_.notify_one();
    }
}

}  // namespace bg::cpu
