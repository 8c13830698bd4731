// Which path the CUDA matmul takes per weight (backend/matmul_plan.h) and the memory the plan
// prints for it, without a device: the CUDA ops allocate exactly cuda_ops_device_bytes of the
// same limits (checked at reserve and, on a GPU, by test_gpu_cuda_ops and every run's plan ==
// live allocations), so these numbers are what a GPU run holds.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/ops.h"
#include "model/forward_layout.h"
#include "model_fixture.h"
#include "runtime/memory_plan.h"

namespace {

using bg::GgmlType;

TEST(MatmulPlan, PathsByTypeShapeAndAddress) {
    EXPECT_TRUE(bg::fused_matmul_takes(GgmlType::MXFP4, 64, 3));
    EXPECT_TRUE(bg::fused_matmul_takes(GgmlType::Q8_0, 64, 0));
    EXPECT_TRUE(bg::fused_matmul_takes(GgmlType::BF16, 96, 2));
    EXPECT_FALSE(bg::fused_matmul_takes(GgmlType::BF16, 96, 1)) << "odd address";
    EXPECT_FALSE(bg::fused_matmul_takes(GgmlType::BF16, 80, 0)) << "rows not whole 32-blocks";
    EXPECT_FALSE(bg::fused_matmul_takes(GgmlType::F16, 64, 0));
    EXPECT_FALSE(bg::fused_matmul_takes(GgmlType::F32, 64, 0));
    EXPECT_TRUE(bg::sgemm_direct(GgmlType::F32, 4));
    EXPECT_FALSE(bg::sgemm_direct(GgmlType::F32, 2));

    // --matmul precise: MXFP4, Q8_0 and BF16 through the fused kernels.
    bg::MatmulNeeds n;
    n.mode = bg::MatmulMode::kPrecise;
    n.add_matrix(GgmlType::F32, 128, 384, 0);  // the router: cuBLAS in place, no scratch
    EXPECT_TRUE(n.sgemm);
    EXPECT_EQ(n.dequant_bytes, 0u);
    EXPECT_EQ(n.quant_max_cols, 0);
    n.add_matrix(GgmlType::BF16, 512, 24, 0);
    EXPECT_EQ(n.quant_max_cols, 512);
    n.add_matrix(GgmlType::F16, 100, 7, 0);  // dequantised whole
    EXPECT_EQ(n.dequant_bytes, 100u * 7 * 4);
    n.add_matrix(GgmlType::F16, 5120, 129280, 0);  // capped, at least one row
    EXPECT_EQ(n.dequant_bytes, bg::kMaxDequantScratchBytes);
    // Experts: one fused type for all three, else unfused (each matrix on its own path).
    bg::MatmulNeeds e;
    e.mode = bg::MatmulMode::kPrecise;
    EXPECT_TRUE(e.add_expert(GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4, 1024, 768));
    EXPECT_EQ(e.quant_max_ff, 768);
    EXPECT_EQ(e.quant_max_cols, 1024);
    EXPECT_FALSE(e.sgemm);
    EXPECT_FALSE(e.add_expert(GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::F16, 1024, 768));
    EXPECT_TRUE(e.sgemm);
    EXPECT_EQ(e.dequant_bytes, 1024u * 768 * 4);
    EXPECT_EQ(e.quant_max_ff, 768) << "the unfused expert's gate and up still go through the fused matmul";
    EXPECT_EQ(e.int8_max_cols, 0) << "precise mode never takes the integer kernels";

    // --matmul fast (the default): MXFP4 and Q8_0 through the integer kernels, BF16 still fused.
    bg::MatmulNeeds f;
    EXPECT_EQ(f.mode, bg::MatmulMode::kFast);
    f.add_matrix(GgmlType::Q8_0, 1280, 5120, 0);
    EXPECT_EQ(f.int8_max_cols, 1280);
    EXPECT_EQ(f.quant_max_cols, 0);
    f.add_matrix(GgmlType::BF16, 512, 24, 0);
    EXPECT_EQ(f.quant_max_cols, 512);
    EXPECT_TRUE(f.int8_takes(GgmlType::MXFP4, 64));
    EXPECT_FALSE(f.int8_takes(GgmlType::MXFP4, 80)) << "rows not whole 32-blocks";
    EXPECT_FALSE(f.int8_takes(GgmlType::BF16, 64));
    // Experts: gate and up one int8 type, down any int8 type (llama-quantize puts down a step above).
    EXPECT_TRUE(f.add_expert(GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::Q8_0, 2048, 768));
    EXPECT_EQ(f.int8_max_cols, 2048);
    EXPECT_EQ(f.int8_max_ff, 768);
    EXPECT_FALSE(f.add_expert(GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::MXFP4, 1024, 768))
        << "gate and up share one pass, so one type";
    EXPECT_TRUE(f.add_expert(GgmlType::BF16, GgmlType::BF16, GgmlType::BF16, 1024, 768));
    EXPECT_EQ(f.quant_max_ff, 768) << "BF16 experts take the fused kernels";
}

const bg::MemoryItem* item(const bg::MemoryPlan& p, const std::string& prefix) {
    for (const bg::MemoryItem& i : p.items)
        if (i.what.rfind(prefix, 0) == 0) return &i;
    return nullptr;
}

// The full scale (Q8_0 dense, MXFP4 experts, F32 router): one workspace for the widest input
// (the mHC mixes' 4 x 5120) and the experts' 2304, the integer kernels' by default, the fused
// kernels' with --matmul precise; no dequantisation scratch.
TEST(MatmulPlan, FullScaleHoldsTheFusedWorkspaceOnly) {
    const bg::ModelShape shape = bg::shape_of(bg::load_scale(bgtest::source_path("scenarios/models/full.json")));
    bg::RunConfig cfg;
    cfg.transient_slots = 12;
    const bg::MemoryPlan f = bg::plan_memory(shape, cfg, true, 64, 20, 5);
    const bg::MemoryItem* i8 = item(f, "matmul workspace");
    ASSERT_NE(i8, nullptr);
    EXPECT_EQ(i8->what, "matmul workspace (integer kernels)");
    EXPECT_EQ(i8->bytes, bg::int8_workspace_bytes(4 * 5120, 2304));
    EXPECT_LT(i8->bytes, uint64_t{12} << 20);
    cfg.matmul = bg::MatmulMode::kPrecise;
    const bg::MemoryPlan p = bg::plan_memory(shape, cfg, true, 64, 20, 5);
    const bg::MemoryItem* m = item(p, "matmul workspace");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->what, "matmul workspace (fused kernels)");
    EXPECT_EQ(m->bytes, bg::quant_workspace_bytes(4 * 5120, 2304));
    EXPECT_LT(m->bytes, uint64_t{12} << 20);
    // The CPU plan holds none of it.
    const bg::MemoryPlan c = bg::plan_memory(shape, cfg, false, 64, 20, 5);
    EXPECT_EQ(item(c, "matmul workspace"), nullptr);
}

// F16 dense weights: the scratch comes back, sized by the largest F16 matrix (capped).
TEST(MatmulPlan, F16DenseWeightsBringTheDequantisationScratch) {
    bg::ModelScale s = bg::load_scale(bgtest::source_path("scenarios/models/ci.json"));
    s.dense_type = GgmlType::F16;
    const bg::ModelShape shape = bg::shape_of(s);
    bg::RunConfig cfg;
    const bg::MemoryPlan p = bg::plan_memory(shape, cfg, true, 64, 20, 5);
    const bg::MemoryItem* m = item(p, "matmul workspace");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->what, "matmul workspace (integer kernels) and dequantisation scratch");
    // ci: the output head (n_vocab x 128) is the largest F16 matrix; experts stay MXFP4 (integer
    // kernels by default).
    const uint64_t head = static_cast<uint64_t>(s.hp.n_vocab) * 128 * 4;
    EXPECT_EQ(m->bytes, bg::int8_workspace_bytes(s.hp.n_ff_exp > 128 ? s.hp.n_ff_exp : 128, s.hp.n_ff_exp) +
                            std::min(head, bg::kMaxDequantScratchBytes));
}

}  // namespace
