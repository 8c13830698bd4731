#include "cuda/launch.cuh"

#include <atomic>

#include "cuda/check.cuh"

namespace bg::cuda {

namespace {
std::atomic<bool> g_allowed{true};
}  // namespace

void allow_chained_launches(bool allowed) { g_allowed.store(allowed, std::memory_order_relaxed); }

bool chained_launches() {
    if (!g_allowed.load(std::memory_order_relaxed)) return false;
    // Per device: 0 not looked up yet, 1 unchained, 2 chained. Devices past the table are looked
    // up at every launch (no machine here has that many).
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices];
    int dev = 0;
    BG_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 0 && dev < kDevices) {
        const int k = known[dev].load(std::memory_order_relaxed);
        if (k != 0) return k == 2;
    }
    int major = 0;
    BG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool chained = major >= 9;
    if (dev >= 0 && dev < kDevices) known[dev].store(chained ? 2 : 1, std::memory_order_relaxed);
    return chained;
}

}  // namespace bg::cuda
