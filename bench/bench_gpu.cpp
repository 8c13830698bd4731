// Micro-benchmarks of the GPU expert path:
//  - a device-to-device copy probe (512 MiB, CUDA events, median of 20): the device-memory
//    bandwidth every "x_floor" counter below is measured against, in the same run;
//  - one routed expert at MXFP4 (gate and up projections, SwiGLU, down projection) through
//    bg::cuda::matmul, i.e. dequantise to F32 then SGEMM, at device scale (n_embd 1024, n_ff 768)
//    and full scale (5120 x 2304), for M = 1, 3, 16, 64 tokens; counters: GB/s of MXFP4 weight
//    bytes consumed and GFLOP/s of the three products (the baseline of issue #14);
//  - the fused kernels of engine/cuda/quant_matmul.cuh: the expert FFN (BM_ExpertFused, MXFP4,
//    Q8_0, BF16 at full width) and dense matrices of the model's shapes in Q8_0 and BF16
//    (BM_DenseFused; BM_DenseSgemm is the same through bg::cuda::matmul); every call reads a
//    different copy of the weights in turn, at least 3 x 60 MB (H200's L2: 60 MB) apart, so
//    the weights come from device memory; counters: us (median per call), GB/s of weight
//    bytes, floor_us = weight bytes / measured D2D bandwidth, x_floor = us / floor_us;
//  - host-to-device copies of one expert's bytes (1.25 MB at device scale, 18.8 MB at full
//    scale) from page-locked and from pageable memory; counter: GB/s.
// Times are GPU times (CUDA events) for the kernels and wall times around copy + stream sync for
// the copies, reported as manual time. Exits 0 with a message where no GPU is present.
//  - the integer kernels of engine/cuda/int8_matmul.cuh (`--matmul fast`): the expert FFN
//    (BM_ExpertInt8) and the dense shapes (BM_DenseInt8), with the counters above and mma_us,
//    the int8 MMA work over the peak measured in this run by a register-only mma.sync probe,
//    and x_bound = us / max(floor_us, mma_us);
//  - a decode layer's routing (BM_RoutingDecode): the router's walk and the grouping of its
//    slots, with L2 evicted before each sample or not; counter us; and its GEMV
//    (BM_RoutingGemvF32: 384 x 5120 F32, the chained kernel or cuBLAS), with floor_us.
// Filters: --benchmark_filter=Fused (only the new kernels), =D2D, =Expert, =Dense, =Routing.
// --sm-limit N (ours, taken out before Google Benchmark reads the rest): every benchmark runs in
// a green context of N SMs (rounded down to what the GPU can partition; the count used is
// printed and recorded in the output's context as "sm_limit"); 0 or absent: all SMs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/dequant.cuh"
#include "cuda/ops.cuh"
#include "cuda/int8_matmul.cuh"
#include "cuda/mma_probe.cuh"
#include "cuda/quant_matmul.cuh"
#include "cuda/sm_limit.cuh"
#include "tensor/ggml_types.h"
#include "util/build_info.h"
#include "util/check.h"

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

// Seconds on the device of what work() queues on s, between two events (waited for here).
template <typename F>
double device_seconds(cudaStream_t s, cudaEvent_t t0, cudaEvent_t t1, F work) {
    BG_CUDA_CHECK(cudaEventRecord(t0, s));
    work();
    BG_CUDA_CHECK(cudaEventRecord(t1, s));
    BG_CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    BG_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    return ms / 1e3;
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
        cuda::swiglu(g, upo, M * F, 10.0f, bg::SwigluClamp::kDeepSeek, h, s);
        cuda::matmul(ctx, Wd, h, F, M, y, E, s);
    };
    expert();  // first call: cuBLAS picks and loads its kernels
    BG_CUDA_CHECK(cudaStreamSynchronize(s));

    double total_s = 0;
    for (auto _ : state) {
        const double sec = device_seconds(s, t0, t1, expert);
        state.SetIterationTime(sec);
        total_s += sec;
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

// ---------------------------------------------------------------------------------------------
// Device-memory bandwidth, measured once per run (main) and by BM_D2DCopy.

double g_d2d_gbs = 0;  // bytes read + written per second / 1e9, median
double g_int8_tops = 0;  // int8 mma.sync peak of this GPU, measured in main

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Median seconds of `reps` timed copies of `bytes` between two device buffers (after 3 warm-up
// copies).
std::vector<double> d2d_times(size_t bytes, int reps) {
    uint8_t *a = nullptr, *b = nullptr;
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&a), bytes));
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b), bytes));
    BG_CUDA_CHECK(cudaMemset(a, 0x5a, bytes));  // never time copies of untouched memory
    BG_CUDA_CHECK(cudaMemset(b, 0xa5, bytes));
    cudaStream_t s = nullptr;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    BG_CUDA_CHECK(cudaStreamCreate(&s));
    BG_CUDA_CHECK(cudaEventCreate(&t0));
    BG_CUDA_CHECK(cudaEventCreate(&t1));
    for (int i = 0; i < 3; ++i) BG_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    std::vector<double> times;
    for (int i = 0; i < reps; ++i)
        times.push_back(device_seconds(s, t0, t1, [&] {
            BG_CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, s));
        }));
    BG_CUDA_CHECK(cudaEventDestroy(t0));
    BG_CUDA_CHECK(cudaEventDestroy(t1));
    BG_CUDA_CHECK(cudaStreamDestroy(s));
    BG_CUDA_CHECK(cudaFree(a));
    BG_CUDA_CHECK(cudaFree(b));
    return times;
}

constexpr size_t kD2DBytes = size_t{512} << 20;

void BM_D2DCopy(benchmark::State& state) {
    const size_t bytes = static_cast<size_t>(state.range(0));
    std::vector<double> all;
    for (auto _ : state) {
        const std::vector<double> t = d2d_times(bytes, 5);
        state.SetIterationTime(median(t));
        all.insert(all.end(), t.begin(), t.end());
    }
    const double med = median(all);
    state.counters["us"] = med * 1e6;
    state.counters["GB/s"] = 2.0 * static_cast<double>(bytes) / med / 1e9;  // read + write
}

// ---------------------------------------------------------------------------------------------
// The fused kernels

// Random weights of a type, fast (these reach 1.3 GB): MXFP4 scale bytes 120..127, Q8_0 scales
// ~0.004 (f16), BF16 values of magnitude 2^-9..2^-2, the 256-weight types' FP16 super-scales
// ~0.004; the rest random bytes.
std::vector<uint8_t> random_weights(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) {
    const uint64_t rb = row_bytes(t, cols);
    std::vector<uint8_t> v(rb * static_cast<uint64_t>(rows));
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
    auto next = [&z] {
        z ^= z << 13;
        z ^= z >> 7;
        z ^= z << 17;
        return z;
    };
    for (size_t i = 0; i + 8 <= v.size(); i += 8) {
        const uint64_t r = next();
        std::memcpy(&v[i], &r, 8);
    }
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t* row = v.data() + static_cast<uint64_t>(r) * rb;
        if (t == GgmlType::MXFP4) {
            for (int64_t b = 0; b < cols / 32; ++b) row[b * 17] = static_cast<uint8_t>(120 + (row[b * 17] & 7));
        } else if (t == GgmlType::Q8_0) {
            for (int64_t b = 0; b < cols / 32; ++b) {
                const uint16_t d = fp32_to_fp16(0.004f + 0.001f * static_cast<float>(row[b * 34] & 3));
                std::memcpy(row + b * 34, &d, 2);
            }
        } else if (type_traits(t).block_elems == 256) {
            qtypes::visit(t, [&](auto tr) {
                using T = decltype(tr);
                if constexpr (T::kBlockWeights == 256) {
                    for (int64_t b = 0; b < cols / 256; ++b) {
                        uint8_t* blk = row + b * T::kBlockBytes;
                        const uint16_t d = fp32_to_fp16(0.004f + 0.001f * static_cast<float>(blk[T::kOffD] & 3));
                        std::memcpy(blk + T::kOffD, &d, 2);
                        if constexpr (T::kHasMin) std::memcpy(blk + T::kOffDmin, &d, 2);
                    }
                }
            });
        } else if (t == GgmlType::BF16) {
            for (int64_t i = 0; i < cols; ++i) {
                uint16_t h;
                std::memcpy(&h, row + 2 * i, 2);
                h = static_cast<uint16_t>((h & 0x807F) | ((118 + ((h >> 7) & 7)) << 7));
                std::memcpy(row + 2 * i, &h, 2);
            }
        }
    }
    return v;
}

// Copies of one weight image, enough that consecutive calls never find the weights in L2.
struct WeightSets {
    std::vector<uint8_t*> bufs;
    uint64_t bytes = 0;
    WeightSets(const std::vector<uint8_t>& image, uint64_t min_total) : bytes(image.size()) {
        const uint64_t n = std::max<uint64_t>(2, (min_total + bytes - 1) / bytes);
        for (uint64_t i = 0; i < std::min<uint64_t>(n, 32); ++i) {
            uint8_t* d = nullptr;
            BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), bytes));
            BG_CUDA_CHECK(cudaMemcpy(d, image.data(), bytes, cudaMemcpyHostToDevice));
            bufs.push_back(d);
        }
    }
    ~WeightSets() {
        for (uint8_t* p : bufs) cudaFree(p);
    }
};

constexpr uint64_t kRotateBytes = uint64_t{3} * 60 << 20;  // 3 x H200's L2
constexpr int kCallsPerSample = 16;  // calls between two events (rotating sets), time / 16

// Times `call(set)` kCallsPerSample times per sample on stream s; reports the median per call
// and the counters against `bytes` of weights per call.
// With graph: the kCallsPerSample calls are captured once into a CUDA graph and each sample
// replays it (the launch gaps between the kernels shrink; what remains is device time).
template <typename F>
void time_calls(benchmark::State& state, cudaStream_t s, size_t n_sets, double bytes, double flops, bool graph, F call) {
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    BG_CUDA_CHECK(cudaEventCreate(&t0));
    BG_CUDA_CHECK(cudaEventCreate(&t1));
    size_t set = 0;
    for (int i = 0; i < 3; ++i) call(set++ % n_sets);  // warm-up: module load, first-call setup
    BG_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraphExec_t exec = nullptr;
    if (graph) {
        cudaGraph_t g = nullptr;
        BG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < kCallsPerSample; ++i) call(set++ % n_sets);
        BG_CUDA_CHECK(cudaStreamEndCapture(s, &g));
        BG_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        BG_CUDA_CHECK(cudaGraphDestroy(g));
        BG_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up of the graph
        BG_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    std::vector<double> per_call;
    const auto sample = [&] {  // kCallsPerSample calls
        if (graph) {
            BG_CUDA_CHECK(cudaGraphLaunch(exec, s));
        } else {
            for (int i = 0; i < kCallsPerSample; ++i) call(set++ % n_sets);
        }
    };
    for (auto _ : state) {
        const double sec = device_seconds(s, t0, t1, sample) / kCallsPerSample;
        state.SetIterationTime(sec);
        per_call.push_back(sec);
    }
    BG_CUDA_CHECK(cudaEventDestroy(t0));
    BG_CUDA_CHECK(cudaEventDestroy(t1));
    if (exec) BG_CUDA_CHECK(cudaGraphExecDestroy(exec));
    const double med = median(per_call);
    const double floor_s = g_d2d_gbs > 0 ? bytes / (g_d2d_gbs * 1e9) : 0;
    state.counters["us"] = med * 1e6;
    state.counters["GB/s"] = bytes / med / 1e9;
    state.counters["TFLOP/s"] = flops / med / 1e12;
    state.counters["floor_us"] = floor_s * 1e6;
    state.counters["x_floor"] = floor_s > 0 ? med / floor_s : 0;
}

std::vector<float> random_activations(int64_t n, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = u(rng);
    return v;
}

// One full expert's weights (gate, up: F rows of E; down: E rows of F) in rotating copies, and M
// tokens gathered from M + 5 rows of x, each token's output stored into its own row of y (as the
// forward's eo).
struct ExpertBench {
    GgmlType type, down_type;  // gate and up; down (a step above in llama-quantize's mixes)
    int64_t E, F, M;
    std::vector<uint8_t> gimg, uimg, dimg;
    uint64_t bytes;
    WeightSets g, u, d;
    size_t n_sets;
    float* x;
    float* y;
    int32_t* rows;
    cudaStream_t s = nullptr;
    ExpertBench(GgmlType t, int64_t e, int64_t f, int64_t m, GgmlType down = GgmlType::F32)
        : type(t), down_type(down == GgmlType::F32 ? t : down), E(e), F(f), M(m), gimg(random_weights(t, f, e, 1)),
          uimg(random_weights(t, f, e, 2)), dimg(random_weights(down_type, e, f, 3)), bytes(gimg.size() + uimg.size() + dimg.size()),
          g(gimg, kRotateBytes * gimg.size() / bytes + 1), u(uimg, kRotateBytes * gimg.size() / bytes + 1),
          d(dimg, kRotateBytes * gimg.size() / bytes + 1),
          n_sets(std::min({g.bufs.size(), u.bufs.size(), d.bufs.size()})),
          x(device_copy(random_activations((m + 5) * e, 7))), y(device_copy(random_activations((m + 5) * e, 8))) {
        std::vector<int32_t> r(static_cast<size_t>(M));
        for (int64_t j = 0; j < M; ++j) r[j] = static_cast<int32_t>(M + 4 - j);
        rows = device_copy(r);
        BG_CUDA_CHECK(cudaStreamCreate(&s));
    }
    ~ExpertBench() {
        cudaStreamDestroy(s);
        for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(rows)}) cudaFree(p);
    }
    ExpertMats mats(size_t i) const {
        const uint64_t rbE = row_bytes(type, E), rbF = row_bytes(down_type, F);
        return {{g.bufs[i], type, E, F, rbE}, {u.bufs[i], type, E, F, rbE}, {d.bufs[i], down_type, F, E, rbF}};
    }
    double flops() const { return 2.0 * 3.0 * M * E * F; }
};

// A dense matrix of rows x cols in rotated copies (WeightSets), M random activations, y, and a
// stream: what every y = W x benchmark sets up.
struct DenseBench {
    GgmlType type;
    int64_t rows, cols, M;
    std::vector<uint8_t> img;
    WeightSets sets;
    uint64_t rb;
    float* x;
    float* y = nullptr;
    cudaStream_t s = nullptr;
    DenseBench(GgmlType t, int64_t r, int64_t c, int64_t m)
        : type(t), rows(r), cols(c), M(m), img(random_weights(t, r, c, 11)), sets(img, kRotateBytes),
          rb(row_bytes(t, c)), x(device_copy(random_activations(m * c, 12))) {
        BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&y), M * rows * sizeof(float)));
        BG_CUDA_CHECK(cudaStreamCreate(&s));
    }
    ~DenseBench() {
        cudaStreamDestroy(s);
        cudaFree(x);
        cudaFree(y);
    }
    cuda::DeviceMat mat(size_t i) const { return {sets.bufs[i], type, cols, rows, rb}; }
    double bytes() const { return static_cast<double>(img.size()); }
    double flops() const { return 2.0 * M * rows * cols; }
};

// One full expert through cuda::expert_ffn (ExpertBench).
void BM_ExpertFused(benchmark::State& state) {
    const bool graph = state.range(4) != 0;
    const bool lut = state.range(5) != 0;  // MXFP4: force the table decode
    const bool single = state.range(6) != 0;  // one activation rounding (split activations off)
    const int tiles = static_cast<int>(state.range(7));  // QuantMatmulWorkspace::set_tile_variant
    ExpertBench b(static_cast<GgmlType>(state.range(0)), state.range(1), state.range(2), state.range(3));
    cuda::QuantMatmulWorkspace ws(std::max(b.E, b.F), b.F);
    if (lut) ws.set_mxfp4_bit_decode(false);
    if (single) ws.set_split_activations(false);
    ws.set_tile_variant(tiles);
    state.counters["bit_decode"] = ws.mxfp4_bit_decode() ? 1 : 0;
    state.counters["split_x"] = ws.split_activations() ? 1 : 0;
    time_calls(state, b.s, b.n_sets, static_cast<double>(b.bytes), b.flops(), graph, [&](size_t i) {
        cuda::expert_ffn(ws, b.mats(i), b.x, b.E, b.rows, b.M, 10.0f, bg::SwigluClamp::kDeepSeek, b.y, b.E, b.rows, b.s);
    });
    state.counters["sets"] = static_cast<double>(b.n_sets);
}

// The int8 counters: the MMA work of a call (tokens rounded up to 8-token n-tiles, as the
// kernels issue it) over the measured peak, and the call against the larger of the two floors.
void int8_counters(benchmark::State& state, int64_t M, double weights) {
    const double issued = 2.0 * weights * static_cast<double>((M + 7) / 8 * 8);
    const double mma_us = g_int8_tops > 0 ? issued / (g_int8_tops * 1e12) * 1e6 : 0;
    state.counters["mma_us"] = mma_us;
    state.counters["x_bound"] = state.counters["us"] / std::max<double>(state.counters["floor_us"], mma_us);
}

// One full expert through cuda::int8_expert_ffn (the default `--matmul fast` path), as
// BM_ExpertFused.
void BM_ExpertInt8(benchmark::State& state) {
    const bool graph = state.range(4) != 0;
    // Int8Workspace::force_split (0: heuristic); -1: the heuristic with the MMA kernel at every M
    // (no GEMV for passes of 1-2 tokens), the comparison of the two kernels
    const int split = static_cast<int>(state.range(5));
    const auto down = state.range(6) ? static_cast<GgmlType>(state.range(6)) : GgmlType::F32;  // 0: the gate's type
    ExpertBench b(static_cast<GgmlType>(state.range(0)), state.range(1), state.range(2), state.range(3), down);
    cuda::Int8Workspace ws(std::max(b.E, b.F), b.F);
    ws.force_split(std::max(split, 0));
    if (split < 0) ws.set_gemv_tokens(0);
    state.counters["gemv"] = b.M <= ws.gemv_tokens() ? 1 : 0;
    time_calls(state, b.s, b.n_sets, static_cast<double>(b.bytes), b.flops(), graph, [&](size_t i) {
        cuda::int8_expert_ffn(ws, b.mats(i), b.x, b.E, b.rows, b.M, 10.0f, bg::SwigluClamp::kDeepSeek, b.y, b.E, b.rows,
                              b.s);
    });
    int8_counters(state, b.M, 3.0 * b.E * b.F);
    state.counters["sets"] = static_cast<double>(b.n_sets);
}

// y = W x through cuda::int8_matmul, as BM_DenseFused.
void BM_DenseInt8(benchmark::State& state) {
    const bool graph = state.range(4) != 0;
    const int split = static_cast<int>(state.range(5));
    DenseBench b(static_cast<GgmlType>(state.range(0)), state.range(1), state.range(2), state.range(3));
    cuda::Int8Workspace ws(b.cols, 0);
    ws.force_split(std::max(split, 0));
    if (split < 0) ws.set_gemv_tokens(0);
    state.counters["gemv"] = b.M <= ws.gemv_tokens() ? 1 : 0;
    time_calls(state, b.s, b.sets.bufs.size(), b.bytes(), b.flops(), graph, [&](size_t i) {
        cuda::int8_matmul(ws, b.mat(i), b.x, b.cols, b.M, b.y, b.rows, b.s);
    });
    int8_counters(state, b.M, static_cast<double>(b.rows) * b.cols);
    state.counters["sets"] = static_cast<double>(b.sets.bufs.size());
}

// y = W x for a dense matrix of rows x cols: the fused kernel (sgemm = 0) or the baseline
// bg::cuda::matmul, dequantise to F32 + SGEMM (sgemm = 1).
void BM_Dense(benchmark::State& state, bool sgemm, bool single = false) {
    const bool graph = !sgemm && state.range(4) != 0;
    const int tiles = static_cast<int>(state.range(5));
    DenseBench b(static_cast<GgmlType>(state.range(0)), state.range(1), state.range(2), state.range(3));
    std::unique_ptr<cuda::QuantMatmulWorkspace> ws;
    std::unique_ptr<cuda::MatmulContext> ctx;
    if (sgemm) {
        ctx = std::make_unique<cuda::MatmulContext>();
    } else {
        ws = std::make_unique<cuda::QuantMatmulWorkspace>(b.cols, 0);
        ws->set_split_activations(!single);
        ws->set_tile_variant(tiles);
    }
    time_calls(state, b.s, b.sets.bufs.size(), b.bytes(), b.flops(), graph, [&](size_t i) {
        if (sgemm) {
            cuda::matmul(*ctx, b.mat(i), b.x, b.cols, b.M, b.y, b.rows, b.s);
        } else {
            cuda::quant_matmul(*ws, b.mat(i), b.x, b.cols, b.M, b.y, b.rows, b.s);
        }
    });
    state.counters["sets"] = static_cast<double>(b.sets.bufs.size());
}
void BM_DenseFused(benchmark::State& state) { BM_Dense(state, false); }
void BM_DenseSgemm(benchmark::State& state) { BM_Dense(state, true); }
// The fused kernel with one activation rounding (split activations off): what the split costs.
void BM_DenseFusedSingle(benchmark::State& state) { BM_Dense(state, false, true); }

constexpr int64_t kMx = static_cast<int64_t>(GgmlType::MXFP4);
constexpr int64_t kQ8 = static_cast<int64_t>(GgmlType::Q8_0);
constexpr int64_t kBf = static_cast<int64_t>(GgmlType::BF16);
constexpr int64_t kQ2K = static_cast<int64_t>(GgmlType::Q2_K), kQ3K = static_cast<int64_t>(GgmlType::Q3_K),
                  kQ4K = static_cast<int64_t>(GgmlType::Q4_K), kQ5K = static_cast<int64_t>(GgmlType::Q5_K),
                  kQ6K = static_cast<int64_t>(GgmlType::Q6_K), kIq2 = static_cast<int64_t>(GgmlType::IQ2_XXS);

// Samples per configuration, fixed: with manual time a 5 us kernel needs 40,000 iterations to
// reach a minimum time of 0.2 s, each paying a host synchronisation (the full set ran past 9
// minutes on the H200 that way). Each sample is kCallsPerSample calls; the median is reported.
constexpr int kSamples = 30;

BENCHMARK(BM_D2DCopy)->Arg(static_cast<int64_t>(kD2DBytes))->Iterations(4)->UseManualTime()->Unit(benchmark::kMicrosecond);

// type (39 mxfp4, 8 q8_0, 30 bf16), n_embd, n_ff, M, graph (1: 16 calls replayed as a CUDA
// graph), lut (1: MXFP4 table decode instead of the bit decode; counter bit_decode says which ran),
// single (1: one activation rounding instead of the default hi + lo split; what the split costs),
// tiles (QuantMatmulWorkspace::set_tile_variant: the alternative tiles for up to 16 tokens)
BENCHMARK(BM_ExpertFused)
    ->ArgNames({"type", "n_embd", "n_ff", "M", "graph", "lut", "single", "tiles"})
    ->ArgsProduct({{kMx}, {5120}, {2304}, {1, 2, 3, 8, 16, 32, 64}, {0, 1}, {0}, {0}, {0}})
    ->ArgsProduct({{kMx}, {5120}, {2304}, {1, 16, 64}, {0}, {1}, {0}, {0}})
    ->ArgsProduct({{kQ8, kBf}, {5120}, {2304}, {1, 16, 64}, {0}, {0}, {0}, {0}})
    ->ArgsProduct({{kMx}, {1024}, {768}, {1, 16, 64}, {0}, {0}, {0}, {0}})
    ->ArgsProduct({{kMx}, {5120}, {2304}, {1, 3, 8, 16, 32, 64}, {0}, {0}, {1}, {0}})
    ->ArgsProduct({{kMx}, {1024}, {768}, {1, 16, 64}, {0}, {0}, {1}, {0}})
    ->ArgsProduct({{kMx, kQ8}, {5120}, {2304}, {1, 3, 8, 16}, {0}, {0}, {0}, {1, 2, 3}})
    ->Iterations(kSamples)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Dense shapes of the full model (rows x cols): attn_q_a 1280x5120, attn_q_b 32768x1280,
// attn_output_b 5120x8192, output head 129280x5120.
#define BG_DENSE_SHAPES(B)                                                                                  \
    B->ArgNames({"type", "rows", "cols", "M", "graph", "tiles"})                                            \
        ->ArgsProduct({{kQ8, kBf}, {1280}, {5120}, {1, 3, 16, 64}, {0}, {0}})                               \
        ->ArgsProduct({{kQ8, kBf}, {32768}, {1280}, {1, 3, 16, 64}, {0}, {0}})                              \
        ->ArgsProduct({{kQ8, kBf}, {5120}, {8192}, {1, 3, 16, 64}, {0}, {0}})                               \
        ->ArgsProduct({{kQ8, kBf}, {129280}, {5120}, {1, 64}, {0}, {0}})                                    \
        ->Iterations(kSamples)                                                                              \
        ->UseManualTime()                                                                                   \
        ->Unit(benchmark::kMicrosecond)
BG_DENSE_SHAPES(BENCHMARK(BM_DenseFused))
    ->Args({kQ8, 1280, 5120, 1, 1, 0})
    ->Args({kQ8, 32768, 1280, 1, 1, 0})
    // The alternative tiles (tiles 1-3) on the shapes the forward multiplies per 16-token unit.
    ->ArgsProduct({{kQ8}, {1280}, {5120}, {1, 16}, {0}, {1, 2, 3}})
    ->ArgsProduct({{kQ8}, {32768}, {1280}, {1, 16}, {0}, {1, 2, 3}})
    ->ArgsProduct({{kQ8}, {5120}, {8192}, {1, 16}, {0}, {1, 2, 3}});
BG_DENSE_SHAPES(BENCHMARK(BM_DenseSgemm));
// type, n_embd, n_ff, M, graph, split (forced split-K count of every launch; 0 the heuristic; -1
// the heuristic with the MMA kernel where the GEMV would run, M <= 2),
// down (the down projection's type; 0 the gate's). The K-quant rows are llama-quantize's mixes:
// Q2_K with down Q3_K, Q4_K with down Q6_K (Q4_K_M), IQ2_XXS with down Q2_K, and each type alone.
BENCHMARK(BM_ExpertInt8)
    ->ArgNames({"type", "n_embd", "n_ff", "M", "graph", "split", "down"})
    ->ArgsProduct({{kMx}, {5120}, {2304}, {1, 2, 3, 8, 16, 32, 64}, {0, 1}, {0}, {0}})
    ->ArgsProduct({{kMx, kQ8}, {5120}, {2304}, {1, 2}, {0, 1}, {-1}, {0}})
    ->ArgsProduct({{kMx}, {5120}, {2304}, {1, 16, 64}, {0}, {1, 2, 4, 8}, {0}})
    ->ArgsProduct({{kQ8}, {5120}, {2304}, {1, 8, 16, 64}, {0}, {0}, {0}})
    ->ArgsProduct({{kMx}, {1024}, {768}, {1, 16, 64}, {0}, {0}, {0}})
    ->ArgsProduct({{kQ2K, kQ3K, kQ4K, kQ5K, kQ6K, kIq2}, {5120}, {2304}, {1, 8, 16, 64}, {0}, {0}, {0}})
    ->ArgsProduct({{kQ2K}, {5120}, {2304}, {1, 8, 16, 64}, {0}, {0}, {kQ3K}})
    ->ArgsProduct({{kQ4K}, {5120}, {2304}, {1, 8, 16, 64}, {0}, {0}, {kQ6K}})
    ->ArgsProduct({{kIq2}, {5120}, {2304}, {1, 16}, {0}, {0}, {kQ2K}})
    ->Iterations(kSamples)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DenseInt8)
    ->ArgNames({"type", "rows", "cols", "M", "graph", "split"})
    ->ArgsProduct({{kQ8}, {1280}, {5120}, {1, 3, 16, 64}, {0}, {0}})
    ->ArgsProduct({{kQ8}, {32768}, {1280}, {1, 3, 16, 64}, {0}, {0}})
    ->ArgsProduct({{kQ8}, {5120}, {8192}, {1, 3, 16, 64}, {0}, {0}})
    ->ArgsProduct({{kQ8}, {129280}, {5120}, {1, 64}, {0}, {0}})
    ->ArgsProduct({{kQ8}, {32768}, {1280}, {1, 16}, {0}, {1, 4}})
    ->ArgsProduct({{kQ8}, {5120}, {8192}, {1, 16}, {0}, {1, 4}})
    ->ArgsProduct({{kQ8}, {1280, 129280}, {5120}, {1}, {0}, {-1}})
    ->ArgsProduct({{kQ8}, {32768}, {1280}, {1}, {0}, {-1}})
    ->ArgsProduct({{kQ8}, {5120}, {8192}, {1}, {0}, {-1}})
    ->ArgsProduct({{kQ8}, {24}, {20480}, {1}, {0}, {0, -1}})
    ->Iterations(kSamples)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The GEMV (1-2 tokens) with its grid sized for `wsm` warps an SM (Int8Workspace::
// set_gemv_warps_per_sm; Int8Workspace::kGemvDefaultWarpsPerSm in the engine): whether more
// warps in flight bring a pass nearer its memory floor. mode 0: a full expert (rows = n_embd, cols = n_ff);
// mode 1: y = W x for rows x cols.
void BM_GemvWarpsPerSm(benchmark::State& state) {
    const auto type = static_cast<GgmlType>(state.range(0));
    const int64_t a = state.range(1), b_ = state.range(2), M = state.range(3);
    const int wsm = static_cast<int>(state.range(4));
    const bool expert = state.range(5) == 0;
    if (expert) {
        ExpertBench b(type, a, b_, M, GgmlType::F32);
        cuda::Int8Workspace ws(std::max(b.E, b.F), b.F);
        ws.set_gemv_warps_per_sm(wsm);
        time_calls(state, b.s, b.n_sets, static_cast<double>(b.bytes), b.flops(), false, [&](size_t i) {
            cuda::int8_expert_ffn(ws, b.mats(i), b.x, b.E, b.rows, b.M, 10.0f, bg::SwigluClamp::kDeepSeek, b.y, b.E,
                                  b.rows, b.s);
        });
        int8_counters(state, b.M, 3.0 * b.E * b.F);
        return;
    }
    DenseBench d(type, a, b_, M);
    cuda::Int8Workspace ws(d.cols, 0);
    ws.set_gemv_warps_per_sm(wsm);
    time_calls(state, d.s, d.sets.bufs.size(), d.bytes(), d.flops(), false, [&](size_t i) {
        cuda::int8_matmul(ws, d.mat(i), d.x, d.cols, d.M, d.y, d.rows, d.s);
    });
    int8_counters(state, M, static_cast<double>(d.rows) * d.cols);
}
BENCHMARK(BM_GemvWarpsPerSm)
    ->ArgNames({"type", "a", "b", "M", "wsm", "dense"})
    ->ArgsProduct({{kMx, kQ8}, {5120}, {2304}, {1, 2}, {16, 32, 48, 64}, {0}})
    ->ArgsProduct({{kQ8}, {1280}, {5120}, {1}, {16, 32, 48, 64}, {1}})
    ->ArgsProduct({{kQ8}, {32768}, {1280}, {1}, {16, 32, 48, 64}, {1}})
    ->ArgsProduct({{kQ8}, {5120}, {8192}, {1}, {16, 32, 48, 64}, {1}})
    ->Iterations(kSamples)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BG_DENSE_SHAPES(BENCHMARK(BM_DenseFusedSingle));

// The median of the state's samples of work(s) on a stream of its own, each between two events
// (SetIterationTime each), after one unmeasured call (module load, a library's first call).
// cold: a 256 MiB memset before each sample evicts L2, as a decode layer's weights streaming
// through it do between two routings.
template <typename F>
double median_stream_seconds(benchmark::State& state, bool cold, F work) {
    constexpr size_t kFlushBytes = size_t{256} << 20;
    void* flush = nullptr;
    BG_CUDA_CHECK(cudaMalloc(&flush, kFlushBytes));
    cudaStream_t s = nullptr;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    BG_CUDA_CHECK(cudaStreamCreate(&s));
    BG_CUDA_CHECK(cudaEventCreate(&t0));
    BG_CUDA_CHECK(cudaEventCreate(&t1));
    work(s);
    std::vector<double> samples;
    int round = 0;
    for (auto _ : state) {
        if (cold) BG_CUDA_CHECK(cudaMemsetAsync(flush, ++round & 0xff, kFlushBytes, s));
        samples.push_back(device_seconds(s, t0, t1, [&] { work(s); }));
        state.SetIterationTime(samples.back());
    }
    BG_CUDA_CHECK(cudaEventDestroy(t0));
    BG_CUDA_CHECK(cudaEventDestroy(t1));
    BG_CUDA_CHECK(cudaStreamDestroy(s));
    BG_CUDA_CHECK(cudaFree(flush));
    return median(samples);
}

// A decode layer's routing on the device: the router's walk (cuda::route, resident-only, 6 of 384
// experts, 20 of them resident and 5 hot) and the grouping of its slots by expert
// (cuda::group_by_expert) for n_tok tokens, the two kernels between a pair of events. cold 1: a
// 256 MiB memset before each sample evicts L2, as a decode layer's weights streaming through it
// do between two routings (the router's bias and eligibility bytes then come from device memory).
// Counter us: the median sample.
void BM_RoutingDecode(benchmark::State& state) {
    const int64_t n_tok = state.range(0), ne = 384;
    const bool cold = state.range(1) != 0;
    constexpr int k = 6;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> logits(static_cast<size_t>(n_tok * ne)), bias(static_cast<size_t>(ne));
    for (float& v : logits) v = nd(rng);
    for (float& v : bias) v = 0.1f * nd(rng);
    std::vector<uint8_t> resident(static_cast<size_t>(ne), 0), hot(static_cast<size_t>(ne), 0);
    for (int64_t i = 0; i < 20; ++i) resident[static_cast<size_t>((i * 19) % ne)] = 1;
    for (int64_t i = 0; i < 5; ++i) hot[static_cast<size_t>((i * 19) % ne)] = 1;
    float* d_logits = device_copy(logits);
    float* d_bias = device_copy(bias);
    uint8_t* d_res = device_copy(resident);
    uint8_t* d_hot = device_copy(hot);
    const std::vector<int32_t> zeros(static_cast<size_t>(n_tok * k + ne + 1), 0);
    int32_t* ids = device_copy(zeros);
    int32_t* counts = device_copy(zeros);
    int32_t* gather = device_copy(zeros);
    int32_t* scatter = device_copy(zeros);
    float* w = device_copy(std::vector<float>(static_cast<size_t>(n_tok * k), 0.0f));
    state.counters["us"] = 1e6 * median_stream_seconds(state, cold, [&](cudaStream_t s) {
                               cuda::route(RoutingPolicy::kResidentOnly, d_logits, d_bias, d_res, d_hot, n_tok, ne, k,
                                           RouteWeighting{true, 1.5f}, ids, w, s);
                               cuda::group_by_expert(ids, n_tok * k, k, 0, ne, counts, gather, scatter, nullptr, s);
                           });
    for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_bias), static_cast<void*>(d_res),
                    static_cast<void*>(d_hot), static_cast<void*>(ids), static_cast<void*>(counts),
                    static_cast<void*>(gather), static_cast<void*>(scatter), static_cast<void*>(w)})
        BG_CUDA_CHECK(cudaFree(p));
}
BENCHMARK(BM_RoutingDecode)
    ->ArgNames({"n_tok", "cold"})
    ->ArgsProduct({{1, 16}, {1, 0}})
    ->Iterations(kSamples)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// A decode layer's router GEMV (BM_RoutingGemvF32): the model's F32 ffn_gate_inp, 384 experts x
// 5120, times n_tok tokens through cuda::matmul, which takes its chained GEMV kernel up to 4
// tokens and cuBLAS beyond (16 here); cold 1 evicts L2 before each sample as BM_RoutingDecode
// does. Counters: us (the median sample), floor_us (the weights' bytes over this run's D2D rate),
// x_floor.
void BM_RoutingGemvF32(benchmark::State& state) {
    const int64_t n_tok = state.range(0), ne = 384, E = 5120;
    const bool cold = state.range(1) != 0;
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> w(static_cast<size_t>(ne * E)), x(static_cast<size_t>(n_tok * E));
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = 50.0f * nd(rng);
    float* d_w = device_copy(w);                                                          // [ne][E]
    float* d_x = device_copy(x);                                                          // [n_tok][E]
    float* d_y = device_copy(std::vector<float>(static_cast<size_t>(n_tok * ne), 0.0f));  // [n_tok][ne]
    cuda::MatmulContext ctx(0);  // F32 weights need no dequantisation scratch
    const cuda::DeviceMat W{reinterpret_cast<const uint8_t*>(d_w), GgmlType::F32, E, ne,
                            static_cast<uint64_t>(E) * sizeof(float)};
    const double med =
        median_stream_seconds(state, cold, [&](cudaStream_t s) { cuda::matmul(ctx, W, d_x, E, n_tok, d_y, ne, s); });
    const double bytes = static_cast<double>(ne * E) * sizeof(float);
    const double floor_s = g_d2d_gbs > 0 ? bytes / (g_d2d_gbs * 1e9) : 0;
    state.counters["us"] = med * 1e6;
    state.counters["floor_us"] = floor_s * 1e6;
    state.counters["x_floor"] = floor_s > 0 ? med / floor_s : 0;
    for (void* p : {static_cast<void*>(d_w), static_cast<void*>(d_x), static_cast<void*>(d_y)})
        BG_CUDA_CHECK(cudaFree(p));
}
BENCHMARK(BM_RoutingGemvF32)
    ->ArgNames({"n_tok", "cold"})
    ->ArgsProduct({{1, 4, 16}, {1, 0}})
    ->Iterations(kSamples)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// One expert's three MXFP4 matrices: 3 * n_embd * n_ff * 17/32 bytes.
constexpr int64_t kDeviceExpertBytes = 3 * 1024 * 768 / 32 * 17;    // 1,253,376
constexpr int64_t kFullExpertBytes = 3 * 5120 * 2304 / 32 * 17;     // 18,800,640

BENCHMARK(BM_ExpertMxfp4)
    ->ArgNames({"n_embd", "n_ff", "M"})
    ->ArgsProduct({{1024}, {768}, {1, 3, 16, 64}})
    ->ArgsProduct({{5120}, {2304}, {1, 3, 16, 64}})
    ->Iterations(kSamples)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_HostToDevice)
    ->ArgNames({"pinned", "bytes"})
    ->ArgsProduct({{1, 0}, {kDeviceExpertBytes, kFullExpertBytes}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

namespace {

// Takes "--sm-limit N" or "--sm-limit=N" out of argv; -1 on a malformed value.
int take_sm_limit(int& argc, char** argv) {
    int limit = 0, out = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        std::string v;
        if (a == "--sm-limit") {
            if (i + 1 >= argc) return -1;
            v = argv[++i];
        } else if (a.rfind("--sm-limit=", 0) == 0) {
            v = a.substr(11);
        } else {
            argv[out++] = argv[i];
            continue;
        }
        size_t used = 0;
        try {
            limit = std::stoi(v, &used);
        } catch (const std::exception&) {
            return -1;
        }
        if (used != v.size() || limit < 0) return -1;
    }
    argc = out;
    argv[argc] = nullptr;
    return limit;
}

}  // namespace

int main(int argc, char** argv) {
    const int sm_limit = take_sm_limit(argc, argv);
    if (sm_limit < 0) {
        std::fprintf(stderr, "bench_gpu: --sm-limit takes a count of SMs >= 0 (0: all)\n");
        return 1;
    }
    if (bg::cuda::device_count() == 0) {
        std::fprintf(stderr, "bench_gpu: no CUDA device, nothing to measure\n");
        return 0;
    }
    // The context every benchmark runs in, current on this thread (Google Benchmark runs them
    // all here): a green context of the SMs asked for, else the primary context.
    std::unique_ptr<bg::cuda::SmPartition> partition;
    try {
        partition = std::make_unique<bg::cuda::SmPartition>(0, sm_limit);
    } catch (const bg::Error& e) {
        std::fprintf(stderr, "bench_gpu: %s\n", e.what());
        return 1;
    }
    partition->bind_thread();
    const bg::SmLimit& lim = partition->limit();
    std::fprintf(stderr, "bench_gpu: %s\n", lim.note.c_str());
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("sm_limit", lim.to_json().dump());
    benchmark::AddCustomContext("build", bg::build_info().to_json().dump());  // the commit this binary was built from
    // The bandwidth every x_floor counter is measured against, in this run.
    const std::vector<double> t = d2d_times(kD2DBytes, 20);
    g_d2d_gbs = 2.0 * static_cast<double>(kD2DBytes) / median(t) / 1e9;
    std::fprintf(stderr, "bench_gpu: D2D copy of %zu MiB: median %.1f us over %zu copies, %.0f GB/s (read + write)\n",
                 kD2DBytes >> 20, median(t) * 1e6, t.size(), g_d2d_gbs);
    g_int8_tops = bg::cuda::int8_mma_peak_tops();
    std::fprintf(stderr, "bench_gpu: int8 mma.sync m16n8k32 peak %.0f TOPS\n", g_int8_tops);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    partition.reset();
    return 0;
}
