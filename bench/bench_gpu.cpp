// Micro-benchmarks of the GPU expert path:
//  - one routed expert at MXFP4 (gate and up projections, SwiGLU, down projection) through
//    bg::cuda::matmul, i.e. dequantise to F32 then SGEMM, at device scale (n_embd 1024, n_ff 768)
//    and full scale (5120 x 2304), for M = 1, 3, 16, 64 tokens; counters: GB/s of MXFP4 weight
//    bytes consumed and GFLOP/s of the three products;
//  - host-to-device copies of one expert's bytes (1.25 MB at device scale, 18.8 MB at full
//    scale) from page-locked and from pageable memory; counter: GB/s.
// Times are GPU times (CUDA events) for the expert and wall times around copy + stream sync for
// the copies, reported as manual time. Exits 0 with a message where no GPU is present.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/dequant.cuh"
#include "cuda/ops.cuh"
#include "tensor/ggml_types.h"

namespace {

using namespace bg;

// Random MXFP4 blocks with scale bytes near 2^0, so every value is finite and the products
// stay in range; the codes themselves are uniform.
std::vector<uint8_t> random_mxfp4(int64_t rows, int64_t cols, std::mt19937& rng) {
    const uint64_t bytes = row_bytes(GgmlType::MXFP4, cols) * static_cast<uint64_t>(rows);
    std::vector<uint8_t> v(bytes);
    std::uniform_int_distribution<int> byte(0, 255), scale(120, 130);
    for (uint64_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i % 17 == 0 ? scale(rng) : byte(rng));
    return v;
}

template <typename T>
T* device_copy(const std::vector<T>& h) {
    T* d = nullptr;
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), h.size() * sizeof(T)));
    BG_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

void BM_ExpertMxfp4(benchmark::State& state) {
    const int64_t E = state.range(0), F = state.range(1), M = state.range(2);
    std::mt19937 rng(1234);
    uint8_t* gate = device_copy(random_mxfp4(F, E, rng));  // [F] rows of E
    uint8_t* up = device_copy(random_mxfp4(F, E, rng));    // [F] rows of E
    uint8_t* down = device_copy(random_mxfp4(E, F, rng));  // [E] rows of F
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> xh(static_cast<size_t>(M * E));
    for (auto& v : xh) v = u(rng);
    float* x = device_copy(xh);  // [M][E]
    float *g = nullptr, *upo = nullptr, *h = nullptr, *y = nullptr;
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&g), M * F * sizeof(float)));    // [M][F]
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&upo), M * F * sizeof(float)));  // [M][F]
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&h), M * F * sizeof(float)));    // [M][F]
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&y), M * E * sizeof(float)));    // [M][E]
    const cuda::DeviceMat Wg{gate, GgmlType::MXFP4, E, F, row_bytes(GgmlType::MXFP4, E)};
    const cuda::DeviceMat Wu{up, GgmlType::MXFP4, E, F, row_bytes(GgmlType::MXFP4, E)};
    const cuda::DeviceMat Wd{down, GgmlType::MXFP4, F, E, row_bytes(GgmlType::MXFP4, F)};
    const double weight_bytes = static_cast<double>(Wg.row_stride * F + Wu.row_stride * F + Wd.row_stride * E);

    cuda::MatmulContext ctx;
    cudaStream_t s = nullptr;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    BG_CUDA_CHECK(cudaStreamCreate(&s));
    BG_CUDA_CHECK(cudaEventCreate(&t0));
    BG_CUDA_CHECK(cudaEventCreate(&t1));
    const auto expert = [&] {
        cuda::matmul(ctx, Wg, x, E, M, g, F, s);
        cuda::matmul(ctx, Wu, x, E, M, upo, F, s);
        cuda::swiglu(g, upo, M * F, 10.0f, cpu::SwigluClamp::kDeepSeek, h, s);
        cuda::matmul(ctx, Wd, h, F, M, y, E, s);
    };
    expert();  // first call: cuBLAS picks and loads its kernels
    BG_CUDA_CHECK(cudaStreamSynchronize(s));

    double total_s = 0;
    for (auto _ : state) {
        BG_CUDA_CHECK(cudaEventRecord(t0, s));
        expert();
        BG_CUDA_CHECK(cudaEventRecord(t1, s));
        BG_CUDA_CHECK(cudaEventSynchronize(t1));
        float ms = 0;
        BG_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        state.SetIterationTime(ms / 1e3);
        total_s += ms / 1e3;
    }
    const double iters = static_cast<double>(state.iterations());
    state.counters["weight_GB/s"] = weight_bytes * iters / total_s / 1e9;
    state.counters["GFLOP/s"] = 2.0 * static_cast<double>(M) * 3.0 * static_cast<double>(E) * static_cast<double>(F) *
                                iters / total_s / 1e9;

    BG_CUDA_CHECK(cudaEventDestroy(t0));
    BG_CUDA_CHECK(cudaEventDestroy(t1));
    BG_CUDA_CHECK(cudaStreamDestroy(s));
    for (void* p : {static_cast<void*>(gate), static_cast<void*>(up), static_cast<void*>(down), static_cast<void*>(x),
                    static_cast<void*>(g), static_cast<void*>(upo), static_cast<void*>(h), static_cast<void*>(y)})
        BG_CUDA_CHECK(cudaFree(p));
}

void BM_HostToDevice(benchmark::State& state) {
    const bool pinned = state.range(0) != 0;
    const size_t bytes = static_cast<size_t>(state.range(1));
    uint8_t* host = nullptr;
    std::vector<uint8_t> pageable;
    if (pinned) {
        BG_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host), bytes));
    } else {
        pageable.resize(bytes);
        host = pageable.data();
    }
    std::memset(host, 0x5a, bytes);  // touch every page before timing
    uint8_t* dev = nullptr;
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dev), bytes));
    cudaStream_t s = nullptr;
    BG_CUDA_CHECK(cudaStreamCreate(&s));
    BG_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
    BG_CUDA_CHECK(cudaStreamSynchronize(s));

    double total_s = 0;
    for (auto _ : state) {
        const auto a = std::chrono::steady_clock::now();
        BG_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
        BG_CUDA_CHECK(cudaStreamSynchronize(s));
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
        state.SetIterationTime(sec);
        total_s += sec;
    }
    state.counters["GB/s"] = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / total_s / 1e9;

    BG_CUDA_CHECK(cudaStreamDestroy(s));
    BG_CUDA_CHECK(cudaFree(dev));
    if (pinned) BG_CUDA_CHECK(cudaFreeHost(host));
}

// One expert's three MXFP4 matrices: 3 * n_embd * n_ff * 17/32 bytes.
constexpr int64_t kDeviceExpertBytes = 3 * 1024 * 768 / 32 * 17;    // 1,253,376
constexpr int64_t kFullExpertBytes = 3 * 5120 * 2304 / 32 * 17;     // 18,800,640

BENCHMARK(BM_ExpertMxfp4)
    ->ArgNames({"n_embd", "n_ff", "M"})
    ->ArgsProduct({{1024}, {768}, {1, 3, 16, 64}})
    ->ArgsProduct({{5120}, {2304}, {1, 3, 16, 64}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_HostToDevice)
    ->ArgNames({"pinned", "bytes"})
    ->ArgsProduct({{1, 0}, {kDeviceExpertBytes, kFullExpertBytes}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
    if (bg::cuda::device_count() == 0) {
        std::fprintf(stderr, "bench_gpu: no CUDA device, nothing to measure\n");
        return 0;
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
