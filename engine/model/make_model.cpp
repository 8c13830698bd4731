#include "model/make_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "gguf/gguf.h"
#include "tokenizer/hf_import.h"
#include "util/check.h"
#include "util/rng.h"

namespace bg {

namespace {

bool is_prime(uint64_t n) {
    if (n < 2) return false;
    if (n % 2 == 0) return n == 2;
    for (uint64_t d = 3; d * d <= n; d += 2)
        if (n % d == 0) return false;
    return true;
}

// How the values of one tensor are drawn: value = mean + stddev * N(0, 1), and for the
// mHC base vectors a fixed pattern (see init_for).
struct Init {
    float mean = 0.0f;
    float stddev = 1.0f;
    bool hc_base = false;
    bool hc_scale = false;
};

std::string base_name(const std::string& name) {
    // "blk.12.attn_q_a.weight" -> "attn_q_a"; "output.weight" -> "output"
    std::string n = name;
    if (n.rfind("blk.", 0) == 0) n = n.substr(n.find('.', 4) + 1);
    const size_t dot = n.rfind('.');
    return dot == std::string::npos ? n : n.substr(0, dot);
}

Init init_for(const ModelScale& s, const std::string& name) {
    const dsv41::HParams& hp = s.hp;
    const std::string b = base_name(name);
    auto fan = [](int64_t in, float gain = 1.0f) { return Init{0.0f, gain / std::sqrt(static_cast<float>(in))}; };
    if (b.size() >= 5 && b.compare(b.size() - 5, 5, "_norm") == 0) return {1.0f, 0.05f};
    if (b == "engram_q" || b == "engram_k") return {1.0f, 0.05f};
    if (b == "token_embd" || b == "engram_embd" || b == "attn_sinks") return {0.0f, 1.0f};
    if (b == "output") return fan(hp.n_embd);
    if (b == "attn_q_a" || b == "attn_kv" || b == "attn_compressor_kv" || b == "attn_compressor_gate" ||
        b == "indexer.proj" || b == "ffn_gate_inp" || b == "ffn_gate_exps" || b == "ffn_up_exps" ||
        b == "ffn_gate_shexp" || b == "ffn_up_shexp")
        return fan(hp.n_embd);
    if (b == "attn_q_b" || b == "indexer.attn_q_b") return fan(hp.q_lora_rank);
    if (b == "indexer.attn_k") return fan(hp.head_dim);
    if (b == "attn_output_a") return fan(hp.q_dim() / hp.o_groups);
    if (b == "attn_output_b") return fan(hp.o_groups * hp.o_lora_rank, 0.5f);
    if (b == "ffn_down_exps" || b == "ffn_down_shexp") return fan(hp.n_ff_exp * std::max<int64_t>(1, hp.n_expert_shared), 0.5f);
    if (b == "hc_attn_fn" || b == "hc_ffn_fn") return fan(hp.hc_count * hp.n_embd, 0.5f);
    if (b == "hc_attn_base" || b == "hc_ffn_base") return Init{0.0f, 0.1f, true, false};
    if (b == "hc_attn_scale" || b == "hc_ffn_scale") return Init{0.5f, 0.05f, false, true};
    if (b == "exp_probs_b") return {0.0f, static_cast<float>(s.router_bias_skew)};
    if (b == "engram_wkv") return fan(hp.engram_buckets() * hp.engram_dim);
    BG_CHECK_MSG(false, name.c_str());
    return {};
}

// One row of a tensor, drawn from its own generator.
void draw_row(const Init& init, uint64_t row_seed, int64_t n, float* out) {
    Rng rng(row_seed);
    for (int64_t i = 0; i < n; ++i) out[i] = init.mean + init.stddev * rng.normal_fast();
    if (init.hc_base) {
        // pre (0..3) and post (4..7) start near sigmoid(0); comb (8..23) near identity so that
        // each residual copy mostly keeps itself: element 8 + dst + 4*src.
        for (int64_t i = 8; i < 24 && i < n; ++i) {
            const int64_t dst = (i - 8) % 4, src = (i - 8) / 4;
            out[i] += dst == src ? 3.0f : 0.0f;
        }
    }
}

struct PlannedTensor {
    gguf::TensorInfo info;
    Init init;
    int64_t row_elems = 0;
    uint64_t row_bytes = 0;
    uint64_t n_rows = 0;
};

}  // namespace

std::vector<GgmlType> tensor_types_for(const ModelScale& s, const std::vector<dsv41::TensorSpec>& specs) {
    if (s.quant) return preset_tensor_types(*s.quant, s.hp, specs);
    std::vector<GgmlType> types;
    for (const dsv41::TensorSpec& spec : specs) {
        switch (spec.cls) {
            case dsv41::TensorClass::kVector: types.push_back(GgmlType::F32); break;
            case dsv41::TensorClass::kExperts: types.push_back(s.expert_type); break;
            case dsv41::TensorClass::kEngramTable: types.push_back(s.engram_type); break;
            case dsv41::TensorClass::kMatrix:
                types.push_back(base_name(spec.name) == "ffn_gate_inp" ? s.router_type : s.dense_type);
                break;
        }
    }
    return types;
}

std::optional<QuantPreset> file_type_preset(const ModelScale& s, const std::vector<dsv41::TensorSpec>& specs,
                                            const std::vector<GgmlType>& types) {
    if (s.quant) return s.quant;
    for (QuantPreset p : all_quant_presets())
        if (preset_tensor_types(p, s.hp, specs) == types) return p;
    return std::nullopt;
}

namespace {

struct AlignedFree {
    void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

void generate_engram_params(ModelScale& s, uint64_t seed) {
    dsv41::HParams& hp = s.hp;
    const int64_t n_tab = static_cast<int64_t>(hp.engram_layers.size());
    hp.engram_multipliers.clear();
    hp.engram_primes.clear();
    hp.engram_offsets.clear();
    hp.engram_token_map.clear();
    if (n_tab == 0) return;
    Rng rng(mix_seed(seed, 0xE9A3));
    const int64_t buckets = hp.engram_buckets();
    for (int64_t t = 0; t < n_tab; ++t) {
        for (int64_t k = 0; k < hp.engram_max_ngram; ++k) hp.engram_multipliers.push_back(rng.next() | 1ull);
        // Distinct primes just below rows/buckets, laid end to end: bucket b owns rows
        // [offset_b, offset_b + prime_b).
        uint64_t target = static_cast<uint64_t>(s.engram_rows_per_table / buckets);
        uint64_t offset = 0;
        std::set<uint64_t> used;
        uint64_t cand = target;
        for (int64_t b = 0; b < buckets; ++b) {
            while (!is_prime(cand) || used.count(cand)) --cand;
            used.insert(cand);
            hp.engram_primes.push_back(cand);
            hp.engram_offsets.push_back(offset);
            offset += cand;
            --cand;
        }
    }
    // Token map: the first ids of the vocabulary own a compressed id each; the others share
    // one with a random earlier token, as tokens with equal normalised text do.
    const int64_t nc = std::min<int64_t>(s.engram_compressed_vocab, hp.n_vocab);
    hp.engram_token_map.resize(static_cast<size_t>(hp.n_vocab));
    for (int64_t t = 0; t < hp.n_vocab; ++t)
        hp.engram_token_map[t] = static_cast<uint32_t>(t < nc ? t : rng.below(static_cast<uint64_t>(nc)));
    hp.engram_pad_id = static_cast<uint64_t>(hp.engram_token_map[2 % hp.n_vocab]);  // the pad token's id
}

MakeModelResult make_model(const ModelScale& scale_in, const MakeModelConfig& cfg) {
    const auto t0 = std::chrono::steady_clock::now();
    ModelScale scale = scale_in;
    generate_engram_params(scale, cfg.seed);
    const std::vector<dsv41::TensorSpec> specs = dsv41::tensor_specs(scale.hp, scale.roles());

    gguf::Writer w;
    dsv41::write_hparams(scale.hp, w);
    // The tokenizer: llama.cpp refuses a file without tokenizer.ggml.model; "none" says the file
    // carries no vocabulary (llama.cpp then sizes it from deepseek41.vocab_size). A writer of a
    // real tokenizer sets its keys after this one (Writer::set replaces the value).
    w.set("tokenizer.ggml.model", gguf::Value::str("none"));
    w.set("general.name", gguf::Value::str("betelgeuse synthetic dsv41 (" + scale.name + ")"));
    w.set("general.type", gguf::Value::str("model"));
    w.set("betelgeuse.seed", gguf::Value::u64(cfg.seed));
    w.set("betelgeuse.scale", gguf::Value::str(scale.name));
    w.set("betelgeuse.router_bias_skew", gguf::Value::f32(static_cast<float>(scale.router_bias_skew)));
    int64_t tokenizer_tokens = 0;
    if (!cfg.tokenizer_dir.empty()) {
        const tok::Vocab v = tok::import_hf_tokenizer(cfg.tokenizer_dir, scale.hp.n_vocab);
        v.write_gguf(w);
        tokenizer_tokens = static_cast<int64_t>(v.tokens.size());
    }
    const std::vector<GgmlType> types = tensor_types_for(scale, specs);
    const std::optional<QuantPreset> file_type = file_type_preset(scale, specs, types);
    if (file_type) {
        // llama-quantize's two keys: the preset as its LLAMA_FTYPE number, and the version of
        // ggml's block formats (GGML_QNT_VERSION in ggml.h, 2).
        w.set("general.file_type", gguf::Value::u32(quant_preset_llama_ftype(*file_type)));
        w.set("general.quantization_version", gguf::Value::u32(2));
    }
    for (size_t i = 0; i < specs.size(); ++i) w.add_tensor(specs[i].name, specs[i].ne, types[i]);

    std::vector<PlannedTensor> plan;
    for (size_t i = 0; i < specs.size(); ++i) {
        PlannedTensor p;
        p.info = w.tensors()[i];
        p.init = init_for(scale, specs[i].name);
        p.row_elems = p.info.ne[0];
        p.row_bytes = row_bytes(p.info.type, p.row_elems);
        p.n_rows = p.info.n_elems / static_cast<uint64_t>(p.row_elems);
        plan.push_back(p);
    }
    const std::vector<uint8_t> header = w.header_bytes();
    const uint64_t total = w.total_size();
    const uint64_t chunk = cfg.chunk_bytes;
    BG_CHECK(chunk % 4096 == 0 && chunk > 0);
    const uint64_t n_chunks = (total + chunk - 1) / chunk;

    const std::string tmp = cfg.out_path + ".tmp." + std::to_string(::getpid());
    int fd_direct = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    const bool direct = fd_direct >= 0;
    if (!direct) fd_direct = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd_direct < 0) fail("make-model: cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
    const int fd_plain = ::open(tmp.c_str(), O_WRONLY);
    if (fd_plain < 0) fail("make-model: cannot open '%s': %s", tmp.c_str(), std::strerror(errno));

    const int n_threads = cfg.threads > 0 ? cfg.threads : std::max(1u, std::thread::hardware_concurrency());
    std::atomic<uint64_t> next_chunk{0}, bytes_done{0};
    std::atomic<bool> failed{false};
    std::string error_text;
    std::mutex error_mu;

    auto worker = [&]() {
        std::unique_ptr<uint8_t, AlignedFree> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, chunk)));
        std::vector<float> rowf;
        std::vector<uint8_t> rowq;
        size_t first_tensor = 0;
        for (;;) {
            const uint64_t c = next_chunk.fetch_add(1);
            if (c >= n_chunks || failed.load()) return;
            const uint64_t lo = c * chunk, hi = std::min(total, lo + chunk);
            uint8_t* out = buf.get();
            std::memset(out, 0, hi - lo);
            if (lo < header.size()) std::memcpy(out, header.data() + lo, std::min<uint64_t>(header.size(), hi) - lo);
            // Tensors are laid out in order: find the first that ends after lo.
            first_tensor = static_cast<size_t>(std::lower_bound(plan.begin(), plan.end(), lo,
                [](const PlannedTensor& p, uint64_t v) { return p.info.file_offset + p.info.n_bytes <= v; }) - plan.begin());
            for (size_t ti = first_tensor; ti < plan.size(); ++ti) {
                const PlannedTensor& p = plan[ti];
                const uint64_t t_lo = p.info.file_offset, t_hi = t_lo + p.info.n_bytes;
                if (t_lo >= hi) break;
                const uint64_t a = std::max(lo, t_lo), b = std::min(hi, t_hi);
                const uint64_t r0 = (a - t_lo) / p.row_bytes, r1 = (b - t_lo + p.row_bytes - 1) / p.row_bytes;
                rowf.resize(static_cast<size_t>(p.row_elems));
                rowq.resize(static_cast<size_t>(p.row_bytes));
                for (uint64_t r = r0; r < r1; ++r) {
                    draw_row(p.init, mix_seed(cfg.seed, ti + 1, r), p.row_elems, rowf.data());
                    quantize_row(p.info.type, rowf.data(), rowq.data(), p.row_elems);
                    const uint64_t row_lo = t_lo + r * p.row_bytes;
                    const uint64_t s = std::max(row_lo, a), e = std::min(row_lo + p.row_bytes, b);
                    std::memcpy(out + (s - lo), rowq.data() + (s - row_lo), e - s);
                }
            }
            // Full chunks go through O_DIRECT; the short tail through the plain descriptor.
            const uint64_t len = hi - lo;
            const int fd = (direct && len % 4096 == 0) ? fd_direct : fd_plain;
            uint64_t done = 0;
            while (done < len) {
                const ssize_t n = ::pwrite(fd, out + done, len - done, static_cast<off_t>(lo + done));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    std::lock_guard<std::mutex> g(error_mu);
                    error_text = strf("make-model: write of '%s' at offset %llu failed: %s", tmp.c_str(),
                                      static_cast<unsigned long long>(lo + done), n < 0 ? std::strerror(errno) : "no progress");
                    failed = true;
                    return;
                }
                done += static_cast<uint64_t>(n);
            }
            bytes_done += len;
        }
    };

    std::vector<std::thread> threads;
    for (int i = 0; i < n_threads; ++i) threads.emplace_back(worker);
    const bool show = cfg.progress && isatty(STDERR_FILENO);
    while (show) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        const uint64_t d = bytes_done.load();
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double rate = d / std::max(sec, 1e-3);
        const double left = rate > 0 ? (total - d) / rate : 0.0;
        std::fprintf(stderr, "\rmake-model: %.2f / %.2f GB  %.0f MB/s  %.0f s left   ", d / 1e9, total / 1e9,
                     rate / 1e6, left);
        if (d >= total || failed) break;
    }
    for (auto& t : threads) t.join();
    if (show) std::fprintf(stderr, "\n");
    if (failed) {
        ::close(fd_direct);
        ::close(fd_plain);
        ::unlink(tmp.c_str());
        throw Error(error_text);
    }
    if (::fdatasync(fd_plain) != 0) fail("make-model: fdatasync failed: %s", std::strerror(errno));
    ::close(fd_direct);
    ::close(fd_plain);
    if (::rename(tmp.c_str(), cfg.out_path.c_str()) != 0)
        fail("make-model: cannot rename '%s' to '%s': %s", tmp.c_str(), cfg.out_path.c_str(), std::strerror(errno));
    MakeModelResult res;
    res.file_bytes = total;
    res.file_type = file_type;
    res.tokenizer_tokens = tokenizer_tokens;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace bg
