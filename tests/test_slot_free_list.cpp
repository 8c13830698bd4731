// The bounded free list of transient and staging slots (runtime/slot_free_list.h): every slot is
// handed out once until given back, the first take is slot 0 and the order is last in, first
// out; an empty list answers -1; a slot given back twice, or one out of range, aborts.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "runtime/slot_free_list.h"

using namespace bg;

TEST(SlotFreeList, HandsOutEverySlotOnceThenNone) {
    SlotFreeList f(5);
    EXPECT_EQ(f.capacity(), 5);
    EXPECT_EQ(f.free_count(), 5);
    std::vector<int32_t> got;
    for (int i = 0; i < 5; ++i) got.push_back(f.take());
    EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(f.take(), -1);
    EXPECT_EQ(f.free_count(), 0);
    f.give(3);
    f.give(1);
    EXPECT_EQ(f.take(), 1);  // last in, first out
    EXPECT_EQ(f.take(), 3);
    EXPECT_EQ(f.take(), -1);
}

TEST(SlotFreeList, RandomTakesAndGivesKeepEachSlotOnce) {
    std::mt19937 rng(std::random_device{}());
    SlotFreeList f(12);
    std::vector<int32_t> out;
    for (int step = 0; step < 2000; ++step) {
        if (!out.empty() && (rng() % 2 || f.free_count() == 0)) {
            const size_t i = rng() % out.size();
            f.give(out[i]);
            out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
            const int32_t s = f.take();
            ASSERT_GE(s, 0);
            ASSERT_EQ(std::count(out.begin(), out.end(), s), 0) << "slot " << s << " handed out twice";
            out.push_back(s);
        }
        ASSERT_EQ(f.free_count() + static_cast<int64_t>(out.size()), 12);
    }
}

TEST(SlotFreeListDeathTest, GivingBackTwiceOrAStrangerAborts) {
    SlotFreeList f(3);
    const int32_t s = f.take();
    f.give(s);
    EXPECT_DEATH(f.give(s), "given back twice");
    EXPECT_DEATH(f.give(7), "given back twice");
    EXPECT_DEATH(f.give(-1), "given back twice");
}

TEST(SlotFreeList, EmptyListHasNothing) {
    SlotFreeList f(0);
    EXPECT_EQ(f.take(), -1);
    EXPECT_EQ(f.free_count(), 0);
}
