// Ops::wait_host_word on the device: one thread of one block polls the host word over PCIe until
// it reaches the value, so the stream's later work starts as the CPU publishes what it reads,
// without the host thread that queued it waiting first. Hybrid decode queues a layer's last ops
// and the next layer's attention half behind the CPU's experts this way: queued by a waiting
// host thread they ran at its launch rate (3-6 us apart, about 110-190 us of gaps a layer in an
// H100 trace, 2026-12-06), where the device runs them about 1 us apart.
//
// A stream memory operation (cuStreamWaitValue32) would wait without a block; a kernel needs no
// driver entry point and shows in a kernel trace as the time the device waited for the CPU.
// The word is pinned host memory (cudaHostAlloc), which a 64-bit process's kernels address by
// its host pointer. A word that does not come within kTimeoutNs is a lost signal, not a slow CPU:
// the kernel traps, and the stream's next check reports it.
#include <cstdint>

#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"

namespace bg::cuda {

namespace {

constexpr unsigned long long kTimeoutNs = 60ull * 1000 * 1000 * 1000;
constexpr unsigned kPollNs = 256;  // between two reads of the word (each a PCIe round trip)

__device__ __forceinline__ uint32_t load_acquire_system(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void wait_host_word_kernel(const uint32_t* word, uint32_t value) {
    grid_dependency_begin();
    const unsigned long long t0 = global_ns();
    while (static_cast<int32_t>(load_acquire_system(word) - value) < 0) {
        if (global_ns() - t0 > kTimeoutNs) __trap();
        __nanosleep(kPollNs);
    }
}

}  // namespace

void wait_host_word(const uint32_t* word_host, uint32_t value, cudaStream_t stream) {
    void* on_device = nullptr;
    BG_CUDA_CHECK(cudaHostGetDevicePointer(&on_device, const_cast<uint32_t*>(word_host), 0));
    BG_CUDA_CHECK(
        launch_kernel(wait_host_word_kernel, 1, 1, 0, stream, static_cast<const uint32_t*>(on_device), value));
}

}  // namespace bg::cuda
