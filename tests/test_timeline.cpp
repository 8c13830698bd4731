// Busy-interval timelines (SPEC §5's "GPU busy while no disk read is pending") against a
// brute-force reference on a fine grid, on fresh random intervals.
#include <gtest/gtest.h>

#include <random>

#include "util/timeline.h"

namespace {

// Intervals in time order with random gaps and lengths on [0, ~span).
bg::Timeline random_timeline(std::mt19937_64& rng, int n, double max_gap, double max_len) {
    std::uniform_real_distribution<double> gap(0.0, max_gap), len(0.01, max_len);
    bg::Timeline t(n);
    double at = gap(rng);
    for (int i = 0; i < n; ++i) {
        const double l = len(rng);
        t.add(at, at + l);
        at += l + gap(rng);
    }
    return t;
}

bool inside(const bg::Timeline& t, double x) {
    for (const bg::Interval& i : t.intervals())
        if (x >= i.begin_ms && x < i.end_ms) return true;
    return false;
}

TEST(Timeline, CoveredOutsideMatchesAGridReference) {
    std::mt19937_64 rng(std::random_device{}());
    for (int round = 0; round < 20; ++round) {
        const bg::Timeline gpu = random_timeline(rng, 60, 2.0, 3.0);
        const bg::Timeline disk = random_timeline(rng, 40, 4.0, 2.0);
        const double t0 = 5.0, t1 = 90.0, step = 1e-3;
        double ref_outside = 0, ref_disk = 0, ref_union = 0;
        for (double x = t0 + step / 2; x < t1; x += step) {
            const bool g = inside(gpu, x), d = inside(disk, x);
            ref_outside += (g && !d) * step;
            ref_disk += d * step;
            ref_union += (g || d) * step;
        }
        EXPECT_NEAR(bg::covered_outside_ms(gpu, disk, t0, t1), ref_outside, 0.05) << "round " << round;
        EXPECT_NEAR(disk.covered_ms(t0, t1), ref_disk, 0.05);
        const bg::Timeline u = bg::union_of(gpu, disk);
        EXPECT_NEAR(u.covered_ms(t0, t1), ref_union, 0.05);
        for (size_t i = 1; i < u.intervals().size(); ++i)
            EXPECT_LT(u.intervals()[i - 1].end_ms, u.intervals()[i].begin_ms) << "union intervals are disjoint";
    }
}

TEST(Timeline, HandWorkedCases) {
    bg::Timeline gpu(8), disk(8);
    gpu.add(0, 10);
    gpu.add(20, 30);
    disk.add(5, 22);
    disk.add(25, 26);
    // GPU outside disk: [0,5) + [22,25) + [26,30) = 5 + 3 + 4.
    EXPECT_DOUBLE_EQ(bg::covered_outside_ms(gpu, disk, 0, 100), 12.0);
    // Clipped to [8, 28]: [22,25) + [26,28).
    EXPECT_DOUBLE_EQ(bg::covered_outside_ms(gpu, disk, 8, 28), 5.0);
    EXPECT_DOUBLE_EQ(disk.covered_ms(0, 100), 18.0);
    EXPECT_DOUBLE_EQ(bg::union_of(gpu, disk).covered_ms(0, 100), 30.0);
}

TEST(Timeline, OverlapFromAnotherClockIsCutAndAFullBufferSaysSo) {
    bg::Timeline t(2);
    t.add(0, 10);
    t.add(9.5, 12);  // starts before the last ended: cut to start at 10
    ASSERT_EQ(t.intervals().size(), 2u);
    EXPECT_DOUBLE_EQ(t.intervals()[1].begin_ms, 10.0);
    EXPECT_FALSE(t.overflowed());
    t.add(13, 14);
    EXPECT_TRUE(t.overflowed());
    EXPECT_EQ(t.intervals().size(), 2u);
    t.clear();
    EXPECT_FALSE(t.overflowed());
    EXPECT_TRUE(t.intervals().empty());
}

}  // namespace
