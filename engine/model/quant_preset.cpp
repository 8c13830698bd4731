#include "model/quant_preset.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

#include "util/check.h"

namespace bg {

namespace {

struct PresetRow {
    QuantPreset preset;
    const char* name;
    uint32_t llama_ftype;   // LLAMA_FTYPE_MOSTLY_<name> in llama.cpp's include/llama.h
    GgmlType default_type;  // llama_ftype_get_default_type
};

constexpr PresetRow kPresets[] = {
    {QuantPreset::kMxfp4Moe, "MXFP4_MOE", 38, GgmlType::MXFP4},
    {QuantPreset::kQ8_0, "Q8_0", 7, GgmlType::Q8_0},
    {QuantPreset::kQ4_K_M, "Q4_K_M", 15, GgmlType::Q4_K},
    {QuantPreset::kQ2_K, "Q2_K", 10, GgmlType::Q2_K},
    {QuantPreset::kIq2_Xxs, "IQ2_XXS", 19, GgmlType::IQ2_XXS},
};

const PresetRow& row_of(QuantPreset p) {
    for (const PresetRow& r : kPresets)
        if (r.preset == p) return r;
    BG_CHECK(false);
    return kPresets[0];
}

// llama.cpp's general.file_type values (enum llama_ftype, include/llama.h), the names without
// the LLAMA_FTYPE_MOSTLY_ / LLAMA_FTYPE_ prefix: the data a file's file_type is read with.
struct FtypeName {
    uint32_t ftype;
    const char* name;
};
constexpr FtypeName kFtypeNames[] = {
    {0, "F32"},      {1, "F16"},       {2, "Q4_0"},     {3, "Q4_1"},     {7, "Q8_0"},     {8, "Q5_0"},
    {9, "Q5_1"},     {10, "Q2_K"},     {11, "Q3_K_S"},  {12, "Q3_K_M"},  {13, "Q3_K_L"},  {14, "Q4_K_S"},
    {15, "Q4_K_M"},  {16, "Q5_K_S"},   {17, "Q5_K_M"},  {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"},
    {21, "Q2_K_S"},  {22, "IQ3_XS"},   {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"},  {26, "IQ3_S"},
    {27, "IQ3_M"},   {28, "IQ2_S"},    {29, "IQ2_M"},   {30, "IQ4_XS"},  {31, "IQ1_M"},   {32, "BF16"},
    {36, "TQ1_0"},   {37, "TQ2_0"},    {38, "MXFP4_MOE"}, {39, "NVFP4"},
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The layer of "blk.N.<rest>", -1 for a global tensor (llama.cpp's sscanf("blk.%d.")).
int layer_of(const std::string& name) {
    int layer = -1;
    if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
    return layer;
}

// llama.cpp's tensor_allows_quantization for this architecture's names: 2-D and 3-D weights,
// not norms, not the router; plus the V4.1 branch's exemption of engram_q / engram_k.
bool quantized_by_llama(const dsv41::TensorSpec& s) {
    const std::string& n = s.name;
    if (s.ne.size() < 2) return false;
    if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
    if (contains(n, "_norm.weight") || contains(n, "ffn_gate_inp.weight")) return false;
    if (contains(n, "engram_q.weight") || contains(n, "engram_k.weight")) return false;
    return true;
}

// The categories of llama.cpp's tensor_get_category our tensors fall in (by name, as there).
enum class Category { kOutput, kTokenEmbd, kFfnDown, kOther };
Category category_of(const std::string& name) {
    if (name == "output.weight") return Category::kOutput;
    if (name == "token_embd.weight") return Category::kTokenEmbd;
    if (contains(name, "ffn_down")) return Category::kFfnDown;
    return Category::kOther;
}

// llama.cpp's choice of layers that get more bits in the *_K_M presets.
bool use_more_bits(int i_layer, int n_layer) {
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

int64_t block_of(GgmlType t) { return type_traits(t).block_elems; }

// tensor_type_fallback: a type whose block does not divide the row length. llama.cpp's
// targets for the 256-weight types are Q4_0 (Q2_K, Q3_K), Q5_0 (Q4_K), Q5_1 (Q5_K), Q8_0
// (Q6_K) and IQ4_NL (IQ2_XXS); the engine has only Q8_0 of these, the nearest to each.
GgmlType fallback(GgmlType t, int64_t ncols) {
    if (ncols % block_of(t) == 0) return t;
    if (block_of(t) == 256 && ncols % block_of(GgmlType::Q8_0) == 0) return GgmlType::Q8_0;
    return GgmlType::F16;
}

}  // namespace

const std::vector<QuantPreset>& all_quant_presets() {
    static const std::vector<QuantPreset> v = [] {
        std::vector<QuantPreset> out;
        for (const PresetRow& r : kPresets) out.push_back(r.preset);
        return out;
    }();
    return v;
}

const char* quant_preset_name(QuantPreset p) { return row_of(p).name; }

uint32_t quant_preset_llama_ftype(QuantPreset p) { return row_of(p).llama_ftype; }

QuantPreset parse_quant_preset(const std::string& name) {
    std::string up = name;
    for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string names;
    for (const PresetRow& r : kPresets) {
        if (up == r.name) return r.preset;
        names += std::string(names.empty() ? "" : ", ") + r.name;
    }
    fail("unknown quantisation preset '%s' (the presets: %s)", name.c_str(), names.c_str());
}

const char* llama_ftype_name(uint32_t ftype) {
    for (const FtypeName& f : kFtypeNames)
        if (f.ftype == ftype) return f.name;
    return nullptr;
}

std::vector<GgmlType> preset_tensor_types(QuantPreset p, const dsv41::HParams& hp,
                                          const std::vector<dsv41::TensorSpec>& specs) {
    const GgmlType def = row_of(p).default_type;
    // llama.cpp's n_ffn_down: block_count (main and next-n layers).
    const int n_layer = static_cast<int>(std::max(hp.n_layer_all, hp.n_layer));
    std::vector<GgmlType> types(specs.size(), GgmlType::F32);
    // llama.cpp visits the tensors by layer, then by name (llama_model_loader's
    // weight_name_comparer); the IQ2_XXS ffn_down rule counts in that order.
    std::vector<size_t> order(specs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int la = layer_of(specs[a].name), lb = layer_of(specs[b].name);
        return la != lb ? la < lb : specs[a].name < specs[b].name;
    });
    int i_ffn_down = 0;
    for (const size_t i : order) {
        const dsv41::TensorSpec& s = specs[i];
        if (!quantized_by_llama(s)) {
            types[i] = GgmlType::F32;  // as the converter wrote them: make-model writes F32
            continue;
        }
        const int64_t ncols = s.ne[0];
        const Category cat = category_of(s.name);
        GgmlType t = def;
        if (cat == Category::kOutput) {
            if (p == QuantPreset::kMxfp4Moe || ncols % block_of(def) != 0) t = GgmlType::Q8_0;
            else if (p == QuantPreset::kIq2_Xxs) t = GgmlType::Q5_K;
            else if (def != GgmlType::Q8_0) t = GgmlType::Q6_K;
        } else if (p == QuantPreset::kMxfp4Moe) {
            t = s.ne.size() >= 3 && s.ne[2] > 1 ? GgmlType::MXFP4 : GgmlType::Q8_0;
        } else if (cat == Category::kTokenEmbd) {
            if (p == QuantPreset::kIq2_Xxs) t = GgmlType::Q2_K;
        } else if (p == QuantPreset::kIq2_Xxs) {
            if (cat == Category::kFfnDown) {
                if (i_ffn_down < n_layer / 8) t = GgmlType::Q2_K;
                ++i_ffn_down;
            }
        } else if (cat == Category::kFfnDown) {
            const int layer = layer_of(s.name);
            BG_CHECK(layer >= 0 && layer < n_layer);
            if (p == QuantPreset::kQ2_K) t = GgmlType::Q3_K;
            else if (p == QuantPreset::kQ4_K_M && use_more_bits(layer, n_layer)) t = GgmlType::Q6_K;
        }
        types[i] = fallback(t, ncols);
    }
    return types;
}

}  // namespace bg
