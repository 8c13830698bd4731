#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "cpu/spin_wait.h"
#include "util/check.h"

namespace bg::cpu {

namespace {

// Chunk i of `parts` balanced chunks over [0, n): sizes differ by at most one, so every chunk
// is at least floor(n / parts) long.
inline void chunk_bounds(int64_t n, int parts, int i, int64_t* b, int64_t* e) {
    *b = n * i / parts;
    *e = n * (i + 1) / parts;
}

constexpr uint64_t kMembersBits = 16;
constexpr uint64_t kMembersMask = (uint64_t(1) << kMembersBits) - 1;

// How long a barrier or the caller's join spins on its word before it sleeps on it. A healthy
// team meets within a few microseconds; a member that lost its core for a time slice (another
// thread woke on it) would keep every waiter spinning for milliseconds, and spinning waiters leave
// the scheduler no idle core to move it to: sleeping ones do.
constexpr int64_t kWaitSpinUs = 50;

}  // namespace

void Team::barrier() const {
    if (size_ > 1) pool_->barrier_wait();
}

void Team::share(int64_t n, int64_t* b, int64_t* e) const { chunk_bounds(n, size_, index_, b, e); }

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
    n_threads_ = std::clamp(n_threads, 1, static_cast<int>(kMembersMask));
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

void ThreadPool::start(JobFn fn, const void* ctx, int members) {
    BG_CHECK(members >= 1 && members <= n_threads_);
    if (members == 1) {
        fn(ctx, this, 0, 1);  // not worth a wake-up
        return;
    }
    BG_CHECK_MSG(!busy_.exchange(true), "ThreadPool: a job started inside another (not re-entrant)");
    job_fn_ = fn;
    job_ctx_ = ctx;
    barrier_members_ = members;
    barrier_count_.store(0, std::memory_order_relaxed);
    pending_.store(members - 1, std::memory_order_relaxed);
    const uint64_t gen = (state_.load(std::memory_order_relaxed) >> kMembersBits) + 1;
    // seq_cst, paired with a sleeping worker's: either it sees this job before it sleeps, or this
    // thread sees it counted among the sleepers and wakes it.
    state_.store((gen << kMembersBits) | static_cast<uint64_t>(members));
    if (sleepers_.load() > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_.notify_all();
    }
    fn(ctx, this, 0, members);
    for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) spin_then_wait(pending_, p, kWaitSpinUs);
    job_fn_ = nullptr;
    job_ctx_ = nullptr;
    busy_.store(false, std::memory_order_release);
}

void ThreadPool::barrier_wait() {
    const uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
    if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == barrier_members_ - 1) {
        // The last to arrive: reset the count before the others can leave (they wait for the
        // phase, stored after it), then let them go.
        barrier_count_.store(0, std::memory_order_relaxed);
        barrier_phase_.store(phase + 1, std::memory_order_release);
        barrier_phase_.notify_all();
        return;
    }
    spin_then_wait(barrier_phase_, phase, kWaitSpinUs);
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t min_chunk) {
    if (n <= 0) return;
    if (min_chunk < 1) min_chunk = 1;
    // As many chunks as threads, but never so many that one falls below min_chunk.
    const int64_t max_parts = std::max<int64_t>(1, n / min_chunk);
    const int parts = static_cast<int>(std::min<int64_t>(n_threads_, max_parts));
    struct Ctx {
        const FunctionRef<void(int64_t, int64_t)>* fn;
        int64_t n;
    } ctx{&fn, n};
    start(
        [](const void* c, ThreadPool*, int index, int members) {
            const auto* x = static_cast<const Ctx*>(c);
            int64_t b, e;
            chunk_bounds(x->n, members, index, &b, &e);
            (*x->fn)(b, e);
        },
        &ctx, parts);
}

void ThreadPool::run(int members, FunctionRef<void(const Team&)> fn) {
    start(
        [](const void* c, ThreadPool* pool, int index, int n) {
            (*static_cast<const FunctionRef<void(const Team&)>*>(c))(Team(pool, index, n));
        },
        &fn, members);
}

void ThreadPool::stay_awake(int64_t us) {
    raise_deadline(awake_until_ns_, now_ns() + us * 1000);
    // seq_cst, paired with a sleeping worker's as in start(): either it sees the new time before
    // it sleeps, or this thread sees it among the sleepers and wakes it.
    if (sleepers_.load() > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_.notify_all();
    }
}

void ThreadPool::worker(int idx) {
    uint64_t seen = 0;  // the generation at construction: a job published before this thread runs is still new to it
    for (;;) {
        uint64_t s = state_.load(std::memory_order_acquire);
        if ((s >> kMembersBits) == seen) {
            // Spin a while (or while stay_awake asks), then sleep until the next job, the end, or
            // a stay_awake.
            int64_t spin_until = now_ns() + kSpinUs * 1000;
            for (int i = 1; (s >> kMembersBits) == seen && !stop_.load(std::memory_order_relaxed); ++i) {
                BG_CPU_RELAX();
                if (i % 256 == 0) {
                    const int64_t now = now_ns();
                    if (now > spin_until && now > awake_until_ns_.load(std::memory_order_relaxed)) {
                        std::unique_lock<std::mutex> lk(mu_);
                        sleepers_.fetch_add(1);
                        cv_.wait(lk, [&] {
                            return (state_.load() >> kMembersBits) != seen || stop_.load() ||
                                   awake_until_ns_.load() > now_ns();
                        });
                        sleepers_.fetch_sub(1);
                        spin_until = now_ns() + kSpinUs * 1000;
                    }
                }
                s = state_.load(std::memory_order_acquire);
            }
        }
        if (stop_.load()) return;
        seen = s >> kMembersBits;
        const int members = static_cast<int>(s & kMembersMask);
        // Threads beyond this job's team sit it out.
        if (idx >= members) continue;
        job_fn_(job_ctx_, this, idx, members);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_all();
    }
}

}  // namespace bg::cpu
