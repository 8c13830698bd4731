#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "gguf/gguf_json.h"
#include "model/dsv41_model.h"
#include "model/quant_preset.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/vocab.h"
#include "util/check.h"

namespace bg::cli {

namespace {

std::string shape(const std::vector<int64_t>& ne) {
    std::string s = "{";
    for (size_t i = 0; i < ne.size(); ++i) s += strf("%s%lld", i ? ", " : "", static_cast<long long>(ne[i]));
    return s + "}";
}

// What the file carries that the engine does not use, so a user sees what was skipped. The
// general.* keys describe the file and tokenizer.* keys belong to the tokenizer.
void print_ignored(const dsv41::Model& m) {
    const dsv41::HParams& hp = m.hp();
    std::vector<std::string> keys;
    for (const gguf::KeyValue& kv : m.gguf().kvs()) {
        if (kv.key.rfind("general.", 0) == 0 || kv.key.rfind("tokenizer.", 0) == 0) continue;
        if (std::find(hp.keys_read.begin(), hp.keys_read.end(), kv.key) == hp.keys_read.end()) keys.push_back(kv.key);
    }
    std::vector<std::string> tensors;
    for (const gguf::TensorInfo& t : m.gguf().tensors()) {
        const std::string why = dsv41::skipped_tensor_reason(hp, t.name);
        if (!why.empty()) tensors.push_back(t.name + " (" + why + ")");
    }
    std::printf("ignored keys     %zu%s\n", keys.size(), keys.empty() ? "" : ":");
    for (const std::string& k : keys) std::printf("  %s\n", k.c_str());
    std::printf("ignored tensors  %zu%s\n", tensors.size(), tensors.empty() ? "" : ":");
    for (const std::string& t : tensors) std::printf("  %s\n", t.c_str());
}

// A split model's files, each with the tensors whose bytes it holds.
void print_shards(const gguf::Reader& r) {
    if (!r.is_split()) return;
    std::printf("files            %zu shards (gguf-split):\n", r.shards().size());
    for (size_t i = 0; i < r.shards().size(); ++i) {
        const gguf::Shard& s = r.shards()[i];
        std::printf("  %5zu  %s  %llu tensors, %llu bytes (%.3f GB file)\n", i + 1, s.path.c_str(),
                    (unsigned long long)s.tensor_count, (unsigned long long)s.tensor_bytes, s.file_size / 1e9);
    }
}

// general.file_type as llama.cpp names it (llama-quantize's preset), and the count of tensors
// of each type, as llama.cpp's loader lists them.
std::string file_type_line(const gguf::Reader& r) {
    const gguf::Value* v = r.find("general.file_type");
    if (!v) return "not recorded (llama.cpp guesses one from the tensor types)";
    const uint64_t ft = r.get_u64("general.file_type");
    const char* name = ft <= UINT32_MAX ? llama_ftype_name(static_cast<uint32_t>(ft)) : nullptr;
    return strf("%s (general.file_type %llu)", name ? name : "not a llama.cpp file type", (unsigned long long)ft);
}

std::string tensor_types_line(const gguf::Reader& r) {
    std::map<uint32_t, int64_t> counts;
    for (const gguf::TensorInfo& t : r.tensors()) ++counts[static_cast<uint32_t>(t.type)];
    std::string s;
    for (const auto& [type, n] : counts)
        s += strf("%s%s x %lld", s.empty() ? "" : ", ", type_name(static_cast<GgmlType>(type)), (long long)n);
    return s;
}

std::string tokenizer_line(const gguf::Reader& r) {
    std::optional<tok::Vocab> v;
    try {
        v = tok::Vocab::from_gguf(r);
    } catch (const Error& e) {
        return strf("unusable (%s); runs on token ids only", e.what());
    }
    if (!v) return "none (runs on token ids only)";
    int64_t control = 0, user = 0, unused = 0;
    for (tok::TokenType t : v->types) {
        control += t == tok::TokenType::kControl;
        user += t == tok::TokenType::kUserDefined;
        unused += t == tok::TokenType::kUnused;
    }
    std::string chat = "none";
    if (!v->chat_template.empty()) {
        try {
            chat = tok::chat_format_name(tok::detect_chat_format(v->chat_template));
        } catch (const Error&) {
            chat = "not recognised";
        }
        chat += strf(" (%zu bytes)", v->chat_template.size());
    }
    return strf("%s, pre %s, %zu tokens (%lld control, %lld user-defined, %lld unused), %zu merges, bos %lld, eos %lld, "
                "pad %lld, add bos %s; chat template %s",
                v->model.c_str(), v->pre.c_str(), v->tokens.size(), (long long)control, (long long)user, (long long)unused,
                v->merges.size(), (long long)v->bos_id, (long long)v->eos_id, (long long)v->pad_id,
                v->add_bos ? "yes" : "no", chat.c_str());
}

void print_info(const std::string& path, bool tensors) {
    auto m = dsv41::Model::open(path);
    const dsv41::HParams& hp = m->hp();
    std::printf("model            %s\n", path.c_str());
    std::printf("architecture     %s (GGUF v%u, alignment %llu, %zu tensors, %.3f GB)\n", dsv41::kArch,
                m->gguf().version(), (unsigned long long)m->gguf().alignment(), m->gguf().tensors().size(),
                m->gguf().total_file_size() / 1e9);
    std::printf("file type        %s\n", file_type_line(m->gguf()).c_str());
    std::printf("tensor types     %s\n", tensor_types_line(m->gguf()).c_str());
    print_shards(m->gguf());
    std::printf("layers           %lld, hidden %lld, vocab %lld", (long long)hp.n_layer, (long long)hp.n_embd, (long long)hp.n_vocab);
    if (hp.n_layer_all > hp.n_layer) std::printf(" (+%lld next-n layers, not run)", (long long)(hp.n_layer_all - hp.n_layer));
    std::printf("\n");
    std::printf("tokenizer        %s\n", tokenizer_line(m->gguf()).c_str());
    std::printf("attention        %lld heads x %lld (rope %lld), q_lora %lld, output %lld groups x %lld, window %lld\n",
                (long long)hp.n_head, (long long)hp.head_dim, (long long)hp.rope_dims, (long long)hp.q_lora_rank,
                (long long)hp.o_groups, (long long)hp.o_lora_rank, (long long)hp.sliding_window);
    std::string ratios;
    for (int64_t r : hp.compress_ratios) ratios += std::to_string(r);
    std::printf("compress ratios  %s\n", ratios.c_str());
    std::string roles;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        const auto& r = m->roles()[l];
        if (r.kv_source || r.key_owner || r.index_source || r.engram)
            roles += strf(" %lld:%s%s%s%s", (long long)l, r.kv_source ? "kv" : "", r.key_owner ? "+keys" : "",
                          r.index_source ? "+index" : "", r.engram ? "+engram" : "");
    }
    std::printf("layer roles     %s\n", roles.c_str());
    std::printf("indexer          %lld heads x %lld, top-%lld\n", (long long)hp.idx_n_head, (long long)hp.idx_head_dim, (long long)hp.idx_top_k);
    std::printf("rope             base %g (ratio-0 layers, never scaled), %g with %s scaling x%g (orig ctx %lld, beta %g/%g)\n",
                hp.rope_freq_base, hp.compress_rope_freq_base, dsv41::rope_scaling_name(hp.rope_scaling), hp.yarn_factor,
                (long long)hp.yarn_n_ctx_orig, hp.yarn_beta_fast, hp.yarn_beta_slow);
    std::printf("experts          %lld routed (top-%lld, width %lld, weights %s x%g, clamp %g) + %lld shared (clamp %g)\n",
                (long long)hp.n_expert, (long long)hp.n_expert_used, (long long)hp.n_ff_exp,
                hp.expert_weights_norm ? "normalised" : "not normalised", hp.routed_weight_scale(),
                hp.swiglu_limit.empty() ? 0.0f : hp.swiglu_limit[0], (long long)hp.n_expert_shared,
                hp.swiglu_limit_shexp.empty() ? 0.0f : hp.swiglu_limit_shexp[0]);
    std::printf("mHC              %lld copies, Sinkhorn %lld iterations, eps %g; rms eps %g\n", (long long)hp.hc_count,
                (long long)hp.hc_sinkhorn_iters, hp.hc_eps, hp.rms_eps);
    if (!hp.engram_layers.empty()) {
        std::string ls;
        for (int64_t l : hp.engram_layers) ls += strf("%s%lld", ls.empty() ? "" : ",", (long long)l);
        std::printf("engram           layers %s, %lld heads x orders 2..%lld, rows of %lld, token map %zu\n", ls.c_str(),
                    (long long)hp.engram_heads, (long long)hp.engram_max_ngram, (long long)hp.engram_dim,
                    hp.engram_token_map.size());
        for (int64_t l : hp.engram_layers)
            std::printf("engram table %-3lld %s, %llu bytes a row\n", (long long)l, m->engram_format(l).describe().c_str(),
                        (unsigned long long)m->engram_row(l, 0).bytes());
    }
    // Layers may differ in their experts' types (llama-quantize's ffn_down rules), so in size.
    uint64_t each_min = UINT64_MAX, each_max = 0;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        each_min = std::min(each_min, m->expert_bytes_each(l));
        each_max = std::max(each_max, m->expert_bytes_each(l));
    }
    const std::string each = each_min == each_max ? strf("%.3f MB each", each_max / 1e6)
                                                  : strf("%.3f-%.3f MB each by layer", each_min / 1e6, each_max / 1e6);
    std::printf("bytes            dense %.3f GB, experts %.3f GB (%s), engram tables %.3f GB\n",
                m->dense_bytes() / 1e9, m->expert_bytes() / 1e9, each.c_str(), m->engram_bytes() / 1e9);
    print_ignored(*m);
    if (!tensors) return;
    // A split model's offsets are within each tensor's shard, which the last column names.
    const bool split = m->gguf().is_split();
    std::printf("\n%-40s %-6s %-24s %14s %14s%s\n", "tensor", "type", "shape", "offset", "bytes", split ? "  shard" : "");
    for (const gguf::TensorInfo& t : m->gguf().tensors()) {
        std::printf("%-40s %-6s %-24s %14llu %14llu", t.name.c_str(), type_name(t.type), shape(t.ne).c_str(),
                    (unsigned long long)t.file_offset, (unsigned long long)t.n_bytes);
        if (split) std::printf("  %5u", t.shard + 1);
        std::printf("\n");
    }
}

// The header only, through the GGUF reader: any well-formed GGUF file prints, a deepseek41 model
// or not. Invalid UTF-8 in a string is replaced rather than refused (the reader keeps bytes).
void print_info_json(const std::string& path, bool tensors) {
    const gguf::Reader r = gguf::Reader::open(path);
    const std::string text =
        gguf::header_json(r, tensors).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
}

}  // namespace

void register_info(CLI::App& app) {
    auto* cmd = app.add_subcommand("info", "Print a model's hyper-parameters, tensor table and bytes per tier");
    static std::string path;
    static bool no_tensors = false;
    static bool as_json = false;
    cmd->add_option("model", path, "GGUF model file (the first shard of a split model)")->required();
    cmd->add_flag("--no-tensors", no_tensors, "Omit the tensor table");
    cmd->add_flag("--json", as_json,
                  "Print the GGUF metadata (keys, types, values; long arrays summarised) and the tensor table as JSON");
    cmd->callback([] { as_json ? print_info_json(path, !no_tensors) : print_info(path, !no_tensors); });
}

}  // namespace bg::cli
