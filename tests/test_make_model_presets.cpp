// make-model --quant: the type mixes of llama-quantize's presets on every tensor class, the files
// they make (file type keys, exact byte counts, load and greedy decode on the CPU, the same bytes
// whatever the thread count), and the expert slots, budgets and `plan` following each layer's
// own expert bytes when layers differ.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "model/dsv41_model.h"
#include "model/quant_preset.h"
#include "model_fixture.h"
#include "runtime/memory_plan.h"
#include "runtime/session.h"
#include "util/check.h"
#include "util/file_io.h"

namespace {

using bg::GgmlType;
using bg::QuantPreset;
using bg::dsv41::TensorSpec;

constexpr QuantPreset kPresets[] = {QuantPreset::kMxfp4Moe, QuantPreset::kQ8_0, QuantPreset::kQ4_K_M,
                                    QuantPreset::kQ2_K, QuantPreset::kIq2_Xxs};

std::vector<TensorSpec> specs_of(const bg::ModelScale& s) {
    bg::ModelScale sc = s;
    bg::generate_engram_params(sc, 1);
    return bg::dsv41::tensor_specs(sc.hp, sc.roles());
}

std::string base_of(const std::string& name) {
    std::string n = name;
    if (n.rfind("blk.", 0) == 0) n = n.substr(n.find('.', 4) + 1);
    return n.substr(0, n.rfind('.'));
}

int layer_of(const std::string& name) {
    int l = -1;
    std::sscanf(name.c_str(), "blk.%d.", &l);
    return l;
}

// The tensor classes a mix is stated for. "narrow": attn_output_a and indexer.attn_k, whose rows
// (64 at the tiny-blocks scale) are not whole 256-weight blocks.
std::string class_of(const TensorSpec& s) {
    const std::string b = base_of(s.name);
    if (s.ne.size() == 1) return "1-D";
    if (b == "ffn_gate_inp") return "router";
    if (b == "engram_q" || b == "engram_k") return "engram gate scales";
    if (b == "output") return "output";
    if (b == "token_embd") return "token embedding";
    if (b == "engram_embd") return "Engram table";
    if (b == "ffn_gate_exps" || b == "ffn_up_exps") return "routed gate/up";
    if (b == "ffn_down_exps") return "routed down";
    if (b == "ffn_gate_shexp" || b == "ffn_up_shexp") return "shared gate/up";
    if (b == "ffn_down_shexp") return "shared down";
    if (b == "attn_output_a" || b == "indexer.attn_k") return "narrow";
    return "dense";  // attention, compressor, indexer, mHC, Engram projection
}

// llama.cpp's use_more_bits, written out for 6 layers: layers 2 and 5.
bool q4km_more_bits_tiny(int layer) { return layer == 2 || layer == 5; }

// The mixes at the tiny-blocks scale, by class (and by layer for ffn_down), stated by hand from
// llama.cpp's rules (model/quant_preset.h).
GgmlType want_tiny(QuantPreset p, const std::string& cls, int layer) {
    using T = GgmlType;
    if (cls == "1-D" || cls == "router" || cls == "engram gate scales") return T::F32;
    if (cls == "narrow") return T::Q8_0;  // Q8_0 itself, or the nearest fallback the engine has
    switch (p) {
        case QuantPreset::kMxfp4Moe:
            return cls == "routed gate/up" || cls == "routed down" ? T::MXFP4 : T::Q8_0;
        case QuantPreset::kQ8_0: return T::Q8_0;
        case QuantPreset::kQ4_K_M:
            if (cls == "output") return T::Q6_K;
            if (cls == "routed down" || cls == "shared down") return q4km_more_bits_tiny(layer) ? T::Q6_K : T::Q4_K;
            return T::Q4_K;
        case QuantPreset::kQ2_K:
            if (cls == "output") return T::Q6_K;
            if (cls == "routed down" || cls == "shared down") return T::Q3_K;
            return T::Q2_K;
        case QuantPreset::kIq2_Xxs:
            if (cls == "output") return T::Q5_K;
            if (cls == "token embedding") return T::Q2_K;
            return T::IQ2_XXS;  // 6 layers: the first 6/8 = 0 ffn_down tensors get Q2_K
    }
    return T::F32;
}

TEST(QuantPresets, MixOnEveryTensorClassOfTheTinyBlocksScale) {
    for (QuantPreset p : kPresets) {
        SCOPED_TRACE(bg::quant_preset_name(p));
        const bg::ModelScale s = bgtest::tiny_blocks_scale(p);
        const std::vector<TensorSpec> specs = specs_of(s);
        const std::vector<GgmlType> types = bg::tensor_types_for(s, specs);
        ASSERT_EQ(types.size(), specs.size());
        std::set<std::string> classes;
        for (size_t i = 0; i < specs.size(); ++i) {
            const std::string cls = class_of(specs[i]);
            classes.insert(cls);
            EXPECT_EQ(bg::type_name(types[i]), bg::type_name(want_tiny(p, cls, layer_of(specs[i].name))))
                << specs[i].name << " (" << cls << ")";
        }
        // Every class the mix is stated for is in the model.
        EXPECT_EQ(classes.size(), 12u);
    }
}

// The layer rules at the real 40-layer shape (the table only, no file): Q4_K_M's use_more_bits
// layers, Q2_K's Q3_K ffn_down, IQ2_XXS's first 40/8 = 5 ffn_down tensors in llama.cpp's order
// (by layer, then name: blk.0 exps and shexp, blk.1 both, blk.2's exps), no fallback anywhere.
TEST(QuantPresets, LayerRulesAtTheFullScale) {
    const bg::ModelScale full = bg::load_scale(bgtest::source_path("scenarios/models/full.json"));
    const std::set<int> more_bits = {0, 1, 2, 3, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 35, 36, 37, 38, 39};
    const std::set<std::string> iq2_q2k = {"blk.0.ffn_down_exps.weight", "blk.0.ffn_down_shexp.weight",
                                           "blk.1.ffn_down_exps.weight", "blk.1.ffn_down_shexp.weight",
                                           "blk.2.ffn_down_exps.weight"};
    const std::vector<TensorSpec> specs = specs_of(full);
    for (QuantPreset p : {QuantPreset::kQ4_K_M, QuantPreset::kQ2_K, QuantPreset::kIq2_Xxs}) {
        SCOPED_TRACE(bg::quant_preset_name(p));
        const std::vector<GgmlType> types = bg::preset_tensor_types(p, full.hp, specs);
        int downs = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
            const std::string cls = class_of(specs[i]);
            if (cls == "1-D" || cls == "router" || cls == "engram gate scales") {
                EXPECT_EQ(types[i], GgmlType::F32) << specs[i].name;
                continue;
            }
            GgmlType want;
            const bool down = cls == "routed down" || cls == "shared down";
            downs += down;
            if (cls == "output") want = p == QuantPreset::kIq2_Xxs ? GgmlType::Q5_K : GgmlType::Q6_K;
            else if (p == QuantPreset::kQ4_K_M) want = down && more_bits.count(layer_of(specs[i].name)) ? GgmlType::Q6_K : GgmlType::Q4_K;
            else if (p == QuantPreset::kQ2_K) want = down ? GgmlType::Q3_K : GgmlType::Q2_K;
            else if (cls == "token embedding" || iq2_q2k.count(specs[i].name)) want = GgmlType::Q2_K;
            else want = GgmlType::IQ2_XXS;
            EXPECT_EQ(bg::type_name(types[i]), bg::type_name(want)) << specs[i].name;
        }
        EXPECT_EQ(downs, 80);
    }
}

// A tensor keeps the preset's 256-weight type exactly where its rows are whole blocks: at the ci
// scale (128 wide) most fall back to Q8_0, the mHC mixes (512) and Engram projection (768) not.
TEST(QuantPresets, RowsNotWholeBlocksFallBackToQ8_0) {
    bg::ModelScale ci = bg::load_scale(bgtest::source_path("scenarios/models/ci.json"));
    const std::vector<TensorSpec> specs = specs_of(ci);
    for (QuantPreset p : {QuantPreset::kQ2_K, QuantPreset::kIq2_Xxs}) {
        SCOPED_TRACE(bg::quant_preset_name(p));
        const std::vector<GgmlType> types = bg::preset_tensor_types(p, ci.hp, specs);
        int kept = 0, fell = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
            const std::string cls = class_of(specs[i]);
            if (cls == "1-D" || cls == "router" || cls == "engram gate scales") continue;
            if (specs[i].ne[0] % 256 == 0) {
                EXPECT_EQ(bg::type_traits(types[i]).block_elems, 256) << specs[i].name;
                ++kept;
            } else {
                EXPECT_EQ(types[i], GgmlType::Q8_0) << specs[i].name;
                ++fell;
            }
        }
        EXPECT_GT(kept, 0);
        EXPECT_GT(fell, 0);
    }
}

TEST(QuantPresets, NamesFileTypesAndScaleKeys) {
    EXPECT_EQ(bg::parse_quant_preset("q4_k_m"), QuantPreset::kQ4_K_M);
    EXPECT_EQ(bg::parse_quant_preset("Mxfp4_Moe"), QuantPreset::kMxfp4Moe);
    try {
        bg::parse_quant_preset("Q3_K_M");
        FAIL() << "Q3_K_M is not a preset make-model writes";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << "the message lists the presets: " << e.what();
    }
    // LLAMA_FTYPE numbers (llama.cpp include/llama.h).
    const std::map<QuantPreset, uint32_t> ftype = {{QuantPreset::kMxfp4Moe, 38}, {QuantPreset::kQ8_0, 7},
                                                   {QuantPreset::kQ4_K_M, 15}, {QuantPreset::kQ2_K, 10},
                                                   {QuantPreset::kIq2_Xxs, 19}};
    for (const auto& [p, f] : ftype) {
        EXPECT_EQ(bg::quant_preset_llama_ftype(p), f);
        EXPECT_STREQ(bg::llama_ftype_name(f), bg::quant_preset_name(p));
    }
    EXPECT_STREQ(bg::llama_ftype_name(12), "Q3_K_M");
    EXPECT_EQ(bg::llama_ftype_name(5), nullptr) << "a removed type";

    // The scale's "quant" key, and never with the *_type keys it would contradict.
    const bg::ModelScale s = bg::parse_scale(R"({"quant": "q2_k"})", "t");
    ASSERT_TRUE(s.quant.has_value());
    EXPECT_EQ(*s.quant, QuantPreset::kQ2_K);
    EXPECT_THROW(bg::parse_scale(R"({"quant": "Q2_K", "dense_type": "q8_0"})", "t"), bg::Error);
    EXPECT_THROW(bg::parse_scale(R"({"quant": "Q4_K_S"})", "t"), bg::Error);

    // The preset slices: each layer's expert bytes, exactly (their descriptions state them).
    const std::map<std::string, std::vector<uint64_t>> slices = {
        {"slice-q2_k", std::vector<uint64_t>(5, 12810240)},
        {"slice-q4_k_m", {19906560, 19906560, 22947840, 19906560, 22947840}},
        {"slice", std::vector<uint64_t>(5, 18800640)}};
    for (const auto& [file, bytes] : slices)
        EXPECT_EQ(bg::shape_of(bg::load_scale(bgtest::source_path("scenarios/models/" + file + ".json"))).expert_bytes_by_layer(),
                  bytes)
            << file;

    // Without a preset, general.file_type names the preset whose mix the scale's types are.
    for (const auto& [file, want] : std::map<std::string, const char*>{
             {"full", "MXFP4_MOE"}, {"slice", "MXFP4_MOE"}, {"ci", nullptr}, {"full-bf16", nullptr}}) {
        const bg::ModelScale sc = bg::load_scale(bgtest::source_path("scenarios/models/" + file + ".json"));
        const std::vector<TensorSpec> specs = specs_of(sc);
        const auto ft = bg::file_type_preset(sc, specs, bg::tensor_types_for(sc, specs));
        // As strings: equal literals need not share an address (ASan builds keep them apart).
        EXPECT_EQ(std::string(ft ? bg::quant_preset_name(*ft) : "none"), std::string(want ? want : "none")) << file;
    }
}

uint64_t align32(uint64_t x) { return (x + 31) / 32 * 32; }

// Rows x row bytes of the tensor's type, laid end to end at 32-byte alignment, up to the file's
// last byte; each layer's expert bytes are its three slices'.
void expect_exact_bytes(const std::string& path, const bg::dsv41::Model& m) {
    const bg::gguf::Reader& r = m.gguf();
    uint64_t at = 0;
    for (const bg::gguf::TensorInfo& t : r.tensors()) {
        const uint64_t rows = t.n_elems / static_cast<uint64_t>(t.ne[0]);
        EXPECT_EQ(t.n_bytes, rows * bg::row_bytes(t.type, t.ne[0])) << t.name;
        if (at) {
            EXPECT_EQ(t.file_offset, align32(at)) << t.name;
        }
        at = t.file_offset + t.n_bytes;
    }
    EXPECT_EQ(std::filesystem::file_size(path), at);
    const auto& hp = m.hp();
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        const auto& w = m.layer(l);
        const uint64_t want = static_cast<uint64_t>(hp.n_ff_exp) * (bg::row_bytes(w.expert_types.gate, hp.n_embd) +
                                                                     bg::row_bytes(w.expert_types.up, hp.n_embd)) +
                              static_cast<uint64_t>(hp.n_embd) * bg::row_bytes(w.expert_types.down, hp.n_ff_exp);
        EXPECT_EQ(m.expert_bytes_each(l), want) << "layer " << l;
    }
}

bg::RunConfig preset_cfg(const std::string& path) {
    bg::RunConfig c;
    c.model_path = path;
    c.prompt_tokens = 24;
    c.prompt_seed = 9;
    c.gen = 6;
    c.threads = 2;
    c.slots = 8;
    c.hot = 2;
    c.transient_slots = 6;
    c.ubatch = 8;
    c.backend = bg::BackendChoice::kCpu;
    return c;
}

// Pearson correlation of two logit vectors.
double correlation(const std::vector<float>& a, const std::vector<float>& b) {
    double ma = 0, mb = 0;
    for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
    ma /= a.size(), mb /= b.size();
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return sab / std::sqrt(saa * sbb);
}

// Each preset's file: its types are the mix, its keys llama-quantize's, its bytes exact; it
// loads and decodes greedily on the CPU to the same tokens twice, with finite logits that follow
// the Q8_0 file's (every file quantises the same drawn values: a wrong decoder would not).
TEST(QuantPresetFiles, EachPresetLoadsAndDecodesTheSameTokensTwice) {
    std::vector<float> q8_logits;
    {
        bg::Session q8(preset_cfg(bgtest::preset_model(QuantPreset::kQ8_0)));
        q8_logits = q8.all_logits(bg::RoutingPolicy::kExact);
    }
    for (QuantPreset p : kPresets) {
        SCOPED_TRACE(bg::quant_preset_name(p));
        const std::string path = bgtest::preset_model(p);
        {
            const std::unique_ptr<bg::dsv41::Model> m = bg::dsv41::Model::open(path);
            const bg::gguf::Reader& r = m->gguf();
            EXPECT_EQ(r.get_u64("general.file_type"), bg::quant_preset_llama_ftype(p));
            EXPECT_EQ(r.get_u64("general.quantization_version"), 2u);
            const std::vector<TensorSpec> specs = bg::dsv41::tensor_specs(m->hp(), m->roles());
            const std::vector<GgmlType> want = bg::preset_tensor_types(p, m->hp(), specs);
            for (size_t i = 0; i < specs.size(); ++i)
                EXPECT_EQ(r.tensor(specs[i].name)->type, want[i]) << specs[i].name;
            expect_exact_bytes(path, *m);
        }
        std::vector<float> logits;
        {
            bg::Session s(preset_cfg(path));
            logits = s.all_logits(bg::RoutingPolicy::kExact);
        }
        bg::Session a(preset_cfg(path)), b(preset_cfg(path));
        a.run(false);
        b.run(false);
        ASSERT_EQ(a.generated().size(), 6u);
        EXPECT_EQ(a.generated(), b.generated());
        for (float v : logits) ASSERT_TRUE(std::isfinite(v));
        const double corr = correlation(q8_logits, logits);
        std::printf("  %-9s logits' correlation with the Q8_0 file's: %.4f\n", bg::quant_preset_name(p), corr);
        // Measured: 0.99 MXFP4_MOE, 0.98 Q4_K_M, 0.84 Q2_K, 0.79 IQ2_XXS; a wrong decoder gives about 0.
        const double floor = p == QuantPreset::kQ8_0                                     ? 0.99999
                             : p == QuantPreset::kMxfp4Moe || p == QuantPreset::kQ4_K_M ? 0.95
                                                                                         : 0.6;
        EXPECT_GT(corr, floor);
    }
}

// The searchiest quantiser (IQ2_XXS) and the K-quants with mins (Q2_K's gate and up), in one
// thread with small chunks (rows split across chunks) and in three with the default chunks.
TEST(QuantPresetFiles, SameBytesWhateverTheThreadCount) {
    const std::string dir = bgtest::test_models_dir();
    ::mkdir(dir.c_str(), 0755);
    for (QuantPreset p : {QuantPreset::kIq2_Xxs, QuantPreset::kQ2_K}) {
        SCOPED_TRACE(bg::quant_preset_name(p));
        bg::ModelScale s = bgtest::tiny_blocks_scale(p);
        s.hp.n_expert = 8;  // half the experts: the same code, half the time
        std::vector<std::string> bytes;
        for (int threads : {1, 3}) {
            bg::MakeModelConfig cfg;
            cfg.out_path = dir + "/tiny-blocks-threads-" + std::to_string(threads) + ".gguf";
            cfg.seed = 3;
            cfg.threads = threads;
            cfg.progress = false;
            if (threads == 1) cfg.chunk_bytes = 64 << 10;
            bg::make_model(s, cfg);
            bytes.push_back(bg::read_file(cfg.out_path, "model"));
            std::remove(cfg.out_path.c_str());
        }
        EXPECT_EQ(bytes[0], bytes[1]);
    }
}

// Q4_K_M at 6 layers: layers 2 and 5 have Q6_K ffn_down, so larger experts. The plan (from the
// file's header and from the scale), the store's slots and what a run allocates follow each
// layer's bytes; every slot still matches the file after passes and promotion.
TEST(QuantPresetFiles, SlotsBudgetsAndPlanFollowEachLayersExpertBytes) {
    const std::string path = bgtest::preset_model(QuantPreset::kQ4_K_M);
    const bg::ModelShape from_file = bg::shape_of_file(path);
    const bg::ModelShape from_scale = bg::shape_of(bgtest::tiny_blocks_scale(QuantPreset::kQ4_K_M));
    const auto& hp = from_file.hp;
    const uint64_t gate_up = 2 * static_cast<uint64_t>(hp.n_ff_exp) * bg::row_bytes(GgmlType::Q4_K, hp.n_embd);
    std::vector<uint64_t> want;
    for (int l = 0; l < hp.n_layer; ++l)
        want.push_back(gate_up + static_cast<uint64_t>(hp.n_embd) *
                                     bg::row_bytes(q4km_more_bits_tiny(l) ? GgmlType::Q6_K : GgmlType::Q4_K, hp.n_ff_exp));
    EXPECT_EQ(from_file.expert_bytes_by_layer(), want);
    EXPECT_EQ(from_scale.expert_bytes_by_layer(), want);
    ASSERT_EQ(from_file.tensors.size(), from_scale.tensors.size());
    for (size_t i = 0; i < from_file.tensors.size(); ++i) {
        EXPECT_EQ(from_file.tensors[i].type, from_scale.tensors[i].type) << from_file.tensors[i].name;
        EXPECT_EQ(from_file.tensors[i].n_bytes, from_scale.tensors[i].n_bytes) << from_file.tensors[i].name;
    }
    const bg::ExpertSlots es = bg::ExpertSlots::of(want);
    EXPECT_FALSE(es.uniform());

    bg::RunConfig c = preset_cfg(path);
    c.routing = bg::RoutingPolicy::kPinnedTop1;
    c.passes = 3;
    c.promote = true;
    c.verify_slots = true;
    c.lru_slots = 3;
    bg::Session s(c);
    EXPECT_EQ(s.store().slot_sizes().layer, es.layer);
    EXPECT_EQ(s.store().slot_bytes(), es.largest);
    const int64_t S = s.plan().slots, H = s.plan().hot, T = c.transient_slots;
    EXPECT_EQ(s.store().device_bytes(), static_cast<uint64_t>(H) * es.layer_sum + static_cast<uint64_t>(T) * es.largest);
    EXPECT_EQ(s.store().host_bytes(),
              static_cast<uint64_t>(S - H) * es.layer_sum + static_cast<uint64_t>(T + c.lru_slots) * es.largest);
    // The plan from the scale is what the run allocated, item by item.
    const bg::MemoryPlan plan = bg::plan_memory(from_scale, c, false, c.prompt_tokens, S, H);
    ASSERT_EQ(plan.items.size(), s.memory().items.size());
    for (size_t i = 0; i < plan.items.size(); ++i) {
        EXPECT_EQ(plan.items[i].what, s.memory().items[i].what);
        EXPECT_EQ(plan.items[i].bytes, s.memory().items[i].bytes) << plan.items[i].what;
    }
    const nlohmann::json m = s.run(false);
    for (const auto& p : m["passes"]) EXPECT_GT(p["verified_slots"].get<uint64_t>(), 0u);
    EXPECT_EQ(m["model"]["expert_bytes_by_layer"].get<std::vector<uint64_t>>(), want);
}

// The runtime reads a model through bg::MoeModel alone (model/moe_model.h). On the Q4_K_M file,
// whose layers differ in their down type, what the interface says of each layer's experts is
// what the file holds: the counts, each matrix's type, each expert's byte ranges inside its
// tensor, views of the right shapes over a slot, and the router bias the default plan reads.
TEST(QuantPresetFiles, MoeInterfaceSaysWhatTheFileHolds) {
    const std::unique_ptr<bg::dsv41::Model> owned = bg::dsv41::Model::open(bgtest::preset_model(QuantPreset::kQ4_K_M));
    const bg::dsv41::Model& m = *owned;
    const bg::MoeModel& moe = m;
    const auto& hp = m.hp();
    const bg::MoeShape& sh = moe.moe_shape();
    EXPECT_EQ(sh.n_layer, hp.n_layer);
    EXPECT_EQ(sh.n_expert, hp.n_expert);
    EXPECT_EQ(sh.n_expert_used, hp.n_expert_used);
    EXPECT_EQ(sh.n_vocab, hp.n_vocab);
    EXPECT_EQ(sh.bos_id, hp.bos_id);
    EXPECT_EQ(sh.engram_layers, hp.engram_layers);
    EXPECT_EQ(sh.engram_dim, hp.engram_dim);
    EXPECT_EQ(moe.shard_paths().size(), 1u);
    int layers_with_q6k_down = 0;
    for (int64_t l = 0; l < sh.n_layer; ++l) {
        SCOPED_TRACE(l);
        const bg::gguf::TensorInfo* t[3] = {m.gguf().tensor(bg::dsv41::layer_tensor_name(l, "ffn_gate_exps")),
                                            m.gguf().tensor(bg::dsv41::layer_tensor_name(l, "ffn_up_exps")),
                                            m.gguf().tensor(bg::dsv41::layer_tensor_name(l, "ffn_down_exps"))};
        for (const auto* x : t) ASSERT_NE(x, nullptr);
        const bg::ExpertTypes types = moe.expert_types(l);
        EXPECT_EQ(types.gate, t[0]->type);
        EXPECT_EQ(types.up, t[1]->type);
        EXPECT_EQ(types.down, t[2]->type);
        EXPECT_EQ(types.down, q4km_more_bits_tiny(static_cast<int>(l)) ? GgmlType::Q6_K : GgmlType::Q4_K);
        layers_with_q6k_down += types.down == GgmlType::Q6_K;
        const uint64_t each[3] = {bg::row_bytes(types.gate, hp.n_embd) * static_cast<uint64_t>(hp.n_ff_exp),
                                  bg::row_bytes(types.up, hp.n_embd) * static_cast<uint64_t>(hp.n_ff_exp),
                                  bg::row_bytes(types.down, hp.n_ff_exp) * static_cast<uint64_t>(hp.n_embd)};
        EXPECT_EQ(moe.expert_bytes_each(l), each[0] + each[1] + each[2]);
        for (int64_t e : {int64_t{0}, sh.n_expert / 2, sh.n_expert - 1}) {
            const bg::ExpertRanges r = moe.expert_ranges(l, e);
            const bg::ByteRange got[3] = {r.gate, r.up, r.down};
            for (int j = 0; j < 3; ++j) {
                EXPECT_EQ(got[j].bytes, each[j]);
                EXPECT_EQ(got[j].offset, t[j]->file_offset + static_cast<uint64_t>(e) * each[j]);
                EXPECT_EQ(got[j].file, 0u);
            }
        }
        std::vector<uint8_t> slot(moe.expert_bytes_each(l));
        bg::MatView g, u, d;
        moe.expert_views(l, slot.data(), &g, &u, &d);
        EXPECT_EQ(g.data, slot.data());
        EXPECT_EQ(u.data, slot.data() + each[0]);
        EXPECT_EQ(d.data, slot.data() + each[0] + each[1]);
        EXPECT_EQ(g.type, types.gate);
        EXPECT_EQ(u.type, types.up);
        EXPECT_EQ(d.type, types.down);
        EXPECT_EQ(g.cols, hp.n_embd);
        EXPECT_EQ(g.rows, hp.n_ff_exp);
        EXPECT_EQ(d.cols, hp.n_ff_exp);
        EXPECT_EQ(d.rows, hp.n_embd);
        const float* bias = moe.router_bias(l);
        ASSERT_NE(bias, nullptr);
        EXPECT_EQ(bias, m.layer(l).exp_probs_b);
        for (int64_t e = 0; e < sh.n_expert; ++e) EXPECT_TRUE(std::isfinite(bias[e]));
    }
    EXPECT_GT(layers_with_q6k_down, 0);
    EXPECT_LT(layers_with_q6k_down, sh.n_layer);
}

// The budgets' capacity: the most hot slots per layer VRAM holds and the most resident slots the
// host holds, each exactly (one more does not fit), at the published PC's budgets for the real
// shape. A Q2_K expert (Q2_K gate and up, Q3_K down: 12.8 MB) is smaller than an MXFP4 one
// (18.8 MB), so more fit in both tiers; a Q4_K_M expert is larger (4.5 bits a weight against 4.25,
// and Q6_K down on half the layers), so fewer host slots fit (VRAM holds more hot ones, since
// Q4_K_M's dense weights are Q4_K where MXFP4_MOE's are Q8_0).
TEST(QuantPresetPlan, ExpertsTheRtx3060BudgetsHoldAtEachPreset) {
    bg::RunConfig c;
    c.vram_budget_mib = c.host_budget_mib = 12288;
    c.transient_slots = 12;
    c.slots = 20;
    c.hot = 5;
    const uint64_t cgroup = 12288ull << 20;
    const bg::ModelScale full = bg::load_scale(bgtest::source_path("scenarios/models/full.json"));
    std::map<QuantPreset, bg::ExpertCapacity> caps;
    for (QuantPreset p : {QuantPreset::kMxfp4Moe, QuantPreset::kQ4_K_M, QuantPreset::kQ2_K}) {
        SCOPED_TRACE(bg::quant_preset_name(p));
        bg::ModelScale s = full;
        s.quant = p;
        const bg::ModelShape shape = bg::shape_of(s);
        const bg::ExpertCapacity cap = bg::expert_capacity(shape, c, true, 64, c.slots, c.hot, cgroup);
        ASSERT_GE(cap.max_hot, 0);
        ASSERT_GE(cap.max_slots, c.hot);
        auto vram_fits = [&](int64_t hot) {
            const bg::MemoryPlan pl = bg::plan_memory(shape, c, true, 64, std::max(hot, c.slots), hot, cgroup);
            return pl.total(bg::MemoryTier::kVram) <= pl.vram_budget_bytes;
        };
        auto host_fits = [&](int64_t slots) {
            const bg::MemoryPlan pl = bg::plan_memory(shape, c, true, 64, slots, c.hot, cgroup);
            const uint64_t host = pl.total(bg::MemoryTier::kHost);
            return host <= pl.host_budget_bytes && host + bg::MemoryPlan::kCgroupHeadroomBytes <= cgroup;
        };
        EXPECT_TRUE(vram_fits(cap.max_hot));
        EXPECT_FALSE(vram_fits(cap.max_hot + 1));
        EXPECT_TRUE(host_fits(cap.max_slots));
        EXPECT_FALSE(host_fits(cap.max_slots + 1));
        std::printf("  %-9s expert %.2f MB: VRAM holds --hot %lld, the host --slots %lld (with --hot %lld)\n",
                    bg::quant_preset_name(p), shape.expert_bytes_by_layer()[0] / 1e6, (long long)cap.max_hot,
                    (long long)cap.max_slots, (long long)c.hot);
        caps[p] = cap;
    }
    EXPECT_GT(caps[QuantPreset::kQ2_K].max_slots, caps[QuantPreset::kMxfp4Moe].max_slots);
    EXPECT_GT(caps[QuantPreset::kQ2_K].max_hot, caps[QuantPreset::kMxfp4Moe].max_hot);
    EXPECT_LT(caps[QuantPreset::kQ4_K_M].max_slots, caps[QuantPreset::kMxfp4Moe].max_slots);
}

// --slots max and --hot max resolve to the budgets' capacity: the largest that fits, one more
// does not; --hot max stays within S; a budget that holds too few, or a residency file, is an
// error naming the flag. The published PC's 12 GiB budgets with the Q2_K preset's full model.
TEST(QuantPresetPlan, SlotsAndHotMaxAreTheMostTheBudgetsHold) {
    bg::ModelScale s = bg::load_scale(bgtest::source_path("scenarios/models/full.json"));
    s.quant = QuantPreset::kQ2_K;
    const bg::ModelShape shape = bg::shape_of(s);
    const uint64_t cgroup = 12288ull << 20;
    bg::RunConfig base;
    base.vram_budget_mib = base.host_budget_mib = 12288;
    base.transient_slots = 12;
    auto problems = [&](const bg::RunConfig& c, int64_t slots, int64_t hot) {
        return bg::plan_memory(shape, c, true, 64, slots, hot, cgroup).problems();
    };
    {
        bg::RunConfig c = base;
        c.slots = bg::RunConfig::kMostThatFit;
        c.hot = 17;
        bg::resolve_most_that_fit(c, shape, true, 64, cgroup);
        EXPECT_EQ(c.hot, 17);
        EXPECT_EQ(c.slots, bg::expert_capacity(shape, c, true, 64, 17, 17, cgroup).max_slots);
        EXPECT_EQ(problems(c, c.slots, 17), "");
        EXPECT_NE(problems(c, c.slots + 1, 17), "");
        EXPECT_NE(c.residency_defaults.find("--slots max: S = " + std::to_string(c.slots)), std::string::npos);
    }
    {
        bg::RunConfig c = base;  // S follows the model (the seed's 20)
        c.hot = bg::RunConfig::kMostThatFit;
        bg::resolve_most_that_fit(c, shape, true, 64, cgroup);
        EXPECT_EQ(c.slots, 20);
        EXPECT_EQ(c.hot, bg::expert_capacity(shape, c, true, 64, 20, 0, cgroup).max_hot);
        EXPECT_EQ(problems(c, 20, c.hot), "");
        EXPECT_NE(problems(c, 20, c.hot + 1), "");
        c.hot = bg::RunConfig::kMostThatFit;
        c.slots = 8;  // a given S caps H
        bg::resolve_most_that_fit(c, shape, true, 64, cgroup);
        EXPECT_EQ(c.hot, 8);
    }
    {
        bg::RunConfig c = base;
        c.slots = c.hot = bg::RunConfig::kMostThatFit;
        bg::resolve_most_that_fit(c, shape, true, 64, cgroup);
        EXPECT_GE(c.slots, c.hot);
        EXPECT_EQ(problems(c, c.slots, c.hot), "");
        EXPECT_NE(problems(c, c.slots + 1, c.hot), "");
        EXPECT_NE(problems(c, c.slots, c.hot + 1), "");
    }
    {
        bg::RunConfig c = base;  // H follows the seed's default
        c.slots = bg::RunConfig::kMostThatFit;
        bg::resolve_most_that_fit(c, shape, true, 64, cgroup);
        EXPECT_EQ(c.hot, 5);
        EXPECT_EQ(problems(c, c.slots, 5), "");
    }
    {
        bg::RunConfig c = base;
        c.slots = bg::RunConfig::kMostThatFit;
        c.host_budget_mib = 256;  // the token embedding alone is about 200 MiB in Q2_K
        EXPECT_THROW(bg::resolve_most_that_fit(c, shape, true, 64, cgroup), bg::Error);
        c.host_budget_mib = 12288;
        c.slots = bg::RunConfig::kMostThatFit;
        c.residency = "plan.json";
        EXPECT_THROW(bg::resolve_most_that_fit(c, shape, true, 64, cgroup), bg::Error);
    }
    {
        bg::RunConfig c = base;  // neither: nothing changes
        c.slots = 20;
        c.hot = 5;
        bg::resolve_most_that_fit(c, shape, true, 64, cgroup);
        EXPECT_EQ(c.slots, 20);
        EXPECT_EQ(c.hot, 5);
        EXPECT_EQ(c.residency_defaults, "");
    }
}

int run_command(const std::string& cmd, std::string* out) {
    FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
    char buf[4096];
    size_t n;
    while (f && (n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    const int st = f ? ::pclose(f) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const std::string kBin = std::string(BG_BINARY_DIR) + "/betelgeuse";

// The command line: info names the preset, plan lists each layer's experts and what fits.
TEST(QuantPresetCli, InfoNamesTheFileTypeAndPlanWhatTheBudgetsHold) {
    std::string out;
    ASSERT_EQ(run_command(kBin + " info --no-tensors '" + bgtest::preset_model(QuantPreset::kQ4_K_M) + "'", &out), 0) << out;
    EXPECT_NE(out.find("file type        Q4_K_M (general.file_type 15)"), std::string::npos) << out;
    EXPECT_NE(out.find("q6_K x "), std::string::npos) << out;
    EXPECT_NE(out.find("MB each by layer"), std::string::npos) << out;

    out.clear();
    ASSERT_EQ(run_command(kBin + " plan --scale '" + bgtest::source_path("scenarios/models/full.json") +
                              "' --quant q2_k --prompt-tokens 64 --slots 20 --hot 5 --transient-slots 12 --json",
                          &out),
              0)
        << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    ASSERT_EQ(j["experts"]["layers"].size(), 40u);
    EXPECT_EQ(j["experts"]["layers"][0]["types"], nlohmann::json::array({"q2_K", "q2_K", "q3_K"}));
    EXPECT_GT(j["experts"]["max_slots"].get<int64_t>(), 20);

    out.clear();
    run_command(kBin + " plan --model '" + bgtest::preset_model(QuantPreset::kQ4_K_M) + "' --backend cpu", &out);
    EXPECT_NE(out.find("layers 0-1, 3-4"), std::string::npos) << out;
    EXPECT_NE(out.find("layers 2, 5"), std::string::npos) << out;
    EXPECT_NE(out.find("experts the budgets hold"), std::string::npos) << out;
}

}  // namespace
