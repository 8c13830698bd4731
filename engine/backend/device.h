// What a compute device contributes to a session: its backend (pools and copies for the stores)
// and its ops (for the forward pass). The CPU one is built in (cpu/cpu_device.h); the CUDA build
// provides another (cuda/cuda_device.cuh), so the runtime never depends on CUDA.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/ops.h"

namespace bg {

namespace cpu {
class ThreadPool;
}

class DeviceFactory {
public:
    virtual ~DeviceFactory() = default;
    virtual const char* name() const = 0;
    // Whether the device keeps the model's dense weights in its own memory (loaded from the
    // file), so the host keeps only what it reads (dsv41::DenseHome::kDevice).
    virtual bool dense_on_device() const { return false; }
    // Throws bg::Error for an option the device cannot honour (an SM limit off a GPU).
    virtual std::unique_ptr<Backend> make_backend(const BackendOptions& opts) = 0;
    // The ops the forward pass runs on (the CPU's use the thread pool).
    virtual std::unique_ptr<Ops> make_ops(cpu::ThreadPool& pool) = 0;
};

}  // namespace bg
