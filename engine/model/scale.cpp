#include "model/scale.h"

#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "util/file_io.h"

namespace bg {

namespace {

using json = nlohmann::json;

dsv41::HParams full_hparams() {
    dsv41::HParams hp;
    hp.n_layer = 40;
    hp.n_embd = 5120;
    hp.n_vocab = 129280;
    hp.n_ctx_train = 1 << 20;
    hp.n_head = 64;
    hp.head_dim = 512;
    hp.rope_dims = 64;
    hp.q_lora_rank = 1280;
    hp.o_groups = 8;
    hp.o_lora_rank = 1024;
    hp.n_expert = 384;
    hp.n_expert_used = 6;
    hp.n_ff_exp = 2304;
    hp.n_expert_shared = 1;
    hp.expert_weights_scale = 1.5f;
    hp.expert_weights_norm = true;
    hp.swiglu_limit.assign(40, 10.0f);
    hp.rms_eps = 1e-20f;
    hp.sliding_window = 128;
    hp.compress_ratios.assign(40, 1);
    hp.compress_ratios[0] = hp.compress_ratios[1] = 0;
    for (int l = 2; l < 20; ++l) hp.compress_ratios[l] = 2;
    hp.idx_n_head = 32;
    hp.idx_head_dim = 128;
    hp.idx_top_k = 512;
    hp.rope_freq_base = 10000.0f;
    hp.compress_rope_freq_base = 160000.0f;
    hp.yarn_factor = 16.0f;
    hp.yarn_n_ctx_orig = 65536;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    hp.hc_count = 4;
    hp.hc_sinkhorn_iters = 20;
    hp.hc_eps = 1e-6f;
    hp.engram_layers = {1, 14};
    hp.engram_heads = 8;
    hp.engram_dim = 256;
    hp.engram_max_ngram = 4;
    hp.engram_pad_id = 0;
    hp.bos_id = 0;
    return hp;
}

std::string where(const std::string& origin, const std::string& k) { return origin + ": key '" + k + "'"; }

int64_t as_int(const json& v, const std::string& w, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) fail("%s: expected an integer", w.c_str());
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail("%s: %lld is out of range [%lld, %lld]", w.c_str(), (long long)x, (long long)lo, (long long)hi);
    return x;
}

double as_num(const json& v, const std::string& w) {
    if (!v.is_number()) fail("%s: expected a number", w.c_str());
    return v.get<double>();
}

std::vector<int64_t> as_int_list(const json& v, const std::string& w, int64_t lo, int64_t hi) {
    if (!v.is_array()) fail("%s: expected an array of integers", w.c_str());
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(as_int(v[i], w + "[" + std::to_string(i) + "]", lo, hi));
    return out;
}

}  // namespace

std::vector<dsv41::LayerRoles> ModelScale::roles() const {
    std::vector<dsv41::LayerRoles> r(static_cast<size_t>(hp.n_layer));
    for (int64_t l : kv_source_layers) r[l].kv_source = true;
    for (int64_t l : gated_layers) r[l].gated = true;
    for (int64_t l : key_owner_layers) r[l].key_owner = true;
    for (int64_t l : index_source_layers) r[l].index_source = true;
    for (int64_t l : hp.engram_layers) {
        r[l].engram = true;
        r[l].engram_fp8 = engram_format.fork();
    }
    return r;
}

ModelScale parse_scale(const std::string& text, const std::string& origin) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail("%s: not valid JSON: %s", origin.c_str(), e.what());
    }
    if (!j.is_object()) fail("%s: the scale must be a JSON object", origin.c_str());

    ModelScale s;
    s.hp = full_hparams();
    dsv41::HParams& hp = s.hp;
    const int64_t big = 1ll << 40;
    bool swiglu_given = false;
    std::string type_key_given;  // a *_type key, which a preset would contradict
    using Setter = std::function<void(const json&, const std::string&)>;
    auto I = [&](int64_t* dst, int64_t lo, int64_t hi) -> Setter {
        return [=](const json& v, const std::string& w) { *dst = as_int(v, w, lo, hi); };
    };
    auto F = [&](float* dst) -> Setter { return [=](const json& v, const std::string& w) { *dst = static_cast<float>(as_num(v, w)); }; };
    auto L = [&](std::vector<int64_t>* dst, int64_t lo, int64_t hi) -> Setter {
        return [=](const json& v, const std::string& w) { *dst = as_int_list(v, w, lo, hi); };
    };
    auto T = [&](GgmlType* dst) -> Setter {
        return [=, &type_key_given](const json& v, const std::string& w) {
            type_key_given = w;
            if (!v.is_string()) fail("%s: expected a type name", w.c_str());
            try {
                *dst = parse_type_name(v.get<std::string>());
            } catch (const Error& e) {
                fail("%s: %s", w.c_str(), e.what());
            }
        };
    };
    const std::map<std::string, Setter> setters = {
        {"name", [&](const json& v, const std::string& w) { if (!v.is_string()) fail("%s: expected a string", w.c_str()); s.name = v.get<std::string>(); }},
        {"description", [&](const json& v, const std::string& w) { if (!v.is_string()) fail("%s: expected a string", w.c_str()); s.description = v.get<std::string>(); }},
        {"n_layer", I(&hp.n_layer, 1, 1024)},
        {"n_embd", I(&hp.n_embd, 32, 1 << 16)},
        {"n_vocab", I(&hp.n_vocab, 16, 1 << 24)},
        {"context_length", I(&hp.n_ctx_train, 16, 1 << 24)},
        {"n_head", I(&hp.n_head, 1, 1024)},
        {"head_dim", I(&hp.head_dim, 32, 1 << 14)},
        {"rope_dims", I(&hp.rope_dims, 2, 1 << 14)},
        {"q_lora_rank", I(&hp.q_lora_rank, 32, 1 << 16)},
        {"output_groups", I(&hp.o_groups, 1, 1024)},
        {"output_lora_rank", I(&hp.o_lora_rank, 32, 1 << 16)},
        {"n_expert", I(&hp.n_expert, 1, 1 << 14)},
        {"n_expert_used", I(&hp.n_expert_used, 1, 64)},
        {"n_ff_exp", I(&hp.n_ff_exp, 32, 1 << 16)},
        {"n_expert_shared", I(&hp.n_expert_shared, 0, 1)},
        {"expert_weights_scale", F(&hp.expert_weights_scale)},
        {"swiglu_limit", [&](const json& v, const std::string& w) { swiglu_given = true; hp.swiglu_limit.assign(1, static_cast<float>(as_num(v, w))); }},
        {"rms_epsilon", F(&hp.rms_eps)},
        {"sliding_window", I(&hp.sliding_window, 1, 1 << 20)},
        {"compress_ratios", L(&hp.compress_ratios, 0, 64)},
        {"indexer_heads", I(&hp.idx_n_head, 1, 1024)},
        {"indexer_head_dim", I(&hp.idx_head_dim, 2, 1 << 14)},
        {"indexer_top_k", I(&hp.idx_top_k, 1, 1 << 20)},
        {"rope_freq_base", F(&hp.rope_freq_base)},
        {"compress_rope_freq_base", F(&hp.compress_rope_freq_base)},
        {"yarn_factor", F(&hp.yarn_factor)},
        {"yarn_original_context", I(&hp.yarn_n_ctx_orig, 1, 1 << 24)},
        {"yarn_beta_fast", F(&hp.yarn_beta_fast)},
        {"yarn_beta_slow", F(&hp.yarn_beta_slow)},
        {"hc_sinkhorn_iterations", I(&hp.hc_sinkhorn_iters, 1, 1000)},
        {"hc_epsilon", F(&hp.hc_eps)},
        {"engram_layers", L(&hp.engram_layers, 0, 1023)},
        {"engram_heads", I(&hp.engram_heads, 1, 64)},
        {"engram_row_width", I(&hp.engram_dim, 32, 1 << 14)},
        {"engram_max_ngram", I(&hp.engram_max_ngram, 4, 4)},
        {"engram_rows_per_table", I(&s.engram_rows_per_table, 1024, big)},
        {"engram_compressed_vocab", I(&s.engram_compressed_vocab, 2, 1 << 24)},
        {"kv_source_layers", L(&s.kv_source_layers, 0, 1023)},
        {"gated_layers", L(&s.gated_layers, 0, 1023)},
        {"key_owner_layers", L(&s.key_owner_layers, 0, 1023)},
        {"index_source_layers", L(&s.index_source_layers, 0, 1023)},
        {"dense_type", T(&s.dense_type)},
        {"expert_type", T(&s.expert_type)},
        {"engram_type", [&](const json& v, const std::string& w) {
             if (!v.is_string()) fail("%s: expected an Engram format name", w.c_str());
             try {
                 s.engram_format = parse_engram_format(v.get<std::string>());
             } catch (const Error& e) {
                 fail("%s: %s", w.c_str(), e.what());
             }
         }},
        {"router_type", T(&s.router_type)},
        {"quant", [&](const json& v, const std::string& w) {
             if (!v.is_string()) fail("%s: expected a preset name", w.c_str());
             try {
                 s.quant = parse_quant_preset(v.get<std::string>());
             } catch (const Error& e) {
                 fail("%s: %s", w.c_str(), e.what());
             }
         }},
        {"router_bias_skew", [&](const json& v, const std::string& w) { s.router_bias_skew = as_num(v, w); if (s.router_bias_skew < 0) fail("%s: must be >= 0", w.c_str()); }},
    };
    for (auto it = j.begin(); it != j.end(); ++it) {
        auto st = setters.find(it.key());
        if (st == setters.end()) fail("%s: unknown key", where(origin, it.key()).c_str());
        st->second(it.value(), where(origin, it.key()));
    }
    if (swiglu_given) hp.swiglu_limit.assign(static_cast<size_t>(hp.n_layer), hp.swiglu_limit[0]);
    else hp.swiglu_limit.assign(static_cast<size_t>(hp.n_layer), 10.0f);

    // Cross-checks, so a bad scale fails here and not half-way through writing a file.
    auto bad = [&](const char* msg) { fail("%s: %s", origin.c_str(), msg); };
    if (static_cast<int64_t>(hp.compress_ratios.size()) != hp.n_layer) bad("compress_ratios must have one value per layer");
    for (auto* list : {&s.kv_source_layers, &s.gated_layers, &s.key_owner_layers, &s.index_source_layers, &hp.engram_layers})
        for (int64_t l : *list)
            if (l >= hp.n_layer) bad("a layer list names a layer past n_layer");
    if (hp.n_expert_used > hp.n_expert) bad("n_expert_used exceeds n_expert");
    if (hp.rope_dims > hp.head_dim || hp.rope_dims % 2) bad("rope_dims must be even and at most head_dim");
    if (hp.rope_dims > hp.idx_head_dim) bad("rope_dims must be at most indexer_head_dim");
    if (hp.n_head % hp.o_groups) bad("n_head must be a multiple of output_groups");
    if (s.engram_rows_per_table < 8 * hp.engram_heads * (hp.engram_max_ngram - 1)) bad("engram_rows_per_table is too small for the buckets");
    if (!hp.engram_layers.empty() && s.engram_compressed_vocab > hp.n_vocab) bad("engram_compressed_vocab exceeds n_vocab");
    if (s.quant) {
        // The preset picks each type, falling back where a row is not whole blocks.
        if (!type_key_given.empty())
            fail("%s: a scale gives either quant or the *_type keys, not both", type_key_given.c_str());
        return s;
    }
    auto blocks_ok = [&](GgmlType t, int64_t n) { uint64_t b; return row_bytes_checked(t, n, &b); };
    if (!blocks_ok(s.dense_type, hp.n_embd) || !blocks_ok(s.dense_type, hp.q_lora_rank) ||
        !blocks_ok(s.dense_type, hp.head_dim) || !blocks_ok(s.dense_type, hp.q_dim() / hp.o_groups) ||
        !blocks_ok(s.dense_type, hp.o_groups * hp.o_lora_rank) || !blocks_ok(s.dense_type, hp.n_ff_exp))
        bad("a dense weight's row is not a whole number of dense_type blocks");
    if (!blocks_ok(s.expert_type, hp.n_embd) || !blocks_ok(s.expert_type, hp.n_ff_exp))
        bad("an expert row is not a whole number of expert_type blocks");
    if (!s.engram_format.row_fits(hp.engram_dim)) bad("engram_row_width is not a whole number of engram_type blocks");
    return s;
}

ModelScale load_scale(const std::string& path) {
    return parse_scale(read_file(path, "scale"), path);
}

}  // namespace bg
