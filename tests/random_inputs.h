// Fresh random inputs for the per-op tests: a new seed every run, never zeros. The seed is
// printed; BG_TEST_SEED=<seed> replays a failure (with --gtest_filter naming the one test, since
// every test that calls fresh_rng then gets that seed).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace bgtest {

inline std::mt19937 fresh_rng() {
    const char* env = std::getenv("BG_TEST_SEED");
    const uint32_t seed = env ? static_cast<uint32_t>(std::strtoul(env, nullptr, 0))
                              : std::random_device{}();
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
