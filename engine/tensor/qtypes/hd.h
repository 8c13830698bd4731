// Functions of the weight-type traits are compiled by the host compiler (CPU kernels, tests)
// and by nvcc (CUDA kernels) from one definition, so both backends decode a block the same way.
#pragma once

#ifdef __CUDACC__
#define BG_HD __host__ __device__ __forceinline__
#else
#define BG_HD inline
#endif
