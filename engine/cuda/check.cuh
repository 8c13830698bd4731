// Error checks for CUDA runtime and cuBLAS calls. A failing call on the compute path is a bug or
// a dead device, never something to recover from, so these abort at once with file, line, the
// failing expression and the library's own description of the error.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace bg::cuda {

[[noreturn]] inline void call_failed(const char* file, int line, const char* expr, const char* lib,
                                     const char* what) {
    std::fprintf(stderr, "%s:%d: %s call failed: %s: %s\n", file, line, lib, expr, what);
    std::fflush(stderr);
    std::abort();
}

}  // namespace bg::cuda

#define BG_CUDA_CHECK(expr)                                                                   \
    do {                                                                                      \
        const cudaError_t bg_cuda_err_ = (expr);                                              \
        if (__builtin_expect(bg_cuda_err_ != cudaSuccess, 0))                                 \
            ::bg::cuda::call_failed(__FILE__, __LINE__, #expr, "CUDA", cudaGetErrorString(bg_cuda_err_)); \
    } while (0)

#define BG_CUBLAS_CHECK(expr)                                                                 \
    do {                                                                                      \
        const cublasStatus_t bg_cublas_st_ = (expr);                                          \
        if (__builtin_expect(bg_cublas_st_ != CUBLAS_STATUS_SUCCESS, 0))                      \
            ::bg::cuda::call_failed(__FILE__, __LINE__, #expr, "cuBLAS", cublasGetStatusString(bg_cublas_st_)); \
    } while (0)

// After a kernel launch: catches a bad launch configuration (the kernel's own faults surface at
// the next synchronising call).
#define BG_CUDA_CHECK_LAUNCH() BG_CUDA_CHECK(cudaGetLastError())
