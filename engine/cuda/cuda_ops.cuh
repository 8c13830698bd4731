// The CUDA backend's ops: the kernels of engine/cuda/ops.cuh, each enqueued on one compute
// stream in call order; copies on the same stream; fences and busy brackets are events on it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "backend/ops.h"

namespace bg::cuda {

// On the current device. Aborts when there is no device or memory runs out.
std::unique_ptr<Ops> make_cuda_ops();

// Uploads, downloads and device copies of at most this many bytes go by kernel (small_copy.cu)
// where both ends have device addresses: device memory, and alloc_host memory through its
// mapped address. Longer ones, and those from or to other host memory, take the copy engine.
constexpr uint64_t kKernelCopyMaxBytes = 64 * 1024;

// The one stream the CUDA ops enqueue their work on (tests: what runs there, and in which
// context). `ops` must come from make_cuda_ops.
cudaStream_t compute_stream(Ops& ops);

}  // namespace bg::cuda
