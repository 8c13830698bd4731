// The CUDA backend of the store: device pools in VRAM (cudaMalloc), page-locked host pools
// (cudaHostAlloc), and copies on a dedicated copy stream so they overlap compute on another.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "util/function_ref.h"

namespace bg::cuda {

// Throws bg::Error when no device is present or an allocation fails (with the size), or when
// `sm_limit` > 0 cannot be honoured (engine/cuda/sm_limit.cuh). Leaves the backend's context (a
// green context of sm_limit SMs, else the device's primary context) current on the calling
// thread; other threads call Backend::bind_thread() before they use CUDA. chained_launches: the
// process's kernel launches chained where the device has them (engine/cuda/launch.cuh).
std::unique_ptr<Backend> make_cuda_backend(int device = 0, int sm_limit = 0, bool chained_launches = true);

// Host-to-device copy bandwidth from page-locked and from pageable memory, in GB/s (1e9 B/s),
// each the best of `reps` copies of `bytes`.
struct PcieProbe {
    double pinned_gb_s = 0;
    double pageable_gb_s = 0;
    uint64_t bytes = 0;
    std::string device_name;
};
PcieProbe probe_pcie(uint64_t bytes, int reps, int device = 0);

// Host-to-device copies from page-locked memory while the host's cores read memory: a decode
// step's host-resident experts take both paths at once, and they share the host's memory, so
// the two probes taken apart need not add up. `copies` copies of `bytes` are queued back to back;
// read_pass() reads host memory once (the caller's threads) and returns the bytes it read, called
// until the copies end. Each rate over its own window (the copies' events, the passes' clock).
struct PcieBesideReads {
    double pinned_gb_s = 0;  // the copies, with the reads beside them
    double read_gb_s = 0;    // the reads, with the copies beside them
    uint64_t copied_bytes = 0, read_bytes = 0;
};
PcieBesideReads probe_pcie_beside_reads(uint64_t bytes, int copies, FunctionRef<uint64_t()> read_pass,
                                        int device = 0);

}  // namespace bg::cuda
