// --sm-limit on the GPU: the backend's green context holds the SM count it reports, the
// engine's compute stream and the streams of a thread bound through Backend::bind_thread belong
// to it, and kernels launched there run on no more SMs than that (each block records %smid).
// Without a limit the same kernel spreads over more SMs. A whole run with a limit records it and
// generates the same tokens as one without. (On sm_9x a loaded module using dynamic parallelism
// would let green-context kernels share 2 more SMs, per the driver API's notes; nothing here
// loads one.)
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <set>
#include <thread>

#include "backend/sm_limit.h"
#include "cuda/check.cuh"
#include "cuda/cuda_backend.cuh"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_ops.cuh"
#include "cuda/dequant.cuh"
#include "cuda/sm_limit.cuh"
#include "model_fixture.h"
#include "runtime/session.h"
#include "util/check.h"

namespace {

constexpr int kLimit = 16;  // allowed on sm_86 (steps of 2) and sm_90 (steps of 8) alike

int device_sms() {
    int n = 0;
    BG_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
    return n;
}

CUgreenCtx green_of(cudaStream_t s) { return bg::cuda::green_context_of(s); }

// Enough blocks, each long enough, that every SM the stream may use gets some.
int blocks_for(int sms) { return 8 * sms; }

std::string ids_text(const std::vector<int>& ids) {
    std::string s;
    for (int i : ids) {
        if (!s.empty()) s += ' ';
        s += std::to_string(i);
    }
    return s;
}

TEST(GpuSmLimit, KernelsOnTheEnginesStreamsStayWithinTheLimit) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int total = device_sms();
    if (total <= kLimit) GTEST_SKIP() << "the GPU has only " << total << " SMs";
    auto backend = bg::cuda::make_cuda_backend(0, kLimit);
    const bg::SmLimit lim = backend->sm_limit();
    std::printf("  %s\n", lim.note.c_str());
    EXPECT_EQ(lim.requested, kLimit);
    EXPECT_EQ(lim.total, total);
    EXPECT_TRUE(lim.partitioned());
    EXPECT_GT(lim.used, 0);
    EXPECT_LE(lim.used, kLimit);
    EXPECT_EQ(lim.used % lim.rule.step, 0);
    {
        // The ops are made after the backend on this thread, as in a Session: their stream is
        // in the green context.
        std::unique_ptr<bg::Ops> ops = bg::cuda::make_cuda_ops();
        const cudaStream_t s = bg::cuda::compute_stream(*ops);
        const CUgreenCtx g = green_of(s);
        ASSERT_NE(g, nullptr) << "the compute stream is not in a green context";
        EXPECT_EQ(bg::cuda::sm_count_of(g), lim.used) << "the green context holds another count than reported";
        const std::vector<int> main_ids = bg::cuda::sms_seen(s, blocks_for(total));
        std::printf("  compute stream: %zu distinct SMs (limit %d): %s\n", main_ids.size(), lim.used, ids_text(main_ids).c_str());
        EXPECT_GE(main_ids.size(), 1u);
        EXPECT_LE(static_cast<int>(main_ids.size()), lim.used);

        // Another thread (as the store's streamer) binds itself and works in the same partition.
        std::vector<int> thread_ids;
        CUgreenCtx thread_green = nullptr;
        std::thread t([&] {
            backend->bind_thread();
            cudaStream_t ts = nullptr;
            BG_CUDA_CHECK(cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking));
            thread_green = green_of(ts);
            thread_ids = bg::cuda::sms_seen(ts, blocks_for(total));
            BG_CUDA_CHECK(cudaStreamDestroy(ts));
        });
        t.join();
        EXPECT_EQ(thread_green, g) << "a bound thread's stream is not in the backend's green context";
        std::printf("  bound thread's stream: %zu distinct SMs: %s\n", thread_ids.size(), ids_text(thread_ids).c_str());
        std::set<int> both(main_ids.begin(), main_ids.end());
        both.insert(thread_ids.begin(), thread_ids.end());
        EXPECT_LE(static_cast<int>(both.size()), lim.used) << "the two threads' kernels ran on different SMs";
    }
    backend.reset();
    // The thread is back in the primary context: work there may use every SM again.
    cudaStream_t s = nullptr;
    BG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    EXPECT_EQ(green_of(s), nullptr);
    EXPECT_GT(static_cast<int>(bg::cuda::sms_seen(s, blocks_for(total)).size()), kLimit);
    BG_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(GpuSmLimit, WithoutALimitTheWorkSpreadsOverMoreSms) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int total = device_sms();
    if (total <= kLimit) GTEST_SKIP() << "the GPU has only " << total << " SMs";
    auto backend = bg::cuda::make_cuda_backend(0, 0);
    const bg::SmLimit lim = backend->sm_limit();
    EXPECT_EQ(lim.requested, 0);
    EXPECT_EQ(lim.used, total);
    EXPECT_FALSE(lim.partitioned());
    std::unique_ptr<bg::Ops> ops = bg::cuda::make_cuda_ops();
    const cudaStream_t s = bg::cuda::compute_stream(*ops);
    EXPECT_EQ(green_of(s), nullptr);
    const std::vector<int> ids = bg::cuda::sms_seen(s, blocks_for(total));
    std::printf("  no limit: %zu distinct SMs of %d\n", ids.size(), total);
    EXPECT_GT(static_cast<int>(ids.size()), kLimit);
}

TEST(GpuSmLimit, TheRtx3060CountRoundsDownToWhatTheGpuAllows) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int total = device_sms();
    auto backend = bg::cuda::make_cuda_backend(0, 28);
    const bg::SmLimit lim = backend->sm_limit();
    std::printf("  %s\n", lim.note.c_str());
    EXPECT_EQ(lim.requested, 28);
    // The same arithmetic as the CPU-tested rounding, with the rule the device reported.
    EXPECT_EQ(lim.used, bg::choose_sm_count(28, total, lim.rule).used);
    int major = 0;
    BG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (total > 28) {
        EXPECT_LE(lim.used, 28);
        EXPECT_EQ(lim.used % lim.rule.step, 0);
        if (major == 9) {
            EXPECT_EQ(lim.used, 24);  // sm_90: steps of 8
        }
    }
}

TEST(GpuSmLimit, BelowTheSmallestPartitionIsAClearError) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    try {
        bg::cuda::make_cuda_backend(0, 1);
        FAIL() << "--sm-limit 1 was accepted";
    } catch (const bg::Error& e) {
        std::printf("  %s\n", e.what());
        EXPECT_NE(std::string(e.what()).find("--sm-limit 1"), std::string::npos) << e.what();
    }
}

// A whole run under the limit (the store's streamer thread included): the limit is recorded in
// the metrics, and the tokens are those of a run without it (the SMs change no result).
TEST(GpuSmLimit, ARunRecordsTheLimitAndGeneratesTheSameTokens) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int total = device_sms();
    if (total <= kLimit) GTEST_SKIP() << "the GPU has only " << total << " SMs";
    bg::RunConfig c;
    c.model_path = bgtest::ci_model();
    c.prompt_tokens = 32;
    c.prompt_seed = 3;
    c.gen = 4;
    c.passes = 2;
    c.routing = bg::RoutingPolicy::kResidentOnly;
    c.promote = true;
    c.vram_budget_mib = 4096;
    std::vector<int32_t> unlimited;
    {
        bg::Session s(c, &bg::cuda::cuda_device());
        const nlohmann::json m = s.run(false);
        EXPECT_EQ(m["engine"]["sm_limit"]["used"], total);
        unlimited = s.generated();
    }
    c.sm_limit = kLimit;
    {
        bg::Session s(c, &bg::cuda::cuda_device());
        const nlohmann::json m = s.run(false);
        EXPECT_EQ(m["config"]["sm_limit"], kLimit);
        EXPECT_EQ(m["engine"]["sm_limit"]["requested"], kLimit);
        EXPECT_LE(m["engine"]["sm_limit"]["used"].get<int>(), kLimit);
        EXPECT_EQ(m["engine"]["sm_limit"]["partitioned"], true);
        EXPECT_EQ(s.generated(), unlimited);
    }
    // And the CPU refuses the flag.
    EXPECT_THROW({ bg::Session cpu(c); }, bg::Error);
}

}  // namespace
