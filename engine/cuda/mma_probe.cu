#include "cuda/mma_probe.cuh"

#include <algorithm>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/sm_limit.cuh"

namespace bg::cuda {

namespace {

constexpr int kChains = 4;       // independent accumulator chains per warp (hides MMA latency)
constexpr int kIters = 4096;

// Each chain accumulates into its own registers (D = A.B + D), so the chains are independent
// and only the tensor cores' rate bounds the loop.
__global__ void mma_peak_kernel(int seed, int* sink) {
    const int a0 = seed, a1 = seed + 1, a2 = seed + 2, a3 = seed + 3, b0 = seed * 3, b1 = seed * 5;
    int acc[kChains][4] = {};
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
        for (int c = 0; c < kChains; ++c)
            asm volatile(
                "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%0,%1,%2,%3};\n"
                : "+r"(acc[c][0]), "+r"(acc[c][1]), "+r"(acc[c][2]), "+r"(acc[c][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    int s = 0;
#pragma unroll
    for (int c = 0; c < kChains; ++c)
#pragma unroll
        for (int j = 0; j < 4; ++j) s ^= acc[c][j];
    if (s == 0x7fffffff) sink[0] = s;
}

}  // namespace

double int8_mma_peak_tops() {
    const int sms = current_sm_count();
    int* sink = nullptr;
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(int)));
    cudaEvent_t t0, t1;
    BG_CUDA_CHECK(cudaEventCreate(&t0));
    BG_CUDA_CHECK(cudaEventCreate(&t1));
    const int blocks = sms * 4, threads = 256;
    mma_peak_kernel<<<blocks, threads>>>(1, sink);  // warm-up
    BG_CUDA_CHECK_LAUNCH();
    std::vector<double> tops;
    for (int r = 0; r < 5; ++r) {
        BG_CUDA_CHECK(cudaEventRecord(t0));
        mma_peak_kernel<<<blocks, threads>>>(r + 2, sink);
        BG_CUDA_CHECK(cudaEventRecord(t1));
        BG_CUDA_CHECK(cudaEventSynchronize(t1));
        float ms = 0;
        BG_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        const double ops = 2.0 * 16 * 8 * 32 * static_cast<double>(kChains) * kIters * (blocks * threads / 32);
        tops.push_back(ops / (ms / 1e3) / 1e12);
    }
    BG_CUDA_CHECK(cudaEventDestroy(t0));
    BG_CUDA_CHECK(cudaEventDestroy(t1));
    BG_CUDA_CHECK(cudaFree(sink));
    std::sort(tops.begin(), tops.end());
    return tops[tops.size() / 2];
}

}  // namespace bg::cuda
