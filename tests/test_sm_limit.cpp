// --sm-limit's arithmetic: a request becomes the largest SM count the GPU can partition that is
// not above it, by the partition rules of the RTX 3060 (sm_86) and the H200 (sm_90).
#include <gtest/gtest.h>

#include "backend/sm_limit.h"
#include "util/check.h"

namespace {

using bg::choose_sm_count;
using bg::sm_partition_rule_for;

TEST(SmLimit, GuidelineRulesPerArchitecture) {
    EXPECT_EQ(sm_partition_rule_for(7).min_count, 2);
    EXPECT_EQ(sm_partition_rule_for(7).step, 2);
    EXPECT_EQ(sm_partition_rule_for(8).min_count, 4);  // sm_86: at least 4, in steps of 2
    EXPECT_EQ(sm_partition_rule_for(8).step, 2);
    EXPECT_EQ(sm_partition_rule_for(9).min_count, 8);  // sm_90: at least 8, in steps of 8
    EXPECT_EQ(sm_partition_rule_for(9).step, 8);
    EXPECT_EQ(sm_partition_rule_for(10).step, 8);
}

TEST(SmLimit, Sm90RoundsDownToStepsOfEight) {
    const auto r = sm_partition_rule_for(9);
    const auto s = choose_sm_count(28, 132, r);  // the RTX 3060's count on an H200
    EXPECT_EQ(s.requested, 28);
    EXPECT_EQ(s.used, 24);
    EXPECT_EQ(s.total, 132);
    EXPECT_TRUE(s.partitioned());
    EXPECT_NE(s.note.find("24"), std::string::npos) << s.note;
    EXPECT_NE(s.note.find("28"), std::string::npos) << s.note;
    EXPECT_EQ(choose_sm_count(16, 132, r).used, 16);
    EXPECT_EQ(choose_sm_count(8, 132, r).used, 8);
    EXPECT_EQ(choose_sm_count(15, 132, r).used, 8);
    EXPECT_EQ(choose_sm_count(131, 132, r).used, 128);
    EXPECT_THROW(choose_sm_count(7, 132, r), bg::Error);
    EXPECT_THROW(choose_sm_count(1, 132, r), bg::Error);
}

TEST(SmLimit, Sm86RoundsDownToStepsOfTwo) {
    const auto r = sm_partition_rule_for(8);
    EXPECT_EQ(choose_sm_count(27, 28, r).used, 26);
    EXPECT_EQ(choose_sm_count(16, 28, r).used, 16);
    EXPECT_EQ(choose_sm_count(5, 28, r).used, 4);
    EXPECT_EQ(choose_sm_count(4, 28, r).used, 4);
    EXPECT_THROW(choose_sm_count(3, 28, r), bg::Error);
    // On a 3060 itself, 28 is the whole device: nothing to partition.
    const auto whole = choose_sm_count(28, 28, r);
    EXPECT_EQ(whole.used, 28);
    EXPECT_FALSE(whole.partitioned());
}

TEST(SmLimit, ZeroMeansNoLimitAndLargeRequestsKeepTheWholeDevice) {
    const auto r = sm_partition_rule_for(9);
    const auto none = choose_sm_count(0, 132, r);
    EXPECT_EQ(none.requested, 0);
    EXPECT_EQ(none.used, 132);
    EXPECT_FALSE(none.partitioned());
    const auto big = choose_sm_count(500, 132, r);
    EXPECT_EQ(big.requested, 500);
    EXPECT_EQ(big.used, 132);
    EXPECT_FALSE(big.partitioned());
    EXPECT_EQ(choose_sm_count(132, 132, r).used, 132);
}

TEST(SmLimit, ToJsonRecordsRequestAndCount) {
    const auto s = choose_sm_count(28, 132, sm_partition_rule_for(9));
    const auto j = s.to_json();
    EXPECT_EQ(j["requested"], 28);
    EXPECT_EQ(j["used"], 24);
    EXPECT_EQ(j["total"], 132);
    EXPECT_EQ(j["step"], 8);
    EXPECT_EQ(j["partitioned"], true);
}

}  // namespace
