// Busy intervals on the host's steady clock, so two activities measured by different means (a
// disk read in flight, GPU kernels between two events) can be laid over each other: SPEC §5's
// "GPU busy while no disk read is pending" is the GPU's time outside the disk's intervals.
// The buffer is sized at start-up; a full buffer drops further intervals and says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bg {

struct Interval {
    double begin_ms = 0, end_ms = 0;  // steady-clock ms (now_ms), begin <= end
};

// Intervals one pass may record, from the model's size: a pass reads each (layer, expert) at most
// once per unit of work and runs a few kernel intervals per expert, so 16 per (layer, expert) hold
// the token-major baseline over 500 tokens; a longer pass overflows and its figure is null.
inline size_t timeline_capacity(int64_t n_layer, int64_t n_expert) {
    const int64_t n = 16 * n_layer * n_expert;
    return static_cast<size_t>(n < 4096 ? 4096 : n > (1 << 20) ? (1 << 20) : n);
}

// Milliseconds on the steady clock since its epoch.
double now_ms();

class Timeline {
public:
    explicit Timeline(size_t capacity);
    void clear();
    // Intervals arrive in time order; one that starts before the last ended (clock jitter
    // between two clocks) is cut to start there.
    void add(double begin_ms, double end_ms);
    const std::vector<Interval>& intervals() const { return v_; }
    bool overflowed() const { return overflowed_; }
    uint64_t bytes() const { return capacity_ * sizeof(Interval); }  // host memory held, for budgets
    void mark_overflowed() { overflowed_ = true; }
    // Time within [t0, t1] covered by these intervals.
    double covered_ms(double t0, double t1) const;

private:
    std::vector<Interval> v_;  // [<= capacity], reserved once
    size_t capacity_ = 0;
    bool overflowed_ = false;
};

// The union of two timelines (each in time order) as one, in time order.
Timeline union_of(const Timeline& a, const Timeline& b);

// Time within [t0, t1] that `busy` covers and `other` does not (each in time order, disjoint).
double covered_outside_ms(const Timeline& busy, const Timeline& other, double t0, double t1);

}  // namespace bg
