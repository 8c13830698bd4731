#include "model/dsv41.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "util/check.h"

namespace bg::dsv41 {

namespace {

std::string key(const char* suffix) { return std::string(kArch) + "." + suffix; }

// Strings from the file (the architecture, tensor names) may hold any byte: escape what could
// break the one-line error message (caught by fuzz/fuzz_model's one-line check; the inputs are
// in fuzz/crashers/model/).
std::string shown(const std::string& s) {
    constexpr size_t kMaxShown = 120;
    std::string out;
    for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') out += strf("\\x%02x", c);
        else out += static_cast<char>(c);
    }
    if (s.size() > kMaxShown) out += "...";
    return out;
}

// The file's metadata as read_hparams sees it: every key looked up is recorded, so `info`
// can list the keys a file carries that the engine never read.
class Keys {
public:
    Keys(const gguf::Reader& r, std::vector<std::string>& read) : r_(r), read_(read) {}
    const gguf::Reader& reader() const { return r_; }
    // deepseek41.<suffix>, recorded as looked up.
    std::string arch(const char* suffix) { return plain(key(suffix)); }
    std::string plain(const std::string& k) {
        if (std::find(read_.begin(), read_.end(), k) == read_.end()) read_.push_back(k);
        return k;
    }
    const gguf::Value* find(const char* suffix) { return r_.find(arch(suffix)); }

    int64_t pos(const char* suffix, int64_t max_value = (1ll << 40)) {
        const std::string k = arch(suffix);
        const uint64_t v = r_.get_u64(k);
        if (v == 0 || v > static_cast<uint64_t>(max_value))
            fail("model: key '%s' = %llu is out of range [1, %lld]", k.c_str(), static_cast<unsigned long long>(v),
                 static_cast<long long>(max_value));
        return static_cast<int64_t>(v);
    }
    // A count llama.cpp reads with get_key_or_arr (one value, or one per layer): the engine
    // needs one value for every main layer, so an array's first n_layer values must agree.
    int64_t uniform_pos(const char* suffix, int64_t max_value, int64_t n_layer) {
        const std::string k = arch(suffix);
        const gguf::Value* v = r_.find(k);
        if (!v || v->type != gguf::ValueType::ARRAY) return pos(suffix, max_value);
        const std::vector<uint64_t> a = first_n(r_.get_arr_u64(k), k, n_layer);
        for (uint64_t x : a)
            if (x != a[0]) fail("model: key '%s' differs between layers, which is not supported", k.c_str());
        if (a[0] < 1 || a[0] > static_cast<uint64_t>(max_value))
            fail("model: key '%s' = %llu is out of range [1, %lld]", k.c_str(), (unsigned long long)a[0],
                 (long long)max_value);
        return static_cast<int64_t>(a[0]);
    }
    int64_t opt_u(const char* suffix, int64_t def) {
        const std::string k = arch(suffix);
        return r_.find(k) ? static_cast<int64_t>(r_.get_u64(k)) : def;
    }
    float opt_f(const char* suffix, float def) {
        const std::string k = arch(suffix);
        return r_.find(k) ? r_.get_f32(k) : def;
    }
    // A per-layer value stored as one scalar or as an array. llama.cpp's converter writes one
    // value per block (next-n layers included), so an array may be longer than n_layer: the
    // first n_layer values are the main layers'. A shorter array is an error.
    std::vector<float> per_layer_f32(const char* suffix, int64_t n_layer) {
        const std::string k = arch(suffix);
        const gguf::Value* v = r_.find(k);
        BG_CHECK(v != nullptr);
        if (v->type != gguf::ValueType::ARRAY) return std::vector<float>(n_layer, r_.get_f32(k));
        std::vector<float> a = r_.get_arr_f32(k);
        return first_n(std::move(a), k, n_layer);
    }
    std::vector<int64_t> per_layer_i64(const char* suffix, int64_t n_layer) {
        const std::string k = arch(suffix);
        return first_n(r_.get_arr_i64(k), k, n_layer);
    }

private:
    template <typename T>
    static std::vector<T> first_n(std::vector<T> a, const std::string& k, int64_t n_layer) {
        if (static_cast<int64_t>(a.size()) < n_layer)
            fail("model: key '%s' has %zu values, expected at least %lld (one per layer)", k.c_str(), a.size(),
                 static_cast<long long>(n_layer));
        a.resize(static_cast<size_t>(n_layer));
        return a;
    }
    const gguf::Reader& r_;
    std::vector<std::string>& read_;
};

}  // namespace

int64_t HParams::engram_table_index(int64_t layer) const {
    for (size_t i = 0; i < engram_layers.size(); ++i)
        if (engram_layers[i] == layer) return static_cast<int64_t>(i);
    return -1;
}

std::string layer_tensor_name(int64_t layer, const char* base, const char* suffix) {
    return strf("blk.%lld.%s.%s", static_cast<long long>(layer), base, suffix);
}

const char* rope_scaling_name(RopeScaling s) {
    switch (s) {
        case RopeScaling::kNone: return "none";
        case RopeScaling::kLinear: return "linear";
        case RopeScaling::kYarn: return "yarn";
    }
    return "?";
}

HParams read_hparams(const gguf::Reader& r) {
    HParams hp;
    Keys k(r, hp.keys_read);
    const std::string arch = r.get_str(k.plain("general.architecture"));
    if (arch != kArch) fail("model: architecture is '%s', expected '%s'", shown(arch).c_str(), kArch);

    hp.n_layer_all = k.pos("block_count", 4096);
    // Next-n (MTP) layers: llama.cpp counts them in block_count, after the main layers, and
    // takes them as such only when the first one's eh_proj tensor is there; the engine never
    // runs them. A file whose MTP blocks are numbered from block_count on (no probe tensor at
    // block_count - n) has block_count main layers; its extra blocks are skipped all the same.
    hp.n_layer = hp.n_layer_all;
    const int64_t nextn = k.opt_u("nextn_predict_layers", 0);
    if (nextn > 0 && nextn < hp.n_layer_all &&
        r.tensor(layer_tensor_name(hp.n_layer_all - nextn, "nextn.eh_proj")) != nullptr)
        hp.n_layer = hp.n_layer_all - nextn;
    hp.n_embd = k.pos("embedding_length", 1 << 20);
    hp.n_ctx_train = k.opt_u("context_length", 1 << 20);
    hp.n_head = k.uniform_pos("attention.head_count", 4096, hp.n_layer);
    if (k.find("attention.head_count_kv") && k.uniform_pos("attention.head_count_kv", 4096, hp.n_layer) != 1)
        fail("model: key '%s' must be 1 (one shared latent kv head)", k.arch("attention.head_count_kv").c_str());
    hp.head_dim = k.pos("attention.key_length", 1 << 16);
    if (k.find("attention.value_length") &&
        static_cast<int64_t>(r.get_u64(k.arch("attention.value_length"))) != hp.head_dim)
        fail("model: attention.value_length must equal attention.key_length (V = K)");
    hp.rope_dims = k.pos("rope.dimension_count", hp.head_dim);
    if (hp.rope_dims % 2) fail("model: rope.dimension_count %lld must be even", (long long)hp.rope_dims);
    hp.q_lora_rank = k.pos("attention.q_lora_rank", 1 << 20);
    hp.o_groups = k.pos("attention.output_group_count", hp.n_head);
    hp.o_lora_rank = k.pos("attention.output_lora_rank", 1 << 20);
    if (hp.n_head % hp.o_groups)
        fail("model: attention.head_count %lld is not a multiple of attention.output_group_count %lld",
             (long long)hp.n_head, (long long)hp.o_groups);
    hp.n_expert = k.pos("expert_count", 1 << 16);
    hp.n_expert_used = k.uniform_pos("expert_used_count", hp.n_expert, hp.n_layer);
    hp.n_ff_exp = k.uniform_pos("expert_feed_forward_length", 1 << 20, hp.n_layer);
    hp.n_expert_shared = k.opt_u("expert_shared_count", 0);
    if (hp.n_expert_shared > 1) fail("model: expert_shared_count %lld > 1 is not supported", (long long)hp.n_expert_shared);
    hp.expert_weights_scale = k.opt_f("expert_weights_scale", 1.0f);
    if (!std::isfinite(hp.expert_weights_scale)) fail("model: expert_weights_scale must be finite");
    hp.expert_weights_norm = k.find("expert_weights_norm") ? r.get_bool(k.arch("expert_weights_norm")) : true;
    const int64_t gating = k.opt_u("expert_gating_func", kGatingSqrtSoftplus);
    if (gating != kGatingSqrtSoftplus)
        fail("model: expert_gating_func %lld is not supported (deepseek41 uses %u, sqrt-softplus)",
             (long long)gating, kGatingSqrtSoftplus);
    hp.swiglu_limit = k.find("swiglu_clamp_exp") ? k.per_layer_f32("swiglu_clamp_exp", hp.n_layer)
                                                 : std::vector<float>(hp.n_layer, 0.0f);
    hp.swiglu_limit_shexp = k.find("swiglu_clamp_shexp") ? k.per_layer_f32("swiglu_clamp_shexp", hp.n_layer)
                                                         : hp.swiglu_limit;
    for (const auto* limits : {&hp.swiglu_limit, &hp.swiglu_limit_shexp})
        for (float v : *limits)
            if (!(v >= 0.0f) || !std::isfinite(v)) fail("model: a swiglu_clamp_* limit is negative or not finite");
    hp.rms_eps = r.get_f32(k.arch("attention.layer_norm_rms_epsilon"));
    if (!(hp.rms_eps >= 0.0f)) fail("model: attention.layer_norm_rms_epsilon must be >= 0");
    hp.sliding_window = k.pos("attention.sliding_window", 1 << 24);

    hp.compress_ratios = k.per_layer_i64("attention.compress_ratios", hp.n_layer);
    for (int64_t c : hp.compress_ratios)
        if (c < 0 || c > 64) fail("model: attention.compress_ratios value %lld out of range [0, 64]", (long long)c);
    hp.idx_n_head = k.pos("attention.indexer.head_count", 4096);
    hp.idx_head_dim = k.pos("attention.indexer.key_length", 1 << 16);
    hp.idx_top_k = k.pos("attention.indexer.top_k", 1 << 24);
    if (hp.idx_head_dim < hp.rope_dims)
        fail("model: attention.indexer.key_length %lld is smaller than rope.dimension_count %lld",
             (long long)hp.idx_head_dim, (long long)hp.rope_dims);

    hp.rope_freq_base = k.opt_f("rope.freq_base", 10000.0f);
    hp.compress_rope_freq_base = k.opt_f("attention.compress_rope_freq_base", hp.rope_freq_base);
    if (!(hp.rope_freq_base > 0.0f) || !(hp.compress_rope_freq_base > 0.0f))
        fail("model: rope.freq_base and attention.compress_rope_freq_base must be > 0");
    // llama.cpp: an absent type is linear; a factor of 0 (or none) means 1.
    const std::string scaling = k.find("rope.scaling.type") ? r.get_str(k.arch("rope.scaling.type")) : "linear";
    if (scaling == "none") hp.rope_scaling = RopeScaling::kNone;
    else if (scaling == "linear") hp.rope_scaling = RopeScaling::kLinear;
    else if (scaling == "yarn") hp.rope_scaling = RopeScaling::kYarn;
    else fail("model: rope.scaling.type '%s' is not supported (none, linear or yarn)", shown(scaling).c_str());
    hp.yarn_factor = k.opt_f("rope.scaling.factor", 1.0f);
    if (hp.yarn_factor == 0.0f) hp.yarn_factor = 1.0f;
    if (!(hp.yarn_factor > 0.0f) || !std::isfinite(hp.yarn_factor))
        fail("model: rope.scaling.factor must be > 0");
    hp.yarn_n_ctx_orig = k.opt_u("rope.scaling.original_context_length", hp.n_ctx_train);
    hp.yarn_beta_fast = k.opt_f("rope.scaling.yarn_beta_fast", 32.0f);
    hp.yarn_beta_slow = k.opt_f("rope.scaling.yarn_beta_slow", 1.0f);
    if (hp.rope_scaling == RopeScaling::kYarn && hp.yarn_n_ctx_orig < 1)
        fail("model: YaRN needs rope.scaling.original_context_length (or context_length) >= 1");

    hp.hc_count = k.pos("hyper_connection.count", 64);
    if (hp.hc_count != 4) fail("model: hyper_connection.count %lld is not supported (only 4)", (long long)hp.hc_count);
    hp.hc_sinkhorn_iters = k.pos("hyper_connection.sinkhorn_iterations", 1000);
    hp.hc_eps = k.opt_f("hyper_connection.epsilon", 1e-6f);
    // Hash-routed layers are a V4 feature; llama.cpp's deepseek41 graph routes every layer by
    // score, so the count is read and not used.
    (void)k.opt_u("hash_layer_count", 0);

    // Engram
    if (k.find("engram.layer_ids")) {
        hp.engram_layers = r.get_arr_i64(k.arch("engram.layer_ids"));
        std::set<int64_t> seen;
        for (int64_t l : hp.engram_layers)
            if (l < 0 || l >= hp.n_layer || !seen.insert(l).second)
                fail("model: engram.layer_ids holds an invalid or repeated layer %lld", (long long)l);
    }
    if (!hp.engram_layers.empty()) {
        const int64_t n_tab = static_cast<int64_t>(hp.engram_layers.size());
        hp.engram_heads = k.pos("engram.head_count", 1024);
        hp.engram_dim = k.pos("engram.key_length", 1 << 16);
        hp.engram_max_ngram = k.pos("engram.max_ngram_size", 16);
        if (hp.engram_max_ngram != 4)
            fail("model: engram.max_ngram_size %lld is not supported (deepseek41 uses 4)", (long long)hp.engram_max_ngram);
        hp.engram_multipliers = r.get_arr_u64(k.arch("engram.multipliers"));
        hp.engram_primes = r.get_arr_u64(k.arch("engram.primes"));
        hp.engram_offsets = r.get_arr_u64(k.arch("engram.offsets"));
        const size_t n_mult = static_cast<size_t>(n_tab * hp.engram_max_ngram);
        const size_t n_buck = static_cast<size_t>(n_tab * hp.engram_buckets());
        if (hp.engram_multipliers.size() != n_mult)
            fail("model: engram.multipliers has %zu values, expected %zu", hp.engram_multipliers.size(), n_mult);
        if (hp.engram_primes.size() != n_buck)
            fail("model: engram.primes has %zu values, expected %zu", hp.engram_primes.size(), n_buck);
        if (hp.engram_offsets.size() != n_buck)
            fail("model: engram.offsets has %zu values, expected %zu", hp.engram_offsets.size(), n_buck);
        for (uint64_t p : hp.engram_primes)
            if (p == 0) fail("model: engram.primes holds 0");
        const std::vector<uint64_t> map = r.get_arr_u64(k.arch("engram.token_map"));
        hp.engram_token_map.resize(map.size());
        for (size_t i = 0; i < map.size(); ++i) {
            if (map[i] > 0xffffffffull) fail("model: engram.token_map entry %zu does not fit in 32 bits", i);
            hp.engram_token_map[i] = static_cast<uint32_t>(map[i]);
        }
        hp.engram_pad_id = r.get_u64(k.arch("engram.pad_id"));
    }
    if (r.find(k.plain("tokenizer.ggml.bos_token_id")))
        hp.bos_id = r.get_u32("tokenizer.ggml.bos_token_id");

    const gguf::TensorInfo* embd = r.tensor("token_embd.weight");
    if (!embd) fail("model: missing tensor 'token_embd.weight'");
    if (embd->ne.size() != 2) fail("model: tensor 'token_embd.weight' must have 2 dimensions");
    hp.n_vocab = embd->ne[1];
    return hp;
}

void write_hparams(const HParams& hp, gguf::Writer& w) {
    using gguf::Value;
    w.set("general.architecture", Value::str(kArch));
    auto u32 = [&](const char* k, int64_t v) { w.set(key(k), Value::u32(static_cast<uint32_t>(v))); };
    auto f32 = [&](const char* k, float v) { w.set(key(k), Value::f32(v)); };
    // Each key's type is the one llama.cpp's loader reads it with (engine/model/GGUF_KEYS.md);
    // its get_key refuses any other type, so test_model_gguf_keys pins every type written here.
    // Without a vocabulary in the file llama.cpp takes the vocabulary size from this key.
    u32("vocab_size", hp.n_vocab);
    u32("block_count", hp.n_layer);
    u32("context_length", hp.n_ctx_train);
    u32("embedding_length", hp.n_embd);
    u32("feed_forward_length", hp.n_ff_exp);
    u32("attention.head_count", hp.n_head);
    u32("attention.head_count_kv", 1);
    u32("attention.key_length", hp.head_dim);
    u32("attention.value_length", hp.head_dim);
    u32("rope.dimension_count", hp.rope_dims);
    f32("rope.freq_base", hp.rope_freq_base);
    w.set(key("rope.scaling.type"), Value::str("yarn"));
    f32("rope.scaling.factor", hp.yarn_factor);
    u32("rope.scaling.original_context_length", hp.yarn_n_ctx_orig);
    f32("rope.scaling.yarn_beta_fast", hp.yarn_beta_fast);
    f32("rope.scaling.yarn_beta_slow", hp.yarn_beta_slow);
    u32("expert_count", hp.n_expert);
    u32("expert_used_count", hp.n_expert_used);
    f32("attention.layer_norm_rms_epsilon", hp.rms_eps);
    u32("attention.q_lora_rank", hp.q_lora_rank);
    u32("attention.sliding_window", hp.sliding_window);
    u32("expert_feed_forward_length", hp.n_ff_exp);
    u32("expert_shared_count", hp.n_expert_shared);
    f32("expert_weights_scale", hp.expert_weights_scale);
    w.set(key("expert_weights_norm"), Value::boolean(hp.expert_weights_norm));
    u32("expert_gating_func", kGatingSqrtSoftplus);
    w.set(key("swiglu_clamp_exp"), Value::array_f32(hp.swiglu_limit));
    u32("attention.indexer.head_count", hp.idx_n_head);
    u32("attention.indexer.key_length", hp.idx_head_dim);
    u32("attention.indexer.top_k", hp.idx_top_k);
    u32("attention.output_group_count", hp.o_groups);
    u32("attention.output_lora_rank", hp.o_lora_rank);
    f32("attention.compress_rope_freq_base", hp.compress_rope_freq_base);
    std::vector<int32_t> ratios(hp.compress_ratios.begin(), hp.compress_ratios.end());
    w.set(key("attention.compress_ratios"), Value::array_i32(ratios));
    u32("hyper_connection.count", hp.hc_count);
    u32("hyper_connection.sinkhorn_iterations", hp.hc_sinkhorn_iters);
    f32("hyper_connection.epsilon", hp.hc_eps);
    u32("hash_layer_count", 0);
    if (!hp.engram_layers.empty()) {
        std::vector<int32_t> ids(hp.engram_layers.begin(), hp.engram_layers.end());
        w.set(key("engram.layer_ids"), Value::array_i32(ids));
        u32("engram.head_count", hp.engram_heads);
        u32("engram.key_length", hp.engram_dim);
        u32("engram.max_ngram_size", hp.engram_max_ngram);
        w.set(key("engram.multipliers"), Value::array_u64(hp.engram_multipliers));
        w.set(key("engram.primes"), Value::array_u64(hp.engram_primes));
        w.set(key("engram.offsets"), Value::array_u64(hp.engram_offsets));
        w.set(key("engram.token_map"), Value::array_u32(hp.engram_token_map));
        BG_CHECK(hp.engram_pad_id <= UINT32_MAX);  // a compressed token id, like the token map's
        u32("engram.pad_id", static_cast<int64_t>(hp.engram_pad_id));
    }
    w.set("tokenizer.ggml.bos_token_id", Value::u32(hp.bos_id));
}

std::vector<TensorSpec> tensor_specs(const HParams& hp, const std::vector<LayerRoles>& roles) {
    BG_CHECK(static_cast<int64_t>(roles.size()) == hp.n_layer);
    const int64_t n = hp.n_embd;
    std::vector<TensorSpec> s;
    auto add = [&](std::string name, std::vector<int64_t> ne, TensorClass c) {
        s.push_back({std::move(name), std::move(ne), c});
    };
    using TC = TensorClass;
    add("token_embd.weight", {n, hp.n_vocab}, TC::kMatrix);
    add("output_norm.weight", {n}, TC::kVector);
    add("output.weight", {n, hp.n_vocab}, TC::kMatrix);
    const int64_t q_group_in = hp.q_dim() / hp.o_groups;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        auto L = [&](const char* base, const char* suffix = "weight") { return layer_tensor_name(l, base, suffix); };
        const LayerRoles& ro = roles[l];
        add(L("attn_norm"), {n}, TC::kVector);
        add(L("ffn_norm"), {n}, TC::kVector);
        add(L("attn_sinks"), {hp.n_head}, TC::kVector);
        add(L("attn_q_a"), {n, hp.q_lora_rank}, TC::kMatrix);
        add(L("attn_q_a_norm"), {hp.q_lora_rank}, TC::kVector);
        add(L("attn_q_b"), {hp.q_lora_rank, hp.q_dim()}, TC::kMatrix);
        add(L("attn_kv"), {n, hp.head_dim}, TC::kMatrix);
        add(L("attn_kv_a_norm"), {hp.head_dim}, TC::kVector);
        add(L("attn_output_a"), {q_group_in, hp.o_groups * hp.o_lora_rank}, TC::kMatrix);
        add(L("attn_output_b"), {hp.o_groups * hp.o_lora_rank, n}, TC::kMatrix);
        for (const char* hc : {"hc_attn", "hc_ffn"}) {
            const std::string b(hc);
            add(L((b + "_fn").c_str()), {hp.hc_count * n, 24}, TC::kMatrix);
            add(L((b + "_base").c_str()), {24}, TC::kVector);
            add(L((b + "_scale").c_str()), {3}, TC::kVector);
        }
        if (ro.kv_source) {
            add(L("attn_compressor_kv"), {n, hp.head_dim}, TC::kMatrix);
            add(L("attn_compressor_norm"), {hp.head_dim}, TC::kVector);
        }
        if (ro.gated) add(L("attn_compressor_gate"), {n, hp.head_dim}, TC::kMatrix);
        if (ro.key_owner) {
            add(L("indexer.attn_k"), {hp.head_dim, hp.idx_head_dim}, TC::kMatrix);
            add(L("indexer.k_norm"), {hp.idx_head_dim}, TC::kVector);
        }
        if (ro.index_source) {
            add(L("indexer.attn_q_b"), {hp.q_lora_rank, hp.idx_n_head * hp.idx_head_dim}, TC::kMatrix);
            add(L("indexer.proj"), {n, hp.idx_n_head}, TC::kMatrix);
        }
        add(L("ffn_gate_inp"), {n, hp.n_expert}, TC::kMatrix);
        add(L("exp_probs_b", "bias"), {hp.n_expert}, TC::kVector);
        add(L("ffn_gate_exps"), {n, hp.n_ff_exp, hp.n_expert}, TC::kExperts);
        add(L("ffn_up_exps"), {n, hp.n_ff_exp, hp.n_expert}, TC::kExperts);
        add(L("ffn_down_exps"), {hp.n_ff_exp, n, hp.n_expert}, TC::kExperts);
        if (hp.n_expert_shared > 0) {
            const int64_t ff = hp.n_ff_exp * hp.n_expert_shared;
            add(L("ffn_gate_shexp"), {n, ff}, TC::kMatrix);
            add(L("ffn_up_shexp"), {n, ff}, TC::kMatrix);
            add(L("ffn_down_shexp"), {ff, n}, TC::kMatrix);
        }
        if (ro.engram) {
            const int64_t tab = hp.engram_table_index(l);
            uint64_t rows = 0;
            for (int64_t b = 0; b < hp.engram_buckets(); ++b) {
                const size_t i = static_cast<size_t>(tab * hp.engram_buckets() + b);
                uint64_t end = 0;
                if (__builtin_add_overflow(hp.engram_offsets[i], hp.engram_primes[i], &end) || end > (1ull << 40))
                    fail("model: engram bucket %lld of layer %lld ends past 2^40 rows", (long long)b, (long long)l);
                rows = std::max(rows, end);
            }
            if (ro.engram_fp8) {
                BG_CHECK(hp.engram_dim % 32 == 0);  // validate_tensors and parse_scale refuse others
                add(L("engram_embd"), {hp.engram_dim, static_cast<int64_t>(rows)}, TC::kEngramFp8Values);
                add(L("engram_embd_scale"), {hp.engram_dim / 32, static_cast<int64_t>(rows)}, TC::kEngramFp8Scales);
            } else {
                add(L("engram_embd"), {hp.engram_dim, static_cast<int64_t>(rows)}, TC::kEngramTable);
            }
            add(L("engram_wkv"), {hp.engram_buckets() * hp.engram_dim, (hp.hc_count + 1) * n}, TC::kMatrix);
            add(L("engram_q"), {n, hp.hc_count}, TC::kVector);
            add(L("engram_k"), {n, hp.hc_count}, TC::kVector);
        }
    }
    return s;
}

bool type_allowed(TensorClass cls, GgmlType t) {
    // The 256-weight types (llama-quantize's K-quants and IQ2_XXS) decode anywhere: matrices go
    // through dequantize_row / the int8 traits on the CPU and the traits' decoders on CUDA.
    const bool super_block = t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q4_K ||
                             t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ2_XXS;
    switch (cls) {
        // 1-D weights are F32 as llama.cpp's converter writes them; an older llama-quantize also
        // quantized engram_q / engram_k, so any type we can dequantise is taken (at load).
        case TensorClass::kVector:
            return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
                   t == GgmlType::MXFP4 || super_block;
        case TensorClass::kMatrix:
            return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
                   super_block;
        case TensorClass::kExperts:
            return t == GgmlType::MXFP4 || t == GgmlType::Q8_0 || t == GgmlType::BF16 ||
                   t == GgmlType::F16 || t == GgmlType::F32 || super_block;
        // Any type the engine dequantises: every type it reads but I8, which is raw bytes.
        case TensorClass::kEngramTable: return t != GgmlType::I8;
        case TensorClass::kEngramFp8Values:
        case TensorClass::kEngramFp8Scales: return t == GgmlType::I8;
    }
    return false;
}

static std::string shape_str(const std::vector<int64_t>& ne) {
    std::string s = "{";
    for (size_t i = 0; i < ne.size(); ++i) s += strf("%s%lld", i ? ", " : "", static_cast<long long>(ne[i]));
    return s + "}";
}

std::string skipped_tensor_reason(const HParams& hp, const std::string& name) {
    // blk.<N>.<rest>: a block at or after the main layers is a next-n (MTP) layer.
    if (name.rfind("blk.", 0) == 0) {
        int64_t layer = 0;
        size_t i = 4;
        while (i < name.size() && name[i] >= '0' && name[i] <= '9' && layer <= (1ll << 40))
            layer = layer * 10 + (name[i++] - '0');
        if (i > 4 && i < name.size() && name[i] == '.') {
            if (layer >= hp.n_layer) return "next-n (MTP) layer, not run";
            if (name.compare(i, std::string::npos, ".exp_probs_b_vl.bias") == 0)
                return "routing bias for image tokens (vision variant), unused for text";
        }
    }
    return "";
}

// Which format each Engram table is in (model/engram_format.h): a scales tensor beside the
// table makes it the fork-fp8 pair. The pair's halves are checked here, where a clearer line
// than the generic shape and type messages can be given.
static void check_engram_formats(const HParams& hp, const gguf::Reader& r, std::vector<LayerRoles>& roles) {
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        if (!roles[l].engram) continue;
        const std::string table = layer_tensor_name(l, "engram_embd"), scales = layer_tensor_name(l, "engram_embd_scale");
        const gguf::TensorInfo* tt = r.tensor(table);
        const gguf::TensorInfo* st = r.tensor(scales);
        roles[l].engram_fp8 = st != nullptr;
        if (!tt) continue;  // reported as a missing tensor with its expected shape
        if (tt->type == GgmlType::I8 && !st)
            fail("model: tensor '%s' is i8 (the FP8-E4M3 bytes of a fork-fp8 Engram table) but its E8M0 scales "
                 "tensor '%s' is missing", table.c_str(), scales.c_str());
        if (st && tt->type != GgmlType::I8)
            fail("model: tensor '%s' has type %s, but beside '%s' (E8M0 scales) it must be i8 (FP8-E4M3 bytes)",
                 table.c_str(), type_name(tt->type), scales.c_str());
        if (st && hp.engram_dim % 32 != 0)
            fail("model: engram.key_length %lld is not a multiple of 32, as a fork-fp8 Engram table's scale groups need",
                 (long long)hp.engram_dim);
    }
}

std::vector<LayerRoles> validate_tensors(const HParams& hp, const gguf::Reader& r) {
    std::vector<LayerRoles> roles(static_cast<size_t>(hp.n_layer));
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerRoles& ro = roles[l];
        ro.kv_source = r.tensor(layer_tensor_name(l, "attn_compressor_kv")) != nullptr;
        ro.gated = r.tensor(layer_tensor_name(l, "attn_compressor_gate")) != nullptr;
        ro.key_owner = r.tensor(layer_tensor_name(l, "indexer.attn_k")) != nullptr;
        ro.index_source = r.tensor(layer_tensor_name(l, "indexer.attn_q_b")) != nullptr;
        ro.engram = hp.engram_table_index(l) >= 0;
    }
    check_engram_formats(hp, r, roles);
    // Attention roles must be consistent with the compress ratios.
    int64_t last_kv = -1, last_key = -1, last_idx = -1;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        const LayerRoles& ro = roles[l];
        const int64_t ratio = hp.compress_ratios[l];
        if (ro.kv_source) {
            if (ratio == 0) fail("model: layer %lld has attn_compressor_kv but compress ratio 0", (long long)l);
            if (ratio > 1 && !ro.gated)
                fail("model: layer %lld compresses at ratio %lld but has no attn_compressor_gate", (long long)l, (long long)ratio);
            last_kv = l;
        }
        if (ro.gated && !ro.kv_source) fail("model: layer %lld has attn_compressor_gate without attn_compressor_kv", (long long)l);
        if (ro.key_owner) {
            if (last_kv < 0) fail("model: layer %lld owns index keys but no compressed kv source is at or before it", (long long)l);
            last_key = l;
        }
        if (ro.index_source) {
            if (last_key < 0) fail("model: layer %lld is an index source but no index key owner is at or before it", (long long)l);
            last_idx = l;
        }
        if (ratio > 0) {
            if (last_kv < 0 || last_idx < 0)
                fail("model: layer %lld has compress ratio %lld but no compressed kv source and index source at or before it",
                     (long long)l, (long long)ratio);
            if (hp.compress_ratios[last_kv] != ratio)
                fail("model: layer %lld has compress ratio %lld but its kv source (layer %lld) has ratio %lld",
                     (long long)l, (long long)ratio, (long long)last_kv, (long long)hp.compress_ratios[last_kv]);
        }
    }
    // llama.cpp refuses only a map too short for the vocabulary; ids past it hash as pad_id.
    if (!hp.engram_layers.empty() && hp.engram_token_map.size() < static_cast<size_t>(hp.n_vocab))
        fail("model: engram.token_map has %zu entries, too few for the %lld-token vocabulary",
             hp.engram_token_map.size(), (long long)hp.n_vocab);

    const std::vector<TensorSpec> specs = tensor_specs(hp, roles);
    std::set<std::string> expected;
    for (const TensorSpec& s : specs) {
        expected.insert(s.name);
        const gguf::TensorInfo* t = r.tensor(s.name);
        if (!t) fail("model: missing tensor '%s' (shape %s)", s.name.c_str(), shape_str(s.ne).c_str());
        if (t->ne != s.ne)
            fail("model: tensor '%s' has shape %s, expected %s", s.name.c_str(), shape_str(t->ne).c_str(),
                 shape_str(s.ne).c_str());
        if (!type_allowed(s.cls, t->type))
            fail("model: tensor '%s' has type %s, which is not allowed for it", s.name.c_str(), type_name(t->type));
    }
    for (const gguf::TensorInfo& t : r.tensors())
        if (!expected.count(t.name) && skipped_tensor_reason(hp, t.name).empty()) fail("model: unexpected tensor '%s' for architecture %s", shown(t.name).c_str(), kArch);
    return roles;
}

}  // namespace bg::dsv41
