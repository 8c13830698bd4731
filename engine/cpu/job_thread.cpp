#include "cpu/job_thread.h"

#include "cpu/spin_wait.h"
#include "util/check.h"

namespace bg::cpu {

namespace {

// How long wait_idle spins before it sleeps: a job of the decode step ends within a few hundred
// microseconds of the wait, and a sleeping waiter is woken tens of microseconds late.
constexpr int64_t kIdleSpinUs = 500;

}  // namespace

JobThread::JobThread(int64_t capacity) : ring_(static_cast<size_t>(capacity)) {
    BG_CHECK(capacity >= 1);
    thread_ = std::thread([this] { run(); });
}

JobThread::~JobThread() {
    wait_idle();
    stop_.store(true);
    wake_.fetch_add(1);
    wake_.notify_one();
    thread_.join();
}

int64_t JobThread::pending() const {
    return static_cast<int64_t>(submitted_.load(std::memory_order_acquire) - finished_.load(std::memory_order_acquire));
}

void JobThread::submit(Fn fn, void* ctx, int64_t arg) {
    const uint64_t n = submitted_.load(std::memory_order_relaxed);  // only this thread writes it
    BG_CHECK_MSG(n - finished_.load(std::memory_order_acquire) < ring_.size(),
                 "JobThread: more jobs handed than its capacity between waits");
    ring_[n % ring_.size()] = Job{fn, ctx, arg};
    // seq_cst, paired with the thread's before it sleeps: either it sees this job, or this thread
    // sees it asleep and wakes it.
    submitted_.store(n + 1);
    if (sleeping_.load()) {
        wake_.fetch_add(1);
        wake_.notify_one();
    }
}

void JobThread::wait_idle() {
    const uint64_t target = submitted_.load(std::memory_order_relaxed);  // only this thread writes it
    for (uint64_t f; (f = finished_.load(std::memory_order_acquire)) != target;)
        spin_then_wait(finished_, f, kIdleSpinUs);
}

void JobThread::stay_awake(int64_t us) {
    raise_deadline(awake_until_ns_, now_ns() + us * 1000);
    if (sleeping_.load()) {  // seq_cst, paired as in submit
        wake_.fetch_add(1);
        wake_.notify_one();
    }
}

void JobThread::run() {
    uint64_t next = 0;  // the next job to run
    for (;;) {
        int64_t spin_until = now_ns() + kSpinUs * 1000;
        for (int i = 1; submitted_.load(std::memory_order_acquire) == next; ++i) {
            if (stop_.load(std::memory_order_relaxed)) return;
            BG_CPU_RELAX();
            if (i % 256 != 0) continue;
            const int64_t now = now_ns();
            if (now <= spin_until || now <= awake_until_ns_.load(std::memory_order_relaxed)) continue;
            const uint32_t w = wake_.load();
            sleeping_.store(true);
            // Checked again after sleeping_ is set (seq_cst): a job, a stay_awake or the stop
            // published before it is seen here, one after it finds this thread asleep and wakes it.
            if (submitted_.load() == next && !stop_.load() && awake_until_ns_.load() <= now_ns()) wake_.wait(w);
            sleeping_.store(false);
            spin_until = now_ns() + kSpinUs * 1000;
        }
        const Job& j = ring_[next % ring_.size()];
        j.fn(j.ctx, j.arg);
        ++next;
        finished_.store(next, std::memory_order_release);
        finished_.notify_all();
    }
}

}  // namespace bg::cpu
