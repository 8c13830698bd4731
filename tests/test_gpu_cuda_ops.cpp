// The CUDA ops binding (engine/cuda/cuda_ops.cu) at the Ops interface the forward uses: which
// path each weight type takes (fused quantized kernels for MXFP4/Q8_0/BF16, cuBLAS for F32 in
// place and F16 through the dequantisation scratch), the routed expert op fused and unfused, the
// memory reserve() holds (exactly bg::cuda_ops_device_bytes, what `betelgeuse plan` prints), and
// bit-identical results run to run. The reference is the CPU ops with the fused kernels'
// activation rounding emulated (tests/emulated_gpu_numerics.h: hi + lo split), so what is left
// is the order of FP32 sums: tolerance 2e-5 relative (L2 over all outputs) on these widths; a
// kernel that dropped the lo half (one rounding: ~2e-4 FP16, ~1.5e-3 BF16) misses it by an
// order of magnitude. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/host_word.h"
#include "cpu/cpu_ops.h"
#include "cpu/thread_pool.h"
#include "cuda/check.cuh"
#include "cuda/cuda_ops.cuh"
#include "cuda/dequant.cuh"
#include "cuda/launch.cuh"
#include "emulated_gpu_numerics.h"
#include "random_inputs.h"
#include "tensor/ggml_types.h"

using namespace bg;

namespace {

constexpr double kTol = 2e-5;

// Host bytes of a rows x cols matrix of type t quantised from N(0, 0.05).
std::vector<uint8_t> random_weights(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> row(static_cast<size_t>(cols));
    const uint64_t rb = row_bytes(t, cols);
    std::vector<uint8_t> b(rb * rows);
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng);
        quantize_row(t, row.data(), b.data() + r * rb, cols);
    }
    return b;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        e2 += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
        r2 += static_cast<double>(want[i]) * want[i];
    }
    return std::sqrt(e2 / std::max(r2, 1e-300));
}

// The same weights on both sides: host bytes for the CPU, device bytes for CUDA.
struct Weights {
    std::vector<uint8_t> host;
    void* dev = nullptr;
    Weights(Ops& cuda, std::vector<uint8_t> h) : host(std::move(h)) {
        dev = cuda.alloc(host.size());
        cuda.upload(dev, host.data(), host.size());
    }
    MatView view(bool device, GgmlType t, int64_t cols, int64_t rows, uint64_t offset = 0) const {
        const uint8_t* base = device ? static_cast<const uint8_t*>(dev) : host.data();
        return MatView{base + offset, t, cols, rows, row_bytes(t, cols)};
    }
};

class GpuCudaOps : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        rng_ = bgtest::fresh_rng();
    }
    std::mt19937 rng_;
    cpu::ThreadPool pool_{2};
};

// Every weight type through Ops::matmul, 1, 5 and 64 tokens.
TEST_F(GpuCudaOps, MatmulTakesThePathOfItsWeightType) {
    const int64_t E = 256, R = 200;
    OpsLimits lim;
    lim.max_tok = 64;
    const GgmlType types[] = {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::BF16, GgmlType::F16, GgmlType::F32};
    for (GgmlType t : types) lim.matmul.add_matrix(t, E, R, 0);
    EXPECT_EQ(lim.matmul.quant_max_cols, E);
    EXPECT_TRUE(lim.matmul.sgemm);
    EXPECT_EQ(lim.matmul.dequant_bytes, static_cast<uint64_t>(E * R) * 4) << "the F16 matrix, whole";
    std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
    gpu->reserve(lim);
    EXPECT_EQ(gpu->own_bytes(), cuda_ops_device_bytes(lim));
    bgtest::GpuNumericsOps emu(cpu::make_cpu_ops(pool_));
    emu.reserve(lim);
    for (GgmlType t : types) {
        const Weights w(*gpu, random_weights(t, R, E, rng_));
        for (int64_t n : {1, 5, 64}) {
            SCOPED_TRACE(std::string(type_name(t)) + " tokens " + std::to_string(n));
            const int64_t ldx = E + 3, ldy = R + 1;
            const std::vector<float> x = bgtest::uniform(rng_, n * ldx, -1.0f, 1.0f);
            std::vector<float> want(static_cast<size_t>(n * ldy), 0.0f);
            emu.matmul(w.view(false, t, E, R), x.data(), ldx, n, want.data(), ldy);
            float* dx = static_cast<float*>(gpu->alloc(x.size() * 4));
            float* dy = static_cast<float*>(gpu->alloc(want.size() * 4));
            gpu->upload(dx, x.data(), x.size() * 4);
            std::vector<float> got[2];
            for (int run = 0; run < 2; ++run) {
                gpu->matmul(w.view(true, t, E, R), dx, ldx, n, dy, ldy);
                got[run].resize(want.size());
                gpu->download(got[run].data(), dy, want.size() * 4);
                gpu->sync();
            }
            EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), want.size() * 4), 0) << "not bit-identical run to run";
            const double rel = rel_l2(got[0], want);
            std::printf("  %-6s n=%-3lld rel %.3g\n", type_name(t), (long long)n, rel);
            EXPECT_LT(rel, kTol);
        }
    }
}

// The routed expert op: MXFP4 experts fused, F16 experts through the unfused sequence; each
// token's output lands in its own row, nothing else changes.
TEST_F(GpuCudaOps, ExpertFfnFusedAndUnfused) {
    const int64_t E = 256, F = 128, T = 40, chunk = 16;
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::BF16, GgmlType::F16}) {
        SCOPED_TRACE(type_name(t));
        OpsLimits lim;
        lim.max_tok = chunk;
        lim.expert_max_tok = chunk;
        lim.n_embd = E;
        lim.n_ff = F;
        lim.experts_unfused = !lim.matmul.add_expert(t, t, t, E, F);
        EXPECT_EQ(lim.experts_unfused, t == GgmlType::F16);
        std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
        gpu->reserve(lim);
        EXPECT_EQ(gpu->own_bytes(), cuda_ops_device_bytes(lim));
        bgtest::GpuNumericsOps emu(cpu::make_cpu_ops(pool_));
        emu.reserve(lim);
        // gate, up, down end to end as in a slot.
        std::vector<uint8_t> bytes = random_weights(t, F, E, rng_);
        const uint64_t up_at = bytes.size();
        const std::vector<uint8_t> u = random_weights(t, F, E, rng_), d = random_weights(t, E, F, rng_);
        bytes.insert(bytes.end(), u.begin(), u.end());
        const uint64_t down_at = bytes.size();
        bytes.insert(bytes.end(), d.begin(), d.end());
        const Weights w(*gpu, bytes);
        auto mats = [&](bool dev) {
            return ExpertMats{w.view(dev, t, E, F, 0), w.view(dev, t, E, F, up_at), w.view(dev, t, F, E, down_at)};
        };
        const std::vector<float> x = bgtest::uniform(rng_, T * E, -1.0f, 1.0f);
        const std::vector<float> out0 = bgtest::uniform(rng_, 2 * T * E, -1.0f, 1.0f);
        std::vector<int32_t> rows(static_cast<size_t>(chunk)), out_rows(static_cast<size_t>(2 * T));
        std::uniform_int_distribution<int32_t> tok(0, T - 1);
        for (auto& r : rows) r = tok(rng_);
        std::iota(out_rows.begin(), out_rows.end(), 0);
        std::shuffle(out_rows.begin(), out_rows.end(), rng_);
        out_rows.resize(static_cast<size_t>(chunk));
        std::vector<float> want = out0;
        emu.expert_ffn(mats(false), x.data(), E, rows.data(), chunk, 0.5f, SwigluClamp::kDeepSeek, want.data(),
                       out_rows.data());
        float* dx = static_cast<float*>(gpu->alloc(x.size() * 4));
        float* dout = static_cast<float*>(gpu->alloc(out0.size() * 4));
        int32_t* drows = static_cast<int32_t*>(gpu->alloc(rows.size() * 4));
        int32_t* dorows = static_cast<int32_t*>(gpu->alloc(out_rows.size() * 4));
        gpu->upload(dx, x.data(), x.size() * 4);
        gpu->upload(drows, rows.data(), rows.size() * 4);
        gpu->upload(dorows, out_rows.data(), out_rows.size() * 4);
        std::vector<float> got[2];
        for (int run = 0; run < 2; ++run) {
            gpu->upload(dout, out0.data(), out0.size() * 4);
            gpu->expert_ffn(mats(true), dx, E, drows, chunk, 0.5f, SwigluClamp::kDeepSeek, dout, dorows);
            got[run].resize(out0.size());
            gpu->download(got[run].data(), dout, out0.size() * 4);
            gpu->sync();
        }
        EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), out0.size() * 4), 0) << "not bit-identical run to run";
        std::vector<bool> written(static_cast<size_t>(2 * T), false);
        for (int32_t r : out_rows) written[r] = true;
        for (int64_t r = 0; r < 2 * T; ++r) {
            if (!written[r]) {
                ASSERT_EQ(std::memcmp(&got[0][r * E], &out0[r * E], E * 4), 0) << "row " << r << " changed";
            }
        }
        const double rel = rel_l2(got[0], want);
        std::printf("  %-6s rel %.3g\n", type_name(t), rel);
        EXPECT_LT(rel, kTol);
    }
}

// The routing slots grouped by expert on the device: the same counts and rows as the CPU's
// stable counting sort, bit for bit, over tile and thread-block boundaries (5,000 slots, 600
// experts) and with ids outside the experts.
// Busy brackets of both kinds: the kernel time of all of them, and apart that of the brackets
// beside the host's paths (Ops::BusyKind::kBesideHost), which issue 24's bound leaves out.
TEST_F(GpuCudaOps, BusyTimeCountsBesideHostBracketsApart) {
    OpsLimits lim;
    lim.max_tok = 1;
    lim.busy_pairs = 2;
    lim.timeline_capacity = 16;
    std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
    gpu->reserve(lim);
    gpu->begin_timeline();
    const int64_t n = int64_t(1) << 24;
    auto* x = static_cast<float*>(gpu->alloc(n * sizeof(float)));
    EXPECT_DOUBLE_EQ(gpu->busy_ms(), 0.0);
    EXPECT_DOUBLE_EQ(gpu->busy_beside_host_ms(), 0.0);
    for (int round = 0; round < 3; ++round) {  // more pairs than one stretch holds: counted at each sync
        gpu->busy_begin(Ops::BusyKind::kChain);
        for (int i = 0; i < 8; ++i) gpu->scale(x, n, 1.0f);
        gpu->busy_end();
        gpu->busy_begin(Ops::BusyKind::kBesideHost);
        for (int i = 0; i < 4; ++i) gpu->scale(x, n, 1.0f);
        gpu->busy_end();
        gpu->sync();
        const double all = gpu->busy_ms(), beside = gpu->busy_beside_host_ms();
        EXPECT_GT(beside, 0.0);
        EXPECT_LT(beside, all);
        // Work outside any bracket counts in neither.
        gpu->scale(x, n, 1.0f);
        gpu->sync();
        EXPECT_DOUBLE_EQ(gpu->busy_ms(), all);
        EXPECT_DOUBLE_EQ(gpu->busy_beside_host_ms(), beside);
    }
    ASSERT_NE(gpu->timeline(), nullptr);
    EXPECT_EQ(gpu->timeline()->intervals().size(), 6u) << "each bracket an interval of the timeline";
}

TEST_F(GpuCudaOps, GroupByExpertMatchesTheCpu) {
    std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
    std::unique_ptr<Ops> cpu = cpu::make_cpu_ops(pool_);
    for (const auto& [n_tok, k, ne] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1, 6, 384}, {16, 6, 384}, {500, 6, 384}, {834, 6, 600}, {37, 2, 16}, {3, 8, 4000}}) {
        std::uniform_int_distribution<int32_t> expert(0, static_cast<int32_t>(ne - 1));
        std::vector<int32_t> ids(static_cast<size_t>(n_tok * k));
        for (auto& id : ids) id = expert(rng_);
        ids[ids.size() / 2] = -1;  // CUDA's route marks a missing rank so
        const int64_t n = static_cast<int64_t>(ids.size()), pos0 = std::uniform_int_distribution<int64_t>(0, 999)(rng_);
        std::vector<int32_t> want_counts(ne + 1), want_gather(n), want_scatter(n);
        cpu->group_by_expert(ids.data(), n, k, pos0, ne, want_counts.data(), want_gather.data(), want_scatter.data(),
                             nullptr);
        auto* d_ids = static_cast<int32_t*>(gpu->alloc(n * 4));
        auto* d_counts = static_cast<int32_t*>(gpu->alloc((ne + 1) * 4));
        auto* d_gather = static_cast<int32_t*>(gpu->alloc(n * 4));
        auto* d_scatter = static_cast<int32_t*>(gpu->alloc(n * 4));
        gpu->upload(d_ids, ids.data(), n * 4);
        // The kernel's own copy to host memory, as a decode layer's grouping reaches the host.
        auto* host_copy = static_cast<int32_t*>(gpu->alloc_host((ne + 1 + 2 * n) * 4));
        std::fill(host_copy, host_copy + ne + 1 + 2 * n, -7);
        gpu->group_by_expert(d_ids, n, k, pos0, ne, d_counts, d_gather, d_scatter, host_copy);
        std::vector<int32_t> counts(ne + 1), gather(n), scatter(n);
        gpu->download(counts.data(), d_counts, (ne + 1) * 4);
        gpu->download(gather.data(), d_gather, n * 4);
        gpu->download(scatter.data(), d_scatter, n * 4);
        gpu->sync();
        EXPECT_TRUE(std::equal(counts.begin(), counts.end(), host_copy));
        EXPECT_TRUE(std::equal(gather.begin(), gather.end() - 1, host_copy + ne + 1));
        EXPECT_TRUE(std::equal(scatter.begin(), scatter.end() - 1, host_copy + ne + 1 + n));
        gpu->free_host(host_copy);
        EXPECT_EQ(counts, want_counts) << n_tok << " tokens, " << ne << " experts";
        EXPECT_EQ(counts[ne], 1);
        // The last grouped row is n - 2 (one slot is left out).
        gather.resize(n - 1);
        scatter.resize(n - 1);
        want_gather.resize(n - 1);
        want_scatter.resize(n - 1);
        EXPECT_EQ(gather, want_gather);
        EXPECT_EQ(scatter, want_scatter);
    }
}

// Ops::wait_host_word: ops queued after the wait run only once another host thread publishes the
// word (here 5 ms on): the fence after them has not passed before, and the buffer they write
// holds the value uploaded after the wait; an earlier value of the word, or one already reached
// (a wrapped sequence counts as reached), does not hold the queue.
TEST_F(GpuCudaOps, QueueWaitsForTheHostWordAndGoesOnOnceItIsPublished) {
    std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
    gpu->reserve(OpsLimits{});
    auto* word = static_cast<uint32_t*>(gpu->alloc_host(sizeof(uint32_t)));
    auto* src = static_cast<int32_t*>(gpu->alloc_host(sizeof(int32_t)));
    auto* dst = static_cast<int32_t*>(gpu->alloc(sizeof(int32_t)));
    // Pinned: a download to pageable memory would make this thread wait for the queue, which
    // waits for the word this thread publishes (the kernel's timeout then fails the test).
    auto* got = static_cast<int32_t*>(gpu->alloc_host(sizeof(int32_t)));
    for (const uint32_t start : {0u, 0xFFFFFFFEu}) {
        SCOPED_TRACE(start);
        publish_host_word(word, start);
        *src = -1;
        gpu->upload(dst, src, sizeof(int32_t));
        gpu->wait_host_word(word, start);  // reached already
        gpu->wait_host_word(word, start - 5);
        gpu->sync();
        const uint32_t next = start + 3;  // wraps from 0xFFFFFFFE
        gpu->wait_host_word(word, next);
        gpu->upload(dst, src, sizeof(int32_t));
        gpu->download(got, dst, sizeof(int32_t));
        gpu->record_fence(0);
        std::thread writer([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            *src = 42;  // what the queued upload reads, published by the word
            publish_host_word(word, next);
        });
        const auto t0 = std::chrono::steady_clock::now();
        bool passed_early = false;
        while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(3)) passed_early |= gpu->fence_passed(0, false);
        EXPECT_FALSE(passed_early) << "the queue ran before the word was published";
        EXPECT_TRUE(gpu->fence_passed(0, true));
        writer.join();
        gpu->sync();
        EXPECT_EQ(*got, 42);
    }
    gpu->free_host(word);
    gpu->free_host(src);
    gpu->free_host(got);
}

// Hybrid decode's join: the CPU's rows, written to host memory after the device's queue was
// handed the scatter, read in place (host_view) once the word says they are there.
TEST_F(GpuCudaOps, JoinReadsTheHostRowsInPlaceOnceTheWordIsPublished) {
    std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
    gpu->reserve(OpsLimits{});
    const int64_t width = 777, m = 5, slots = 9, add0 = 1, n_add = 2;
    auto* word = static_cast<uint32_t*>(gpu->alloc_host(sizeof(uint32_t)));
    auto* rows_host = static_cast<int32_t*>(gpu->alloc_host(m * sizeof(int32_t)));
    auto* src_host = static_cast<float*>(gpu->alloc_host(m * width * sizeof(float)));
    auto* got = static_cast<float*>(gpu->alloc_host(slots * width * sizeof(float)));
    auto* dst = static_cast<float*>(gpu->alloc(slots * width * sizeof(float)));
    const std::vector<float> before = bgtest::uniform(rng_, slots * width, -2.0f, 2.0f),
                             src = bgtest::uniform(rng_, m * width, -2.0f, 2.0f);
    const int32_t rows[m] = {7, 0, 4, 2, 8};
    std::memcpy(got, before.data(), before.size() * sizeof(float));
    gpu->upload(dst, got, before.size() * sizeof(float));  // pinned: got is rewritten below
    gpu->sync();
    publish_host_word(word, 0);
    for (int64_t j = 0; j < m; ++j) rows_host[j] = -1;  // what the device must not see
    gpu->wait_host_word(word, 1);
    gpu->moe_scatter_join(static_cast<const float*>(gpu->host_view(src_host)),
                          static_cast<const int32_t*>(gpu->host_view(rows_host)), m, add0, n_add, width, dst);
    gpu->download(got, dst, before.size() * sizeof(float));
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::memcpy(src_host, src.data(), src.size() * sizeof(float));
        std::memcpy(rows_host, rows, sizeof(rows));
        publish_host_word(word, 1);
    });
    writer.join();
    gpu->sync();
    for (int64_t s = 0; s < slots; ++s) {
        int64_t j = -1;
        for (int64_t i = 0; i < m; ++i)
            if (rows[i] == s) j = i;
        for (int64_t e = 0; e < width; ++e) {
            const float b = before[s * width + e];
            const float want = j < 0 ? b : j >= add0 && j < add0 + n_add ? b + src[j * width + e] : src[j * width + e];
            ASSERT_EQ(got[s * width + e], want) << s << " " << e;
        }
    }
    for (void* p : {static_cast<void*>(word), static_cast<void*>(rows_host), static_cast<void*>(src_host), static_cast<void*>(got)})
        gpu->free_host(p);
}

}  // namespace

namespace {

// Chained launches (engine/cuda/launch.cuh) on and off select themselves as documented.
struct ChainedLaunchesRestore {
    ~ChainedLaunchesRestore() { cuda::allow_chained_launches(true); }
};

}  // namespace

TEST_F(GpuCudaOps, ChainedLaunchesFollowTheSettingAndTheDevice) {
    ChainedLaunchesRestore restore;
    int dev = 0, major = 0;
    BG_CUDA_CHECK(cudaGetDevice(&dev));
    BG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cuda::allow_chained_launches(false);
    EXPECT_FALSE(cuda::chained_launches());
    cuda::allow_chained_launches(true);
    EXPECT_EQ(cuda::chained_launches(), major >= 9) << "compute capability " << major;
}

// A chain of dependent kernels, each reading what the one before wrote: a long matmul (a 4096 x
// 4096 Q8_0 GEMV) and short ones after it (rmsnorm in place, scale, swiglu). Launched chained, a
// kernel's blocks are placed while the one before runs; one that read before its wait would see
// the last round's values. The chain must give the plain launches' bits, on every device (on
// one before sm_90 both runs are plain).
TEST_F(GpuCudaOps, ChainedKernelsGiveThePlainLaunchesBits) {
    ChainedLaunchesRestore restore;
    const int64_t E = 4096, rounds = 40;
    OpsLimits lim;
    lim.max_tok = 1;
    lim.matmul.add_matrix(GgmlType::Q8_0, E, E, 0);
    std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
    gpu->reserve(lim);
    const Weights w(*gpu, random_weights(GgmlType::Q8_0, E, E, rng_));
    const std::vector<float> x0 = bgtest::uniform(rng_, E, -1.0f, 1.0f);
    float* x = static_cast<float*>(gpu->alloc(E * 4));
    float* y = static_cast<float*>(gpu->alloc(E * 4));
    std::vector<float> got[2];
    for (int chained = 1; chained >= 0; --chained) {
        cuda::allow_chained_launches(chained == 1);
        gpu->upload(x, x0.data(), E * 4);
        for (int64_t r = 0; r < rounds; ++r) {
            gpu->matmul(w.view(true, GgmlType::Q8_0, E, E), x, E, 1, y, E);
            gpu->rmsnorm(y, nullptr, E, 1, 1e-6f, y);
            gpu->scale(y, E, 1.5f);
            gpu->swiglu(y, y, E, 0.0f, SwigluClamp::kDeepSeek, x);  // x = silu(y) * y
            gpu->rmsnorm(x, nullptr, E, 1, 1e-6f, x);
        }
        got[chained].resize(E);
        gpu->download(got[chained].data(), x, E * 4);
        gpu->sync();
    }
    for (float v : got[0]) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), E * 4), 0) << "chained launches changed the chain's result";
}

// Ops::upload, download, copy and copy_rows give the source's exact bytes whichever way they go:
// by kernel (at most cuda::kKernelCopyMaxBytes, the host end alloc_host memory: its mapped
// address) or by the copy engine (longer, or other host memory), at odd lengths and offsets (byte
// and 4-byte words) and at the limit and one byte past it. Each copy lands on a sentinel-filled
// buffer: a byte written outside the range fails too.
TEST_F(GpuCudaOps, CopiesShortAndLongGiveTheExactBytes) {
    std::unique_ptr<Ops> gpu = cuda::make_cuda_ops();
    gpu->reserve(OpsLimits{});
    const uint64_t cap = cuda::kKernelCopyMaxBytes + 64;
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> src(cap);
    for (uint8_t& b : src) b = static_cast<uint8_t>(byte(rng_));
    auto* pinned = static_cast<uint8_t*>(gpu->alloc_host(cap));  // the kernels' host end
    auto* pinned_out = static_cast<uint8_t*>(gpu->alloc_host(cap));
    auto* dev = static_cast<uint8_t*>(gpu->alloc(cap));
    auto* dev2 = static_cast<uint8_t*>(gpu->alloc(cap));
    std::memcpy(pinned, src.data(), cap);
    const uint8_t kSentinel = 0xA5;
    const std::vector<uint8_t> sentinels(cap, kSentinel);
    struct Case {
        uint64_t offset, bytes;
    };
    const uint64_t max = cuda::kKernelCopyMaxBytes;
    const Case cases[] = {{0, 16},  {0, 20480}, {3, 1},       {5, 37},      {4, 4100},    {16, 4096},       {1, 6527},
                          {0, max}, {64, max},  {0, max + 1}, {7, max - 9}, {0, cap - 8}, {12, max / 2 + 4}};
    for (const Case& c : cases) {
        SCOPED_TRACE("offset " + std::to_string(c.offset) + " bytes " + std::to_string(c.bytes));
        ASSERT_LE(c.offset + c.bytes, cap);
        for (bool from_pinned : {true, false}) {
            // Upload into sentinels, copy device to device at another offset, download back.
            gpu->upload(dev, sentinels.data(), cap);
            gpu->upload(dev2, sentinels.data(), cap);
            gpu->upload(dev + c.offset, (from_pinned ? pinned : src.data()) + c.offset, c.bytes);
            const uint64_t at2 = (c.offset + 1) % 8;
            ASSERT_LE(at2 + c.bytes, cap);
            gpu->copy(dev2 + at2, dev + c.offset, c.bytes);
            std::vector<uint8_t> back(cap);
            uint8_t* out = from_pinned ? pinned_out : back.data();
            std::memset(out, kSentinel, cap);
            gpu->download(out + c.offset, dev2 + at2, c.bytes);
            gpu->sync();
            for (uint64_t i = 0; i < cap; ++i) {
                const uint8_t want = i >= c.offset && i < c.offset + c.bytes ? src[i] : kSentinel;
                ASSERT_EQ(out[i], want) << "byte " << i << (from_pinned ? " (alloc_host end)" : " (other host memory)");
            }
            // The device buffers too: nothing written outside the copied range.
            std::vector<uint8_t> d2(cap);
            gpu->download(d2.data(), dev2, cap);
            gpu->sync();
            for (uint64_t i = 0; i < cap; ++i) {
                const bool in = i >= at2 && i < at2 + c.bytes;
                ASSERT_EQ(d2[i], in ? src[c.offset + i - at2] : kSentinel) << "device byte " << i;
            }
        }
    }
    // copy_rows: short (a kernel) and long (the copy engine), rows narrower than their pitches.
    for (const auto& [width, rows] : {std::pair<int64_t, int64_t>{4, 1}, {4, 7}, {37, 3}, {1000, 20}, {5000, 4}}) {
        SCOPED_TRACE("copy_rows " + std::to_string(width) + " x " + std::to_string(rows));
        const int64_t ld_src = width + 5, ld_dst = width + 11;
        const std::vector<float> x = bgtest::uniform(rng_, ld_src * rows, -1.0f, 1.0f);
        auto* d_src = static_cast<float*>(gpu->alloc(ld_src * rows * sizeof(float)));
        auto* d_dst = static_cast<float*>(gpu->alloc(ld_dst * rows * sizeof(float)));
        const std::vector<float> fill(static_cast<size_t>(ld_dst * rows), -7.0f);
        gpu->upload(d_src, x.data(), x.size() * sizeof(float));
        gpu->upload(d_dst, fill.data(), fill.size() * sizeof(float));
        gpu->copy_rows(d_dst, ld_dst, d_src, ld_src, width, rows);
        std::vector<float> got(fill.size());
        gpu->download(got.data(), d_dst, got.size() * sizeof(float));
        gpu->sync();
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < ld_dst; ++c)
                ASSERT_EQ(got[r * ld_dst + c], c < width ? x[r * ld_src + c] : -7.0f) << "row " << r << " col " << c;
    }
    gpu->free_host(pinned);
    gpu->free_host(pinned_out);
}
