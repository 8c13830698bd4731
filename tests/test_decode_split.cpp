// --decode-experts (issue 24): where a decode step's host-resident experts are computed.
//  - The split is a pure function of the rates and token counts (runtime/decode_split.h).
//  - On the tiny model, CPU backend: gpu, cpu and hybrid give the same tokens; every host-resident
//    expert byte of decode is either copied or computed by the CPU in place, never both; cpu
//    copies only what came from disk; prefill uses the CPU path only where its calls are no larger
//    than --host-expert-positions (a short prompt), and then gives the tokens of the GPU path.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_fixture.h"
#include "tiny_decode_run.h"
#include "runtime/decode_split.h"
#include "runtime/session.h"
#include "util/check.h"

namespace {

using bg::DecodeExperts;

std::vector<uint8_t> split(DecodeExperts mode, const bg::HostPathRates& r, const std::vector<int32_t>& tokens,
                           int64_t* chosen = nullptr) {
    std::vector<uint8_t> on_cpu(tokens.size(), 7);
    std::vector<int32_t> order(tokens.size(), -1);
    const int64_t c = bg::split_host_experts(mode, r, tokens.data(), static_cast<int64_t>(tokens.size()), on_cpu.data(),
                                             order.data())
                          .on_cpu;
    int64_t n = 0;
    for (uint8_t v : on_cpu) {
        EXPECT_TRUE(v == 0 || v == 1);
        n += v;
    }
    EXPECT_EQ(n, c);
    if (chosen) *chosen = c;
    return on_cpu;
}

// The H200's measured shape of it: one MXFP4 expert 0.51 ms on 16 cores, its copy 0.36 ms.
bg::HostPathRates h200_like() {
    bg::HostPathRates r;
    r.cpu_ms_one = 0.51;
    r.cpu_ms_per_token = 0.2;
    r.copy_ms = 0.36;
    r.gpu_ms = 0.04;
    return r;
}

TEST(DecodeSplit, GpuNoneCpuAll) {
    const std::vector<int32_t> tokens = {1, 1, 1, 1};
    EXPECT_EQ(split(DecodeExperts::kGpu, h200_like(), tokens), std::vector<uint8_t>(4, 0));
    EXPECT_EQ(split(DecodeExperts::kCpu, h200_like(), tokens), std::vector<uint8_t>(4, 1));
    EXPECT_TRUE(split(DecodeExperts::kHybrid, h200_like(), {}).empty());
}

TEST(DecodeSplit, HybridEndsBothPathsTogether) {
    // 4 experts: 0 on the CPU ends at 4 x 0.36 + 0.04 = 1.48 ms; 1: max(0.51, 1.12); 2: max(1.02,
    // 0.76) = 1.02; 3: max(1.53, 0.40). Two go to the CPU.
    int64_t c = -1;
    split(DecodeExperts::kHybrid, h200_like(), {1, 1, 1, 1}, &c);
    EXPECT_EQ(c, 2);
    // A CPU much slower than a copy takes none; one much faster takes all.
    bg::HostPathRates slow = h200_like();
    slow.cpu_ms_one = 10;
    split(DecodeExperts::kHybrid, slow, {1, 1, 1, 1}, &c);
    EXPECT_EQ(c, 0);
    bg::HostPathRates fast = h200_like();
    fast.cpu_ms_one = 0.01;
    split(DecodeExperts::kHybrid, fast, {1, 1, 1, 1}, &c);
    EXPECT_EQ(c, 4);
}

// The probe (kCpuProbeEveryLayers): where the rates give the CPU none, it takes the expert with
// the fewest tokens (the first of them); where they give it some, the probe changes nothing; the
// other modes ignore it.
TEST(DecodeSplit, ACpuProbeTakesOneExpertOnlyWhereTheRatesGiveTheCpuNone) {
    bg::HostPathRates slow = h200_like();
    slow.cpu_ms_one = 10;
    const std::vector<int32_t> tokens = {2, 1, 3, 1};
    std::vector<uint8_t> on_cpu(tokens.size()), want(tokens.size());
    std::vector<int32_t> order(tokens.size());
    EXPECT_EQ(bg::split_host_experts(DecodeExperts::kHybrid, slow, tokens.data(), 4, on_cpu.data(), order.data(), false).on_cpu,
              0);
    EXPECT_EQ(on_cpu, (std::vector<uint8_t>{0, 0, 0, 0}));
    bool probed = false;
    EXPECT_EQ(bg::split_host_experts(DecodeExperts::kHybrid, slow, tokens.data(), 4, on_cpu.data(), order.data(), true,
                                     &probed)
                  .on_cpu,
              1);
    EXPECT_EQ(on_cpu, (std::vector<uint8_t>{0, 1, 0, 0})) << "the first of the fewest-token experts";
    EXPECT_TRUE(probed);
    for (bool probe : {false, true}) {
        probed = true;
        EXPECT_EQ(bg::split_host_experts(DecodeExperts::kHybrid, h200_like(), tokens.data(), 4, on_cpu.data(),
                                         order.data(), probe, &probed)
                      .on_cpu,
                  2);
        EXPECT_EQ(on_cpu, (std::vector<uint8_t>{0, 1, 0, 1})) << "probe " << probe;
        EXPECT_FALSE(probed) << "the rates gave the CPU two: no probe";
        EXPECT_EQ(bg::split_host_experts(DecodeExperts::kGpu, slow, tokens.data(), 4, on_cpu.data(), order.data(), probe).on_cpu,
                  0);
        EXPECT_EQ(bg::split_host_experts(DecodeExperts::kCpu, slow, tokens.data(), 4, on_cpu.data(), order.data(), probe).on_cpu,
                  4);
    }
    EXPECT_EQ(bg::split_host_experts(DecodeExperts::kHybrid, slow, tokens.data(), 0, on_cpu.data(), order.data(), true).on_cpu,
              0);
}

TEST(DecodeSplit, FewestTokensGoToTheCpuAndTheChoiceIsPure) {
    // The CPU's cost grows with tokens: the two single-token experts (positions 1 and 3) go.
    const std::vector<int32_t> tokens = {3, 1, 2, 1};
    const std::vector<uint8_t> a = split(DecodeExperts::kHybrid, h200_like(), tokens);
    EXPECT_EQ(a, (std::vector<uint8_t>{0, 1, 0, 1}));
    EXPECT_EQ(split(DecodeExperts::kHybrid, h200_like(), tokens), a);
    // Equal token counts: earlier in the list first.
    EXPECT_EQ(split(DecodeExperts::kHybrid, h200_like(), {2, 2, 2, 2}),
              (std::vector<uint8_t>{1, 0, 0, 0}));  // 0.71 vs 3 x 0.36 + 0.04 = 1.12: one; two: max(1.42, 0.76)
}

TEST(DecodeSplit, SplitStepsAreWholeBlocksOfDown) {
    EXPECT_EQ(bg::split_step_rows(2304, 32), 192) << "MXFP4, Q8_0: 12 steps";
    EXPECT_EQ(bg::split_step_rows(2304, 256), 256) << "the K-quants: 9 steps";
    EXPECT_EQ(bg::split_step_rows(64, 32), 32);
    EXPECT_EQ(bg::split_step_rows(32, 32), 0) << "one step: nothing to split";
    EXPECT_EQ(bg::split_step_rows(256, 256), 0);
    EXPECT_EQ(bg::split_step_rows(2048, 1), 128) << "BF16: 32 at least, at most 16 steps";
}

// An H100 machine's rates of 2026-12-06 07:54 (cpu 0.24 ms an expert, copy 0.355 ms) with four
// host experts: whole, three on the CPU end at 0.72 ms; split, two whole and 7/12 of a third end
// at max(0.48 + 0.14, 0.355 + (1/3 + 2/3 x 5/12) x 0.355 + 0.03) = 0.62 ms (half: max(0.60,
// 0.622)), with a part's copy a third of a whole one (down) plus its rows' share of the rest.
bg::HostPathRates h100_0754() {
    bg::HostPathRates r;
    r.cpu_ms_one = r.cpu_ms_per_token = 0.24;
    r.copy_ms = 0.355;
    r.gpu_ms = 0.03;
    r.part_copy_fixed = 1.0 / 3;
    r.part_copy_slope = 2.0 / 3;
    return r;
}

TEST(DecodeSplit, OneExpertSplitWhereItEndsBothPathsSooner) {
    const bg::SplitRows rows{2304, 192};
    const std::vector<int32_t> tokens = {1, 1, 1, 1};
    std::vector<uint8_t> on_cpu(4);
    std::vector<int32_t> order(4);
    const bg::HostSplit hs =
        bg::split_host_experts(DecodeExperts::kHybrid, h100_0754(), tokens.data(), 4, on_cpu.data(), order.data(), false,
                               nullptr, rows);
    EXPECT_EQ(hs.on_cpu, 2);
    EXPECT_EQ(on_cpu, (std::vector<uint8_t>{1, 1, 0, 0}));
    EXPECT_EQ(hs.split, 2) << "the next by tokens, then by position";
    EXPECT_EQ(hs.cpu_rows, 7 * 192);
    // The chosen end is no later than any other choice of whole experts and steps.
    const bg::HostPathRates r = h100_0754();
    const auto end = [&](int64_t c, int64_t q) {  // c whole on the CPU, q steps of the next
        const double f = q / 12.0;
        const double cpu = c * r.cpu_ms_one + f * r.cpu_ms_one;
        const double rest = (4 - c - (q > 0 ? 1 : 0)) * r.copy_ms;
        const double copy = rest + (q > 0 ? r.part_copy_ms(1 - f) : 0) + (c + (q > 0) < 4 || q > 0 ? r.gpu_ms : 0);
        return std::max(cpu, copy);
    };
    const double chosen = end(2, 7);
    for (int64_t c = 0; c <= 4; ++c)
        for (int64_t q = 0; q < (c < 4 ? 12 : 1); ++q) EXPECT_LE(chosen, end(c, q) + 1e-12) << c << " " << q;
    // Pure: the same inputs, the same answer.
    const bg::HostSplit again =
        bg::split_host_experts(DecodeExperts::kHybrid, h100_0754(), tokens.data(), 4, on_cpu.data(), order.data(), false,
                               nullptr, rows);
    EXPECT_EQ(again.split, hs.split);
    EXPECT_EQ(again.cpu_rows, hs.cpu_rows);
}

TEST(DecodeSplit, NoSplitWithoutStepsRatioOrGainAndNeverOutsideHybrid) {
    const std::vector<int32_t> tokens = {1, 1, 1, 1};
    std::vector<uint8_t> on_cpu(4);
    std::vector<int32_t> order(4);
    const auto split_of = [&](DecodeExperts mode, const bg::HostPathRates& r, bg::SplitRows rows, int64_t n = 4) {
        return bg::split_host_experts(mode, r, tokens.data(), n, on_cpu.data(), order.data(), false, nullptr, rows);
    };
    const bg::SplitRows rows{2304, 192};
    EXPECT_EQ(split_of(DecodeExperts::kHybrid, h100_0754(), {}).split, -1) << "no steps";
    bg::HostPathRates unmeasured = h100_0754();
    unmeasured.part_copy_fixed = -1;
    EXPECT_EQ(split_of(DecodeExperts::kHybrid, unmeasured, rows).split, -1);
    EXPECT_EQ(split_of(DecodeExperts::kGpu, h100_0754(), rows).split, -1);
    EXPECT_EQ(split_of(DecodeExperts::kCpu, h100_0754(), rows).split, -1);
    // Whole experts end both paths together (two on the CPU 0.48, two copies 0.48 + 0.0): no gain.
    bg::HostPathRates even = h100_0754();
    even.copy_ms = 0.24;
    even.gpu_ms = 0;
    const bg::HostSplit hs = split_of(DecodeExperts::kHybrid, even, rows);
    EXPECT_EQ(hs.split, -1);
    EXPECT_EQ(hs.on_cpu, 2);
    // A part whose copy costs a whole one whatever its rows never pays.
    bg::HostPathRates dear = h100_0754();
    dear.part_copy_fixed = 1;
    dear.part_copy_slope = 0;
    EXPECT_EQ(split_of(DecodeExperts::kHybrid, dear, rows).split, -1);
    // A single host expert: split where the CPU alone or the copy alone is slower than both.
    const bg::HostSplit one = split_of(DecodeExperts::kHybrid, h100_0754(), rows, 1);
    EXPECT_EQ(one.on_cpu, 0);
    EXPECT_EQ(one.split, 0);
    EXPECT_GT(one.cpu_rows, 0);
    EXPECT_LT(one.cpu_rows, 2304);
}

TEST(DecodeSplit, AutoIsHybridOnAGpuOnly) {
    EXPECT_EQ(bg::resolve_decode_experts(DecodeExperts::kAuto, true), DecodeExperts::kHybrid);
    EXPECT_EQ(bg::resolve_decode_experts(DecodeExperts::kAuto, false), DecodeExperts::kGpu);
    EXPECT_EQ(bg::resolve_decode_experts(DecodeExperts::kCpu, false), DecodeExperts::kCpu);
    EXPECT_EQ(bg::host_expert_positions(DecodeExperts::kGpu, 1), 0);
    EXPECT_EQ(bg::host_expert_positions(DecodeExperts::kGpu, 8), 0);
    EXPECT_EQ(bg::host_expert_positions(DecodeExperts::kHybrid, 1), 1);
    EXPECT_EQ(bg::host_expert_positions(DecodeExperts::kCpu, 8), 8);
}

TEST(DecodeSplit, SameTokensOnEveryPathAndEachHostByteTakesOnePath) {
    for (bg::RoutingPolicy routing : {bg::RoutingPolicy::kExact, bg::RoutingPolicy::kResidentOnly}) {
        SCOPED_TRACE(bg::enum_name(routing));
        std::vector<int32_t> want;
        for (DecodeExperts mode : {DecodeExperts::kGpu, DecodeExperts::kCpu, DecodeExperts::kHybrid}) {
            SCOPED_TRACE(bg::enum_name(mode));
            bg::Session s(bgtest::tiny_decode_run(mode, routing, 8));
            const nlohmann::json m = s.run(false);
            EXPECT_EQ(m["config"]["decode_experts"], bg::enum_name(mode));
            if (want.empty()) want = s.generated();
            EXPECT_EQ(s.generated(), want);
            EXPECT_EQ(s.generated().size(), 8u);

            const nlohmann::json& d = m["decode"];
            const nlohmann::json& x = d["experts"];
            const uint64_t cpu = x["cpu_bytes"], pcie = x["pcie_bytes"], host = x["host_hit_bytes"], disk = x["disk_bytes"];
            EXPECT_EQ(cpu + pcie, host + disk) << "a host or disk expert byte is copied or computed in place, once";
            EXPECT_GT(host, 0u) << "no host-resident expert in decode: no test";
            EXPECT_EQ(d["host_experts"]["cpu_bytes"], x["cpu_bytes"]);
            EXPECT_LE(x["cpu_probes"].get<uint64_t>(), x["cpu_experts"].get<uint64_t>());
            if (mode != DecodeExperts::kHybrid) {
                EXPECT_EQ(x["cpu_probes"].get<uint64_t>(), 0u);
            }
            // Every expert the store copied is one it found in host memory or read from disk and
            // did not hand to the CPU; each copy is a whole expert (the tiny model's experts are
            // all one size, and of 32 hidden rows, too few to split: store_test splits them).
            const uint64_t copied = d["host_experts"]["copied_experts"];
            EXPECT_EQ(copied, x["copied_experts"].get<uint64_t>());
            EXPECT_EQ(x["split_experts"].get<uint64_t>(), 0u);
            EXPECT_EQ(copied, x["host_hits"].get<uint64_t>() + x["disk_fetches"].get<uint64_t>() -
                                  x["cpu_experts"].get<uint64_t>());
            EXPECT_EQ(pcie, copied * s.model().expert_bytes_each(0));
            if (mode == DecodeExperts::kGpu) {
                EXPECT_EQ(cpu, 0u);
                EXPECT_TRUE(d["host_experts"]["rates_by_layer"].empty());
            } else {
                ASSERT_EQ(d["host_experts"]["rates_by_layer"].size(), static_cast<size_t>(s.model().hp().n_layer));
                for (const auto& r : d["host_experts"]["rates_by_layer"]) {
                    EXPECT_GT(r["cpu_ms_one"].get<double>(), 0.0);
                    EXPECT_GT(r["copy_ms"].get<double>(), 0.0);
                    EXPECT_GT(r["gpu_ms"].get<double>(), 0.0);
                    EXPECT_GT(r["gpu_in_place_ms"].get<double>(), 0.0);
                }
            }
            if (mode == DecodeExperts::kCpu) {
                EXPECT_EQ(cpu, host) << "every host-resident expert on the CPU";
                EXPECT_EQ(pcie, disk) << "only what came from disk is copied";
                EXPECT_GT(d["host_experts"]["cpu_busy_ms"].get<double>(), 0.0);
            }
            for (const auto& p : m["passes"]) EXPECT_EQ(p["experts"]["cpu_experts"], 0u) << "prefill keeps the GPU path";
        }
    }
}

// A prompt no longer than --host-expert-positions is computed as decode is: its host-resident
// experts go where --decode-experts says, in prefill too, with the same tokens as the GPU path.
// Longer prompts keep the GPU path. (4 positions: 24 routing slots, below the 4 a resident
// expert at which resident-only prefill copies a layer's host experts before its routing.)
TEST(DecodeSplit, ShortPromptsTakeTheHostPathsUpToHostExpertPositions) {
    for (DecodeExperts mode : {DecodeExperts::kCpu, DecodeExperts::kHybrid}) {
        SCOPED_TRACE(bg::enum_name(mode));
        bg::RunConfig gpu = bgtest::tiny_decode_run(DecodeExperts::kGpu, bg::RoutingPolicy::kResidentOnly, 4);
        gpu.prompt_tokens = 4;
        bg::Session sg(gpu);
        const nlohmann::json mg = sg.run(false);

        bg::RunConfig c = gpu;
        c.decode_experts = mode;
        c.host_expert_positions = 4;
        bg::Session s(c);
        const nlohmann::json m = s.run(false);
        EXPECT_EQ(m["config"]["host_expert_positions"], 4);
        EXPECT_EQ(s.generated(), sg.generated());
        ASSERT_EQ(m["passes"].size(), 2u);
        ASSERT_EQ(mg["passes"].size(), 2u);
        for (size_t i = 0; i < 2; ++i) {
            const nlohmann::json& x = m["passes"][i]["experts"];
            const uint64_t cpu = x["cpu_bytes"], pcie = x["pcie_bytes"], host = x["host_hit_bytes"],
                           disk = x["disk_bytes"];
            EXPECT_EQ(cpu + pcie, host + disk)
                << "pass " << i << ": each host or disk expert byte takes one path, once";
            EXPECT_EQ(mg["passes"][i]["experts"]["cpu_bytes"], 0u);
        }
        // The warm pass finds every resident expert in its slot: the host-resident ones of a
        // 4-position call go to the CPU (all of them under cpu; under hybrid the rates decide, and
        // a CPU that the rates give none is probed once in kCpuProbeEveryLayers layers).
        const nlohmann::json& warm = m["passes"][1]["experts"];
        EXPECT_GT(warm["host_hit_bytes"].get<uint64_t>(), 0u) << "no host-resident expert in the warm pass: no test";
        if (mode == DecodeExperts::kCpu) {
            EXPECT_EQ(warm["cpu_bytes"], warm["host_hit_bytes"]);
            EXPECT_EQ(warm["pcie_bytes"].get<uint64_t>(), 0u);
        }
        // The start-up rates price an expert's further tokens from a timed call of 4 of them.
        for (const auto& r : m["decode"]["host_experts"]["rates_by_layer"])
            EXPECT_GT(r["cpu_ms_per_token"].get<double>(), 0.0);

        // One position more than the prompt allows: prefill keeps the GPU path.
        bg::RunConfig longer = c;
        longer.host_expert_positions = 3;
        bg::Session sl(longer);
        const nlohmann::json ml = sl.run(false);
        EXPECT_EQ(sl.generated(), sg.generated());
        for (const auto& p : ml["passes"]) EXPECT_EQ(p["experts"]["cpu_experts"], 0u);
    }
}

TEST(DecodeSplit, HostExpertPositionsOutsideItsRangeIsRefused) {
    for (int64_t p : {int64_t{0}, bg::kMaxHostExpertPositions + 1}) {
        bg::RunConfig c = bgtest::tiny_decode_run(DecodeExperts::kHybrid, bg::RoutingPolicy::kResidentOnly, 1);
        c.host_expert_positions = p;
        try {
            bg::Session s(c);
            ADD_FAILURE() << "accepted " << p;
        } catch (const bg::Error& e) {
            EXPECT_NE(std::string(e.what()).find("--host-expert-positions"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
