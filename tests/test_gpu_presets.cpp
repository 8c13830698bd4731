// Each llama-quantize preset's tiny model (make-model --quant; tests/model_fixture.h's
// tiny-blocks scale, whose widths are whole 256-weight blocks so the K-quant and IQ2_XXS types
// land on experts, dense matrices, output head, embedding and Engram table) on the GPU against
// the CPU backend.
//
// What is asserted is what test_gpu_e2e.cpp asserts of the MXFP4 models, for the same reasons
// (the top of that file): on the precise path (`--matmul precise`) the same experts on >= 99.5 %
// of routing decisions and the same greedy tokens; the fast path's agreement, layer by layer, is
// reported, not asserted: its activations are rounded to int8 on one side of a block boundary or
// the other, and the K-quants may take the integer path on one backend and a dequantising one on
// the other.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cuda/cuda_device.cuh"
#include "cuda/dequant.cuh"
#include "model_fixture.h"
#include "routing_agreement.h"
#include "runtime/session.h"

namespace {

bg::RunConfig preset_cfg(bg::QuantPreset p, const char* matmul) {
    bg::RunConfig c;
    c.model_path = bgtest::preset_model(p);
    c.prompt_tokens = 64;
    c.prompt_seed = 5;
    c.gen = std::string(matmul) == "precise" ? 6 : 0;  // fast: prompt positions only
    c.routing = bg::RoutingPolicy::kExact;
    c.slots = 8;
    c.hot = 2;
    c.transient_slots = 6;
    c.vram_budget_mib = 4096;
    c.matmul = bg::parse_enum<bg::MatmulMode>(matmul);
    return c;
}

TEST(GpuPresets, SameExpertsAndTokensAsTheCpuBackend) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (bg::QuantPreset p : bg::all_quant_presets())
        for (const char* mode : {"precise", "fast"}) {
            SCOPED_TRACE(std::string(bg::quant_preset_name(p)) + " " + mode);
            const bg::RunConfig c = preset_cfg(p, mode);
            bg::Session cpu(c);
            bg::Session gpu(c, &bg::cuda::cuda_device());
            nlohmann::json m;
            std::vector<bgtest::RoutingAgreement> by_layer;
            const bgtest::RoutingAgreement agree = bgtest::run_both_recording_routes(cpu, gpu, &m, &by_layer);
            std::printf("  %-9s %-7s routing agreement %.5f (%zu of %zu); tokens %s; by layer:",
                        bg::quant_preset_name(p), mode, agree.fraction(), agree.same, agree.total,
                        cpu.generated() == gpu.generated() ? "equal" : "differ");
            for (const auto& l : by_layer) std::printf(" %.2f", l.fraction());
            std::printf("\n");
            EXPECT_EQ(m["engine"]["backend"], "cuda");
            if (std::string(mode) != "precise") continue;
            EXPECT_GE(agree.fraction(), bgtest::kRoutingAgreement) << agree.same << " of " << agree.total;
            ASSERT_EQ(cpu.generated().size(), 6u);
            EXPECT_EQ(cpu.generated(), gpu.generated());
        }
}

}  // namespace
