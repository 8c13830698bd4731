#include "cuda/cuda_backend.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/launch.cuh"
#include "cuda/sm_limit.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda: %s: %s", what, cudaGetErrorString(e));
}

class CudaBackend final : public Backend {
public:
    CudaBackend(int device, int sm_limit, bool chained) : device_(device) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n <= device) {
            cudaGetLastError();
            fail("cuda: no CUDA device %d (found %d)", device, n);
        }
        // The device's primary context, or with --sm-limit a green context holding that many
        // SMs, made current on this thread: every stream, event, allocation, cuBLAS handle and
        // kernel this thread makes from here on (the ops come next) belongs to it. Other threads
        // call bind_thread(); nothing may call cudaSetDevice after it (that would switch this
        // thread back to the primary context and all SMs).
        partition_ = std::make_unique<SmPartition>(device, sm_limit);
        partition_->bind_thread();
        allow_chained_launches(chained);
        if (partition_->limit().requested > 0) std::fprintf(stderr, "cuda: %s\n", partition_->limit().note.c_str());
        check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        BG_CHECK_MSG(partition_->owns(copy_stream_), "the copy stream is not in the SM partition's context");
        // The streamer thread sleeps while it waits for a copy (an expert takes about 0.35 ms
        // over PCIe) rather than spinning on a core: in a hybrid decode step the CPU's team takes
        // every other core, and a spinning waiter beside it cost the team's members their cores
        // (slice decode on the H200: CPU experts at 2.7-3.4 ms each beside copies, 0.3 without).
        for (cudaEvent_t& e : copy_done_) check(cudaEventCreateWithFlags(&e, cudaEventBlockingSync), "cudaEventCreate");
        check(cudaEventCreate(&batch_start_), "cudaEventCreate");
        size_t free_b = 0, total_b = 0;
        check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        baseline_used_ = total_b - free_b;
    }
    ~CudaBackend() override {
        cudaStreamSynchronize(copy_stream_);
        for (cudaEvent_t e : copy_done_) cudaEventDestroy(e);
        cudaEventDestroy(batch_start_);
        cudaStreamDestroy(copy_stream_);
        partition_.reset();  // after every stream of its context
    }
    const char* name() const override { return "cuda"; }
    void bind_thread() override { partition_->bind_thread(); }
    SmLimit sm_limit() const override { return partition_->limit(); }
    bool chained_launches() const override { return cuda::chained_launches(); }
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
        // The caller (the store's streamer thread) is the copy engine's driver: it waits here,
        // compute on other streams goes on.
        check(cudaMemcpyAsync(dst, src, bytes, cuda_kind(kind), copy_stream_), "cudaMemcpyAsync");
        check(cudaStreamSynchronize(copy_stream_), "copy stream");
    }
    uint64_t copy_async(uint8_t* dst, const uint8_t* src, uint64_t bytes, CopyKind kind) override {
        if (kind == CopyKind::kHostToHost) {
            std::memcpy(dst, src, bytes);
            return waited_;  // nothing queued: done already
        }
        return enqueue([&] { check(cudaMemcpyAsync(dst, src, bytes, cuda_kind(kind), copy_stream_), "cudaMemcpyAsync"); });
    }
    uint64_t copy_rows_async(uint8_t* dst, uint64_t dst_pitch, const uint8_t* src, uint64_t src_pitch, uint64_t width,
                             uint64_t rows, CopyKind kind) override {
        BG_CHECK(width <= dst_pitch && width <= src_pitch);
        if (kind == CopyKind::kHostToHost) {
            for (uint64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, width);
            return waited_;
        }
        return enqueue([&] {
            check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cuda_kind(kind), copy_stream_),
                  "cudaMemcpy2DAsync");
        });
    }
    void wait_copy(uint64_t ticket) override {
        BG_CHECK(ticket <= queued_);
        if (ticket <= waited_) return;
        // The copy stream is in order: this copy's event covers every copy queued before it.
        cudaEvent_t done = copy_done_[ticket % kMaxQueuedCopies];
        check(cudaEventSynchronize(done), "copy stream");
        waited_ = ticket;
        if (waited_ == queued_) {  // the batch has landed
            float ms = 0;
            check(cudaEventElapsedTime(&ms, batch_start_, done), "cudaEventElapsedTime");
            copy_busy_ms_ += ms;
        }
    }
    DeviceEvent copy_event(uint64_t ticket) const override {
        BG_CHECK(ticket > 0 && ticket <= queued_);
        return {copy_done_[ticket % kMaxQueuedCopies]};
    }
    double copy_busy_ms() const override { return copy_busy_ms_; }
    bool device_is_host_addressable() const override { return false; }
    uint64_t device_used_bytes() const override {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
        const uint64_t used = total_b - free_b;
        return used > baseline_used_ ? used - baseline_used_ : 0;
    }

private:
    // Queues one copy (issue() puts it on copy_stream_) as the next ticket, with its landing event.
    template <class Issue>
    uint64_t enqueue(Issue&& issue) {
        BG_CHECK(queued_ - waited_ < static_cast<uint64_t>(kMaxQueuedCopies));
        if (queued_ == waited_) check(cudaEventRecord(batch_start_, copy_stream_), "cudaEventRecord");  // a batch begins
        issue();
        const uint64_t ticket = ++queued_;
        check(cudaEventRecord(copy_done_[ticket % kMaxQueuedCopies], copy_stream_), "cudaEventRecord");
        return ticket;
    }
    static cudaMemcpyKind cuda_kind(CopyKind kind) {
        return kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
               : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                 : cudaMemcpyDeviceToDevice;
    }
    int device_ = 0;
    std::unique_ptr<SmPartition> partition_;  // the context this backend's work runs in
    cudaStream_t copy_stream_ = nullptr;
    cudaEvent_t copy_done_[kMaxQueuedCopies] = {};  // [ticket % kMaxQueuedCopies]
    // copy_async and wait_copy belong to one thread (the store's streamer); copy() may come from
    // others (Engram, promotion) and shares the stream, not this bookkeeping.
    uint64_t queued_ = 0, waited_ = 0;              // tickets issued and known landed
    cudaEvent_t batch_start_ = nullptr;             // recorded when a copy is queued on an idle queue
    double copy_busy_ms_ = 0;
    uint64_t baseline_used_ = 0;  // other processes' and the context's memory at start
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, int sm_limit, bool chained_launches) {
    return std::make_unique<CudaBackend>(device, sm_limit, chained_launches);
}

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

PcieBesideReads probe_pcie_beside_reads(uint64_t bytes, int copies, FunctionRef<uint64_t()> read_pass, int device) {
    BG_CHECK(bytes > 0 && copies >= 1);
    check(cudaSetDevice(device), "cudaSetDevice");
    void* d = nullptr;
    void* pinned = nullptr;
    check(cudaMalloc(&d, bytes), "cudaMalloc");
    check(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(pinned, 1, bytes);
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    // One copy and one pass first, untimed: the path and the caller's threads warm up.
    check(cudaMemcpyAsync(d, pinned, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    (void)read_pass();
    PcieBesideReads r;
    check(cudaEventRecord(a, s), "cudaEventRecord");
    for (int i = 0; i < copies; ++i)
        check(cudaMemcpyAsync(d, pinned, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    check(cudaEventRecord(b, s), "cudaEventRecord");
    const auto t0 = std::chrono::steady_clock::now();
    cudaError_t q;
    do {
        r.read_bytes += read_pass();
    } while ((q = cudaEventQuery(b)) == cudaErrorNotReady);
    check(q, "cudaEventQuery");
    const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    r.copied_bytes = bytes * static_cast<uint64_t>(copies);
    r.pinned_gb_s = static_cast<double>(r.copied_bytes) / (static_cast<double>(ms) * 1e6);
    r.read_gb_s = static_cast<double>(r.read_bytes) / read_s / 1e9;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
    cudaFree(d);
    cudaFreeHost(pinned);
    return r;
}

}  // namespace bg::cuda
