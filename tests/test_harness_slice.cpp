// The slice profile: a full-width model with few layers that still holds every layer role, small
// enough for a 64 GiB disk, and scenarios whose budgets give each layer the same VRAM and host
// bytes as the published PC does, plus what does not grow with layers at its full size.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "gguf/gguf.h"
#include "model/dsv41.h"
#include "model/make_model.h"
#include "model/scale.h"
#include "scenario.h"
#include "tensor/ggml_types.h"

namespace {

const std::string kRoot = BG_SOURCE_DIR;

bg::GgmlType type_of(const bg::ModelScale& s, const bg::dsv41::TensorSpec& t) {
    switch (t.cls) {
        case bg::dsv41::TensorClass::kVector: return bg::GgmlType::F32;
        case bg::dsv41::TensorClass::kExperts: return s.expert_type;
        case bg::dsv41::TensorClass::kEngramTable: return s.engram_format.type;
        case bg::dsv41::TensorClass::kEngramFp8Values:
        case bg::dsv41::TensorClass::kEngramFp8Scales: return bg::GgmlType::I8;
        case bg::dsv41::TensorClass::kMatrix: break;
    }
    return t.name.find("ffn_gate_inp") != std::string::npos ? s.router_type : s.dense_type;
}

uint64_t bytes_of(const bg::ModelScale& s, const bg::dsv41::TensorSpec& t) {
    uint64_t rows = 1;
    for (size_t i = 1; i < t.ne.size(); ++i) rows *= uint64_t(t.ne[i]);
    return bg::row_bytes(type_of(s, t), t.ne[0]) * rows;
}

// What the device holds per layer: every tensor of the layer but its experts and Engram table
// (those stream from disk), in bytes.
uint64_t layer_dense_bytes(bg::ModelScale s) {
    bg::generate_engram_params(s, 1);  // the Engram tensors' shapes come from the drawn parameters
    uint64_t b = 0;
    for (const auto& t : bg::dsv41::tensor_specs(s.hp, s.roles()))
        if (t.name.rfind("blk.", 0) == 0 && t.cls != bg::dsv41::TensorClass::kExperts &&
            !bg::dsv41::is_engram_table(t.cls))
            b += bytes_of(s, t);
    return b;
}

uint64_t expert_bytes(const bg::ModelScale& s) {
    return 3 * bg::row_bytes(s.expert_type, s.hp.n_embd) * uint64_t(s.hp.n_ff_exp);
}

uint64_t file_bytes(bg::ModelScale s) {
    bg::generate_engram_params(s, 1);
    bg::gguf::Writer w;
    bg::dsv41::write_hparams(s.hp, w);
    for (const auto& t : bg::dsv41::tensor_specs(s.hp, s.roles())) w.add_tensor(t.name, t.ne, type_of(s, t));
    return w.total_size();
}

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

TEST(HarnessSlice, ScaleIsFullWidthAndHoldsEveryLayerRole) {
    const bg::ModelScale full = bg::load_scale(kRoot + "/scenarios/models/full.json");
    const bg::ModelScale s = bg::load_scale(kRoot + "/scenarios/models/slice.json");
    EXPECT_EQ(s.hp.n_embd, full.hp.n_embd);
    EXPECT_EQ(s.hp.n_ff_exp, full.hp.n_ff_exp);
    EXPECT_EQ(s.hp.n_expert, full.hp.n_expert);
    EXPECT_EQ(s.hp.n_head, full.hp.n_head);
    EXPECT_EQ(s.hp.head_dim, full.hp.head_dim);
    EXPECT_EQ(s.hp.q_lora_rank, full.hp.q_lora_rank);
    EXPECT_EQ(s.hp.engram_dim, full.hp.engram_dim);
    EXPECT_EQ(s.expert_type, bg::GgmlType::MXFP4);
    EXPECT_EQ(expert_bytes(s), 18800640u) << "the real 18.8 MB expert";
    EXPECT_EQ(s.dense_type, bg::GgmlType::Q8_0) << "the published PC's dense weights";

    const auto roles = s.roles();
    ASSERT_EQ(roles.size(), size_t(s.hp.n_layer));
    bool window_only = false, gated_source = false, ratio2_reader = false, ratio1_source = false, key_owner = false,
         index_source = false, index_only_reader = false, engram = false, engram_window = false;
    for (size_t l = 0; l < roles.size(); ++l) {
        const auto& r = roles[l];
        const int64_t ratio = s.hp.compress_ratios[l];
        window_only |= ratio == 0;
        gated_source |= ratio == 2 && r.kv_source && r.gated;
        ratio2_reader |= ratio == 2 && !r.kv_source && !r.gated;
        ratio1_source |= ratio == 1 && r.kv_source && !r.gated;
        key_owner |= r.key_owner;
        index_source |= r.index_source;
        index_only_reader |= ratio > 0 && r.index_source && !r.kv_source && !r.key_owner;
        engram |= r.engram && ratio > 0;
        engram_window |= r.engram && ratio == 0;
    }
    EXPECT_TRUE(window_only);
    EXPECT_TRUE(gated_source);
    EXPECT_TRUE(ratio2_reader);
    EXPECT_TRUE(ratio1_source);
    EXPECT_TRUE(key_owner);
    EXPECT_TRUE(index_source);
    EXPECT_TRUE(index_only_reader);
    EXPECT_TRUE(engram);
    EXPECT_TRUE(engram_window) << "the full scale's Engram layers are one window-only and one compressed layer";
    EXPECT_LE(s.hp.n_layer, 5);

    // It has to fit the GPU machine's 64 GiB disk with room for the repository and results.
    const double gib = double(file_bytes(s)) / (kMiB * 1024.0);
    EXPECT_GT(gib, 36.0);
    EXPECT_LT(gib, 38.0);
}

// The slice's budgets are the published ones with 35 layers' worth taken out: each layer keeps
// its own dense weights and H hot slots in VRAM and its S - H host slots, as on the published PC.
TEST(HarnessSlice, ScenariosValidateWithThePublishedPCsBudgetsPerLayer) {
    bg::ModelScale full = bg::load_scale(kRoot + "/scenarios/models/full.json");
    const bg::ModelScale s = bg::load_scale(kRoot + "/scenarios/models/slice.json");
    full.dense_type = s.dense_type;  // the published PC ran Q8_0 dense weights (SPEC §4)
    const bgh::Scenario pc = bgh::load_scenario(kRoot + "/scenarios/rtx3060/seed-4a-4b.json");
    const double e = double(expert_bytes(s)) / kMiB;
    const auto vram = [&](const bg::ModelScale& m) { return double(layer_dense_bytes(m)) / kMiB + m.hp.n_layer * pc.engine.hot * e; };
    const auto host = [&](const bg::ModelScale& m) { return double(m.hp.n_layer * (pc.engine.slots - pc.engine.hot)) * e; };
    const int64_t want_vram = int64_t(std::ceil(double(pc.vram_budget_mib) - vram(full) + vram(s)));
    const int64_t want_host = int64_t(std::ceil(double(pc.host_budget_mib) - host(full) + host(s)));
    const int64_t want_cgroup = int64_t(std::ceil(double(pc.cgroup_memory_mib) - host(full) + host(s)));
    EXPECT_EQ(want_vram, 3068);  // the figures the descriptions and scenarios/README.md state
    EXPECT_EQ(want_host, 2875);

    for (const char* name : {"seed-4a-4b", "seed-500-baseline", "seed-500-optimized", "ablation", "decode"}) {
        const std::string path = kRoot + "/scenarios/slice/" + name + ".json";
        SCOPED_TRACE(path);
        bgh::Scenario sc;
        ASSERT_NO_THROW(sc = bgh::load_scenario(path));
        EXPECT_EQ(sc.profile, "slice");
        EXPECT_EQ(sc.name, name);
        EXPECT_EQ(sc.model_scale_path, kRoot + "/scenarios/models/slice.json");
        EXPECT_EQ(sc.model_path, kRoot + "/models/slice.gguf");
        EXPECT_EQ(sc.derive_layers, full.hp.n_layer);
        EXPECT_EQ(sc.vram_budget_mib, want_vram);
        EXPECT_EQ(sc.host_budget_mib, want_host);
        EXPECT_EQ(sc.cgroup_memory_mib, want_cgroup);
        EXPECT_EQ(sc.engine.slots, pc.engine.slots);
        EXPECT_EQ(sc.engine.hot, pc.engine.hot);
        EXPECT_FALSE(sc.swap);
        EXPECT_TRUE(sc.warnings.empty());
        // The shipped text prompts, as in every profile.
        EXPECT_NE(sc.prompt_text_file.find(std::string(name) == "seed-4a-4b" || std::string(name) == "decode"
                                               ? "64-tokens.txt"
                                               : "500-tokens.txt"),
                  std::string::npos);
        if (sc.mode == "run" && sc.changes.partition) {
            EXPECT_EQ(sc.changes.rule, bgh::PartitionRule::kResidentOnly);
        }
        if (std::string(name) == "seed-500-baseline") {
            EXPECT_EQ(sc.repetitions, 1);
        }
    }
}
