// Small copies as kernels: Ops::upload, download, copy and copy_rows of a few kilobytes, where
// the copy engine costs more than the bytes. A decode layer queues a 20 KB download of its MoE
// input and a 16-byte row copy between its MoE norm and its router; through the copy engine the
// download ended 8.3 us after the norm and the row copy 6.2 us after that (c9ed0e0's H100 trace),
// each a transition between the SMs and a copy engine. As kernels they chain like every other
// launch (launch.cuh) and write host memory through its mapped address (alloc_host memory), the
// way the grouping's host copy does.
#include <cstdint>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/cuda_ops.cuh"
#include "cuda/launch.cuh"
#include "cuda/ops.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

// W-byte words (16, 4 or 1) from src to dst, n_words of them, both W-byte aligned.
template <typename Word>
__global__ void copy_words_kernel(Word* dst, const Word* src, int64_t n_words) {
    grid_dependency_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_words;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        dst[i] = src[i];
}

// rows of width floats: dst[r*ld_dst + c] = src[r*ld_src + c]. Grid: x over columns, y over rows.
__global__ void copy_rows_kernel(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t width,
                                 int64_t rows) {
    grid_dependency_begin();
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= width) return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) dst[r * ld_dst + c] = src[r * ld_src + c];
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

template <typename Word>
void launch_words(void* dst, const void* src, uint64_t bytes, cudaStream_t stream) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(Word));
    BG_CUDA_CHECK(launch_kernel(copy_words_kernel<Word>, blocks_for(n), kThreads, 0, stream, static_cast<Word*>(dst),
                                static_cast<const Word*>(src), n));
}

}  // namespace

void copy_bytes(void* dst, const void* src, uint64_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    BG_CHECK(dst && src && bytes <= kKernelCopyMaxBytes);
    // The widest word both ends and the length allow: 16-byte words are one load and one store a
    // thread (a 20 KB row: 1280 threads).
    if (aligned(dst, 16) && aligned(src, 16) && bytes % 16 == 0)
        launch_words<uint4>(dst, src, bytes, stream);
    else if (aligned(dst, 4) && aligned(src, 4) && bytes % 4 == 0)
        launch_words<uint32_t>(dst, src, bytes, stream);
    else
        launch_words<uint8_t>(dst, src, bytes, stream);
}

void copy_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t width, int64_t rows,
               cudaStream_t stream) {
    if (width <= 0 || rows <= 0) return;
    BG_CHECK(dst && src && ld_dst >= width && ld_src >= width);
    BG_CUDA_CHECK(launch_kernel(copy_rows_kernel, rows_grid(width, rows), kThreads, 0, stream, dst, ld_dst, src, ld_src,
                                width, rows));
}

}  // namespace bg::cuda
