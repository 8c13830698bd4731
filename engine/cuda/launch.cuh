// Kernel launches of the op families, chained where the device allows (programmatic dependent
// launch, compute capability 9.0 and later). A decode layer is about 55 kernels in a row on one
// stream, most of them a few microseconds long; launched plainly, each starts about 1.1 us after
// the one before it ends (70 us a layer of device idle in 8df53a9's H100 trace). Chained, the
// next kernel's blocks are placed while this one runs and start the moment it ends.
//
// The contract: every kernel launch_kernel launches begins with grid_dependency_begin(), before
// it reads or writes any memory. Its wait returns once the kernel before it on the stream has
// ended and its writes are visible, so a chained kernel sees exactly what a plain launch would;
// only then does it let the next kernel's blocks be placed, so at most two kernels of a stream
// are resident at once and the waiting one never holds back blocks of the one it waits for.
// Work other than a kernel before or after (a copy, an event, a cuBLAS kernel launched plainly)
// orders as it always does. tests/test_cuda_launch_contract.cpp checks every kernel of
// engine/cuda against this contract. On older devices the attribute is left off and the
// instructions are compiled out: the same launches, unchained (sm_86 keeps this path).
#pragma once

#include <cstddef>
#include <utility>

#include <cuda_runtime.h>

namespace bg::cuda {

__device__ __forceinline__ void grid_dependency_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches on the current device are chained: allowed (the default), and its compute
// capability is 9.0 or more (a fact of the hardware, looked up once per device).
bool chained_launches();
// --chained-launches off: every launch plain, for comparing the two on one machine. One setting
// for the process, as its CUDA context is one: the op launchers see only a stream. The backend
// sets it once at creation, before any kernel is launched.
void allow_chained_launches(bool allowed);

// Launches kernel<<<grid, block, smem, stream>>>(args...), chained where chained_launches().
// Returns the launch's error (the caller checks it, so a failure names the caller's line).
template <typename... Params, typename... Args>
[[nodiscard]] cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                        cudaStream_t stream, Args&&... args) {
    cudaLaunchAttribute chain[1];
    chain[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    chain[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = chain;
    cfg.numAttrs = chained_launches() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace bg::cuda
