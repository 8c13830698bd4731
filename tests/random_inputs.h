// Fresh random inputs for the per-op tests: a new seed every run (printed, so a failure can be
// replayed), never zeros.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace bgtest {

inline std::mt19937 fresh_rng() {
    const uint32_t seed = std::random_device{}();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::printf("[%s.%s] seed %u\n", info->test_suite_name(), info->name(), seed);
    return std::mt19937(seed);
}

inline std::vector<float> uniform(std::mt19937& rng, int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = u(rng);
    return v;
}

}  // namespace bgtest
