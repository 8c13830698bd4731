// The small interface the expert streamer talks to: buffers and copies, not kernels.
// The CPU backend's "device" is a separate arena in host memory with its own budget; a copy
// into it is counted as PCIe traffic exactly as a host-to-device copy on a GPU would be.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/sm_limit.h"
#include "backend/types.h"

namespace bg {

// What a backend is made with (from the run's configuration).
struct BackendOptions {
    int sm_limit = 0;  // --sm-limit: run on this many SMs (rounded down to what the GPU allows); 0: all
    bool chained_launches = true;  // --chained-launches: where the device has them (cuda/launch.cuh)
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;
    // Start-up allocations only. Host memory is page-locked where the backend supports it.
    virtual uint8_t* alloc_device(uint64_t bytes) = 0;
    virtual void free_device(uint8_t* p) = 0;
    virtual uint8_t* alloc_host(uint64_t bytes) = 0;
    virtual void free_host(uint8_t* p) = 0;
    // Copies on the backend's copy engine; returns when the bytes are in place.
    virtual void copy(uint8_t* dst, const uint8_t* src, uint64_t bytes, CopyKind kind) = 0;
    // Queues a copy on the copy engine and returns a ticket at once, so a batch of copies runs
    // back to back instead of paying a host round trip each; wait_copy(ticket) returns when that
    // copy (and every one queued before it) has landed. At most kMaxQueuedCopies may be queued
    // and not yet waited for.
    static constexpr int kMaxQueuedCopies = 64;
    virtual uint64_t copy_async(uint8_t* dst, const uint8_t* src, uint64_t bytes, CopyKind kind) = 0;
    // copy_async of `rows` rows of `width` bytes, row i from src + i * src_pitch to dst + i *
    // dst_pitch, as one copy and one ticket (on a GPU one 2D copy): a matrix's columns, such as
    // the down projection's share of an expert split between the CPU and the GPU.
    virtual uint64_t copy_rows_async(uint8_t* dst, uint64_t dst_pitch, const uint8_t* src, uint64_t src_pitch,
                                     uint64_t width, uint64_t rows, CopyKind kind) = 0;
    virtual void wait_copy(uint64_t ticket) = 0;
    // An event that passes once copy `ticket` has landed, for a compute queue to wait for on the
    // device (Ops::wait_event) instead of the host waiting: what was queued behind it starts as
    // the bytes land. Events are reused round robin: kMaxQueuedCopies copies later the same
    // event stands for a later copy, which the copy engine lands after this one, so a wait on it
    // is still a correct one, only longer. Empty where copy_async returns with the bytes in place
    // (the CPU arena).
    virtual DeviceEvent copy_event(uint64_t ticket) const {
        (void)ticket;
        return {};
    }
    // Milliseconds the copy engine spent on queued copies, from events around each batch (first
    // copy queued on an idle queue to the last one landed), as the pinned-copy probe times its
    // copies; < 0 where the backend has no such clock (the CPU arena).
    virtual double copy_busy_ms() const { return -1.0; }
    // Device memory the driver reports as used by this process (0 when unknown).
    virtual uint64_t device_used_bytes() const = 0;
    // Whether the CPU can read device memory directly (the CPU backend's arena).
    virtual bool device_is_host_addressable() const = 0;
    // Makes the backend's device context current on the calling thread. Every thread other than
    // the one that made the backend calls it before its first call into the backend or the
    // device (a GPU with an SM limit runs its work in a context of its own).
    virtual void bind_thread() {}
    // The SMs the backend's work may use (all zeros where there are none: the CPU).
    virtual SmLimit sm_limit() const { return {}; }
    // Whether kernels are launched chained (BackendOptions::chained_launches where the device has them).
    virtual bool chained_launches() const { return false; }
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace bg
