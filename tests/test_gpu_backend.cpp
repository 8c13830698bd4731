// The CUDA backend's pools and copies, and the tiered store running on it.
#include <gtest/gtest.h>

#include <chrono>
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

// A batch of queued copies lands whole, each ticket's wait covers the copies before it, and the
// copy engine's time of the batch is measured (and no longer than the host waited for it).
TEST(GpuBackend, QueuedCopiesLandAndTheirEngineTimeIsMeasured) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto be = bg::cuda::make_cuda_backend();
    const uint64_t each = 1314816, n = 24;  // a device-scale expert's bytes, more than one batch's worth of slots
    uint8_t* h = be->alloc_host(each * n);
    uint8_t* back = be->alloc_host(each * n);
    uint8_t* d = be->alloc_device(each * n);
    std::mt19937 gen(std::random_device{}());
    for (uint64_t i = 0; i < each * n; ++i) h[i] = static_cast<uint8_t>(gen());
    EXPECT_DOUBLE_EQ(be->copy_busy_ms(), 0.0);
    std::vector<uint64_t> tickets;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < n; ++i)
        tickets.push_back(be->copy_async(d + i * each, h + i * each, each, bg::CopyKind::kHostToDevice));
    for (size_t i = 1; i < tickets.size(); ++i) EXPECT_GT(tickets[i], tickets[i - 1]);
    be->wait_copy(tickets.back());
    be->wait_copy(tickets.front());  // already covered: returns at once
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double engine_ms = be->copy_busy_ms();
    EXPECT_GT(engine_ms, 0.0);
    EXPECT_LE(engine_ms, wall_ms * 1.01 + 0.05);
    EXPECT_LT(each * n / (engine_ms * 1e6), 1000.0) << "GB/s beyond any PCIe or NVLink";
    be->copy(back, d, each * n, bg::CopyKind::kDeviceToHost);
    EXPECT_EQ(std::memcmp(h, back, each * n), 0);
    be->free_device(d);
    be->free_host(h);
    be->free_host(back);
}

// A row copy (copy_rows_async: one 2D copy) moves exactly the columns it names of every row, at
// unaligned offsets and widths (a split expert's down columns: 17-byte MXFP4 blocks), queued
// with whole copies under the same tickets; the bytes around them stay as they were.
TEST(GpuBackend, RowCopiesMoveOnlyTheirColumns) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto be = bg::cuda::make_cuda_backend();
    const uint64_t pitch = 1224, rows = 5120, bytes = pitch * rows, at = 36 * 17, width = pitch - at;
    uint8_t* h = be->alloc_host(bytes);
    uint8_t* back = be->alloc_host(bytes);
    uint8_t* d = be->alloc_device(bytes);
    std::mt19937 gen(std::random_device{}());
    for (uint64_t i = 0; i < bytes; ++i) h[i] = static_cast<uint8_t>(gen());
    std::memset(back, 0xA5, bytes);
    be->copy(d, back, bytes, bg::CopyKind::kHostToDevice);  // every device byte 0xA5
    const uint64_t t1 = be->copy_async(d, h, 100, bg::CopyKind::kHostToDevice);
    const uint64_t t2 = be->copy_rows_async(d + at, pitch, h + at, pitch, width, rows, bg::CopyKind::kHostToDevice);
    EXPECT_GT(t2, t1);
    be->wait_copy(t2);
    be->copy(back, d, bytes, bg::CopyKind::kDeviceToHost);
    for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t c = 0; c < pitch; ++c) {
            const bool copied = (r == 0 && c < 100) || c >= at;
            ASSERT_EQ(back[r * pitch + c], copied ? h[r * pitch + c] : 0xA5) << "row " << r << " byte " << c;
        }
    be->free_device(d);
    be->free_host(h);
    be->free_host(back);
}

TEST(GpuBackend, PcieProbeMeasuresSomething) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const bg::cuda::PcieProbe p = bg::cuda::probe_pcie(64 << 20, 3);
    EXPECT_GT(p.pinned_gb_s, 1.0);
    EXPECT_GT(p.pageable_gb_s, 0.1);
    EXPECT_FALSE(p.device_name.empty());
}

}  // namespace
