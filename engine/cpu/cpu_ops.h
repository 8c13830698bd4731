// The CPU backend's ops: the CPU kernels (cpu/ops.h) over host memory, run at once on the
// calling thread and the thread pool, so every op has run when it returns and sync is free.
#pragma once

#include <memory>

#include "backend/device.h"
#include "backend/ops.h"
#include "cpu/thread_pool.h"

namespace bg::cpu {

std::unique_ptr<Ops> make_cpu_ops(ThreadPool& pool);

// Host bytes the CPU ops hold once reserve(lim) ran: attention rows and scores, router scratch,
// the routed expert's gathered input, gate, up, hidden and output.
uint64_t ops_host_bytes(const OpsLimits& lim);
// Of those, the int8 activations of the largest integer-path matmul (values; 0 in precise mode).
int64_t int8_scratch_values(const OpsLimits& lim);

// The CPU device: the host-memory backend (cpu_backend.cpp) and these ops.
DeviceFactory& cpu_device();

}  // namespace bg::cpu
