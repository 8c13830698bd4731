// --sm-limit on the GPU: the SMs a backend's work may use, held by a CUDA green context (driver
// API, CUDA 12.4+, its entry points looked up through the runtime so that nothing links
// libcuda). A green context is made from a split of the device's SMs; converted with
// cuCtxFromGreenCtx and made current on a thread, every runtime call of that thread (streams,
// allocations, cuBLAS, kernel launches) uses it: a stream created while it is current belongs to
// it (cuStreamGetGreenCtx), and kernels on such a stream run on its SMs only.
//
// cudaSetDevice makes the device's primary context (all SMs) current again, so nothing on a
// bound thread may call it afterwards; threads the engine starts call bind_thread() (through
// Backend::bind_thread) before they touch CUDA.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <vector>

#include "backend/sm_limit.h"

namespace bg::cuda {

class SmPartition {
public:
    // requested <= 0: no limit (the primary context). Otherwise the largest SM count <= requested
    // that the device can partition, in a green context. Throws bg::Error where the GPU or driver
    // cannot partition its SMs, or the request is below the smallest partition. Makes no context
    // current: call bind_thread().
    SmPartition(int device, int requested);
    ~SmPartition();
    SmPartition(const SmPartition&) = delete;
    SmPartition& operator=(const SmPartition&) = delete;

    const SmLimit& limit() const { return limit_; }
    bool green() const { return green_ != nullptr; }

    // Makes this partition's context current on the calling thread: the green context's, or the
    // device's primary context (cudaSetDevice) when there is no partition. Aborts with the
    // driver's message on failure (a dead device).
    void bind_thread() const;

    // Whether work enqueued on `s` runs in this partition: the stream's green context is ours
    // (cuStreamGetGreenCtx); without a partition, whether it belongs to no green context.
    bool owns(cudaStream_t s) const;

private:
    int device_ = 0;
    SmLimit limit_;
    CUgreenCtx green_ = nullptr;
    CUcontext ctx_ = nullptr;      // green_ as a CUcontext (cuCtxFromGreenCtx)
    CUcontext primary_ = nullptr;  // the device's primary context, restored on a bound thread at destruction
};

// The green context a stream belongs to (cuStreamGetGreenCtx: the one current when the stream
// was made), null when none.
CUgreenCtx green_context_of(cudaStream_t s);
// The SMs the calling thread's current context may use: its green context's under --sm-limit,
// else the device's (kernels size their grids from it, so a limited run is tuned for its SMs).
int current_sm_count();
// The SMs a green context holds (cuGreenCtxGetDevResource).
int sm_count_of(CUgreenCtx g);

// Diagnostics (tests): launches `blocks` blocks on `stream`, each spinning for `spin_us`
// microseconds so that the scheduler spreads them over every SM it may use, and recording the
// SM it ran on (%smid). Returns the distinct SM ids seen, sorted.
std::vector<int> sms_seen(cudaStream_t stream, int blocks, int spin_us = 50);

}  // namespace bg::cuda
