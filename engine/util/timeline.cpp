#include "util/timeline.h"

#include <algorithm>
#include <chrono>

#include "util/check.h"

namespace bg {

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Timeline::Timeline(size_t capacity) : capacity_(capacity) { v_.reserve(capacity); }

void Timeline::clear() {
    v_.clear();
    overflowed_ = false;
}

void Timeline::add(double begin_ms, double end_ms) {
    BG_CHECK(begin_ms <= end_ms);
    if (!v_.empty()) begin_ms = std::max(begin_ms, v_.back().end_ms);
    if (begin_ms >= end_ms) return;
    if (v_.size() == capacity_) {
        overflowed_ = true;
        return;
    }
    v_.push_back({begin_ms, end_ms});
}

double Timeline::covered_ms(double t0, double t1) const {
    double sum = 0;
    for (const Interval& i : v_) sum += std::max(0.0, std::min(i.end_ms, t1) - std::max(i.begin_ms, t0));
    return sum;
}

Timeline union_of(const Timeline& a, const Timeline& b) {
    const std::vector<Interval>& x = a.intervals();
    const std::vector<Interval>& y = b.intervals();
    Timeline u(x.size() + y.size());
    size_t i = 0, j = 0;
    Interval cur{};
    bool open = false;
    while (i < x.size() || j < y.size()) {
        const Interval next = (j >= y.size() || (i < x.size() && x[i].begin_ms <= y[j].begin_ms)) ? x[i++] : y[j++];
        if (open && next.begin_ms <= cur.end_ms) {
            cur.end_ms = std::max(cur.end_ms, next.end_ms);
            continue;
        }
        if (open) u.add(cur.begin_ms, cur.end_ms);
        cur = next;
        open = true;
    }
    if (open) u.add(cur.begin_ms, cur.end_ms);
    if (a.overflowed() || b.overflowed()) u.mark_overflowed();
    return u;
}

double covered_outside_ms(const Timeline& busy, const Timeline& other, double t0, double t1) {
    const std::vector<Interval>& o = other.intervals();
    size_t j = 0;
    double sum = 0;
    for (const Interval& b : busy.intervals()) {
        double lo = std::max(b.begin_ms, t0);
        const double hi = std::min(b.end_ms, t1);
        if (lo >= hi) continue;
        // Skip what ends before this interval; both lists are in time order.
        while (j < o.size() && o[j].end_ms <= lo) ++j;
        for (size_t k = j; k < o.size() && o[k].begin_ms < hi && lo < hi; ++k) {
            if (o[k].begin_ms > lo) sum += o[k].begin_ms - lo;
            lo = std::max(lo, o[k].end_ms);
        }
        if (lo < hi) sum += hi - lo;
    }
    return sum;
}

}  // namespace bg
