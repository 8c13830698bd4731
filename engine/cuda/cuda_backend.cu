#include "cuda/cuda_backend.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/check.h"

namespace bg::cuda {

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda: %s: %s", what, cudaGetErrorString(e));
}

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device) : device_(device) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n <= device) {
            cudaGetLastError();
            fail("cuda: no CUDA device %d (found %d)", device, n);
        }
        check(cudaSetDevice(device), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        size_t free_b = 0, total_b = 0;
        check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        baseline_used_ = total_b - free_b;
    }
    ~CudaBackend() override { cudaStreamDestroy(copy_stream_); }
    const char* name() const override { return "cuda"; }
    uint8_t* alloc_device(uint64_t bytes) override {
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, std::max<uint64_t>(bytes, 1));
        if (e != cudaSuccess) fail("cuda: cannot allocate %llu bytes of device memory: %s", (unsigned long long)bytes, cudaGetErrorString(e));
        return static_cast<uint8_t*>(p);
    }
    void free_device(uint8_t* p) override { cudaFree(p); }
    uint8_t* alloc_host(uint64_t bytes) override {
        void* p = nullptr;
        const cudaError_t e = cudaHostAlloc(&p, std::max<uint64_t>(bytes, 1), cudaHostAllocPortable);
        if (e != cudaSuccess) fail("cuda: cannot allocate %llu bytes of page-locked host memory: %s", (unsigned long long)bytes, cudaGetErrorString(e));
        std::memset(p, 0, bytes);
        return static_cast<uint8_t*>(p);
    }
    void free_host(uint8_t* p) override { cudaFreeHost(p); }
    void copy(uint8_t* dst, const uint8_t* src, uint64_t bytes, CopyKind kind) override {
        if (kind == CopyKind::kHostToHost) {
            std::memcpy(dst, src, bytes);
            return;
        }
        const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                                 : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                                   : cudaMemcpyDeviceToDevice;
        // The caller (the store's streamer thread) is the copy engine's driver: it waits here,
        // compute on other streams goes on.
        check(cudaMemcpyAsync(dst, src, bytes, k, copy_stream_), "cudaMemcpyAsync");
        check(cudaStreamSynchronize(copy_stream_), "copy stream");
    }
    bool device_is_host_addressable() const override { return false; }
    uint64_t device_used_bytes() const override {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
        const uint64_t used = total_b - free_b;
        return used > baseline_used_ ? used - baseline_used_ : 0;
    }

private:
    int device_ = 0;
    cudaStream_t copy_stream_ = nullptr;
    uint64_t baseline_used_ = 0;  // other processes' and the context's memory at start
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

PcieProbe probe_pcie(uint64_t bytes, int reps, int device) {
    PcieProbe r;
    r.bytes = bytes;
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    r.device_name = prop.name;
    void* d = nullptr;
    void* pinned = nullptr;
    check(cudaMalloc(&d, bytes), "cudaMalloc");
    check(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    uint8_t* pageable = static_cast<uint8_t*>(std::malloc(bytes));
    if (!pageable) fail("probe-pcie: cannot allocate %llu bytes", (unsigned long long)bytes);
    std::memset(pinned, 1, bytes);
    std::memset(pageable, 1, bytes);
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    auto best = [&](const void* src) {
        float best_ms = 1e30f;
        for (int i = 0; i < reps + 1; ++i) {  // the first copy warms the path up
            check(cudaEventRecord(a), "cudaEventRecord");
            check(cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpyAsync");
            check(cudaEventRecord(b), "cudaEventRecord");
            check(cudaEventSynchronize(b), "cudaEventSynchronize");
            float ms = 0;
            check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
            if (i > 0) best_ms = std::min(best_ms, ms);
        }
        return bytes / (best_ms * 1e6);
    };
    r.pinned_gb_s = best(pinned);
    r.pageable_gb_s = best(pageable);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(d);
    cudaFreeHost(pinned);
    std::free(pageable);
    return r;
}

}  // namespace bg::cuda
