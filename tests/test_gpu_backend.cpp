// The CUDA backend's pools and copies, and the tiered store running on it.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_backend.cuh"
#include "cuda/dequant.cuh"

namespace {

TEST(GpuBackend, PinnedPoolsAndCopiesRoundTrip) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto be = bg::cuda::make_cuda_backend();
    const uint64_t n = 3 << 20;
    uint8_t* h = be->alloc_host(n);
    uint8_t* h2 = be->alloc_host(n);
    uint8_t* d = be->alloc_device(n);
    uint8_t* d2 = be->alloc_device(n);
    std::mt19937 gen(std::random_device{}());
    for (uint64_t i = 0; i < n; ++i) h[i] = static_cast<uint8_t>(gen());
    be->copy(d, h, n, bg::CopyKind::kHostToDevice);
    be->copy(d2, d, n, bg::CopyKind::kDeviceToDevice);
    be->copy(h2, d2, n, bg::CopyKind::kDeviceToHost);
    EXPECT_EQ(std::memcmp(h, h2, n), 0);
    EXPECT_GE(be->device_used_bytes(), 2 * n);
    be->free_device(d);
    be->free_device(d2);
    be->free_host(h);
    be->free_host(h2);
}

TEST(GpuBackend, PcieProbeMeasuresSomething) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const bg::cuda::PcieProbe p = bg::cuda::probe_pcie(64 << 20, 3);
    EXPECT_GT(p.pinned_gb_s, 1.0);
    EXPECT_GT(p.pageable_gb_s, 0.1);
    EXPECT_FALSE(p.device_name.empty());
}

}  // namespace
