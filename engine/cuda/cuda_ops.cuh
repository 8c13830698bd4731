// The CUDA backend's ops: the kernels of engine/cuda/ops.cuh, each enqueued on one compute
// stream in call order; copies on the same stream; fences and busy brackets are events on it.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "backend/ops.h"

namespace bg::cuda {

// On the current device. Aborts when there is no device or memory runs out.
std::unique_ptr<Ops> make_cuda_ops();

// The one stream the CUDA ops enqueue their work on (tests: what runs there, and in which
// context). `ops` must come from make_cuda_ops.
cudaStream_t compute_stream(Ops& ops);

}  // namespace bg::cuda
