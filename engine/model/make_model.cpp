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
#include "gguf/gguf_split.h"
#include "tensor/fp8_rows.h"
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

// A tensor is written row by row from drawn floats. The two tensors of a fork-fp8 Engram table
// are two views of one table: each row of both is drawn from the same floats (the values
// tensor's seed), the values tensor keeping the E4M3 codes and the scales tensor the E8M0 scales.
enum class RowPart { kWhole, kFp8Values, kFp8Scales };

struct PlannedTensor {
    gguf::TensorInfo info;     // file_offset within its file
    size_t model_index = 0;    // index in the model's tensor order: what seeds its rows
    Init init;
    RowPart part = RowPart::kWhole;
    uint64_t seed_index = 0;  // rows are drawn from mix_seed(seed, seed_index, row)
    int64_t draw_elems = 0;   // floats drawn per row
    int64_t row_elems = 0;
    uint64_t row_bytes = 0;
    uint64_t n_rows = 0;
};

}  // namespace

std::vector<GgmlType> tensor_types_for(const ModelScale& s, const std::vector<dsv41::TensorSpec>& specs) {
    std::vector<GgmlType> types;
    if (s.quant) {
        types = preset_tensor_types(*s.quant, s.hp, specs);
    } else {
        for (const dsv41::TensorSpec& spec : specs) {
            switch (spec.cls) {
                case dsv41::TensorClass::kVector: types.push_back(GgmlType::F32); break;
                case dsv41::TensorClass::kExperts: types.push_back(s.expert_type); break;
                case dsv41::TensorClass::kEngramTable: types.push_back(s.engram_format.type); break;
                case dsv41::TensorClass::kEngramFp8Values:
                case dsv41::TensorClass::kEngramFp8Scales: types.push_back(GgmlType::I8); break;
                case dsv41::TensorClass::kMatrix:
                    types.push_back(base_name(spec.name) == "ffn_gate_inp" ? s.router_type : s.dense_type);
                    break;
            }
        }
    }
    // The fork-fp8 Engram pair is I8 whatever the preset: FP8 codes and their E8M0 scales.
    for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].cls == dsv41::TensorClass::kEngramFp8Values || specs[i].cls == dsv41::TensorClass::kEngramFp8Scales)
            types[i] = GgmlType::I8;
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

// One file being written: the whole model, or one shard.
struct OutFile {
    std::string path;
    gguf::Writer header;
    std::string tmp;
    std::vector<uint8_t> header_bytes;
    uint64_t total = 0;       // the file's bytes
    std::vector<PlannedTensor> plan;
    uint64_t first_chunk = 0;  // its chunks' numbers in the run's sequence start here
    int fd_direct = -1, fd_plain = -1;
    bool direct = false;
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
    if (!scale.engram_format.row_fits(scale.hp.engram_dim))
        fail("make-model: Engram rows of %lld values are not whole in format %s", (long long)scale.hp.engram_dim,
             scale.engram_format.name().c_str());
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

    // Every tensor's rows, in model order (what seeds them), then placed in the files below.
    std::vector<PlannedTensor> model_plan;
    uint64_t seed_index = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        PlannedTensor p;
        p.info = w.tensors()[i];
        p.row_elems = p.info.ne[0];
        p.draw_elems = p.row_elems;
        p.row_bytes = row_bytes(p.info.type, p.row_elems);
        p.n_rows = p.info.n_elems / static_cast<uint64_t>(p.row_elems);
        if (specs[i].cls == dsv41::TensorClass::kEngramFp8Scales) {
            // The rows of the values tensor just before: its seed and its drawn width. Not
            // counting it keeps every other tensor's seed, and so its bytes, as in a file with
            // a typed table.
            const PlannedTensor& values = model_plan.back();
            BG_CHECK(values.part == RowPart::kFp8Values && values.n_rows == p.n_rows);
            p.part = RowPart::kFp8Scales;
            p.init = values.init;
            p.seed_index = values.seed_index;
            p.draw_elems = values.draw_elems;
        } else {
            p.part = specs[i].cls == dsv41::TensorClass::kEngramFp8Values ? RowPart::kFp8Values : RowPart::kWhole;
            p.init = init_for(scale, specs[i].name);
            p.seed_index = ++seed_index;
        }
        model_plan.push_back(p);
    }

    // The files to write: the model, or its shards as gguf-split --split-max-size makes them.
    // A tensor's bytes depend on its index in the model, never on the file it lands in.
    std::vector<OutFile> files;
    auto add_file = [&](std::string path, gguf::Writer header) {
        files.emplace_back();
        files.back().path = std::move(path);
        files.back().header = std::move(header);
    };
    if (cfg.split_max_bytes == 0) {
        add_file(cfg.out_path, std::move(w));
    } else {
        std::vector<gguf::Writer> shards = gguf::split_writer(w, cfg.split_max_bytes);
        const std::string prefix = split_output_prefix(cfg.out_path);
        const uint32_t n = static_cast<uint32_t>(shards.size());
        for (uint32_t k = 0; k < n; ++k) add_file(gguf::split_path(prefix, k, n), std::move(shards[k]));
    }
    const uint64_t chunk = cfg.chunk_bytes;
    BG_CHECK(chunk % 4096 == 0 && chunk > 0);
    size_t model_index = 0;
    uint64_t total = 0, n_chunks = 0;
    for (OutFile& f : files) {
        const std::vector<gguf::TensorInfo>& infos = f.header.tensors();
        for (const gguf::TensorInfo& info : infos) {
            BG_CHECK(info.name == specs[model_index].name);
            PlannedTensor p = model_plan[model_index];
            p.info = info;  // its offset within this file
            p.model_index = model_index;
            f.plan.push_back(p);
            ++model_index;
        }
        f.header_bytes = f.header.header_bytes();
        f.total = f.header.total_size();
        f.first_chunk = n_chunks;
        n_chunks += (f.total + chunk - 1) / chunk;
        total += f.total;
        f.tmp = f.path + ".tmp." + std::to_string(::getpid());
    }
    BG_CHECK(model_index == specs.size());

    // Nothing is left behind on failure: every file is written under a temporary name first.
    auto remove_temporaries = [&] {
        for (OutFile& f : files) {
            if (f.fd_direct >= 0) ::close(f.fd_direct);
            if (f.fd_plain >= 0) ::close(f.fd_plain);
            f.fd_direct = f.fd_plain = -1;
            ::unlink(f.tmp.c_str());
        }
    };
    try {
        for (OutFile& f : files) {
            f.fd_direct = ::open(f.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
            f.direct = f.fd_direct >= 0;
            if (!f.direct) f.fd_direct = ::open(f.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (f.fd_direct < 0) fail("make-model: cannot create '%s': %s", f.tmp.c_str(), std::strerror(errno));
            f.fd_plain = ::open(f.tmp.c_str(), O_WRONLY);
            if (f.fd_plain < 0) fail("make-model: cannot open '%s': %s", f.tmp.c_str(), std::strerror(errno));
        }
    } catch (...) {
        remove_temporaries();
        throw;
    }

    const int n_threads = cfg.threads > 0 ? cfg.threads : std::max(1u, std::thread::hardware_concurrency());
    std::atomic<uint64_t> next_chunk{0}, bytes_done{0};
    std::atomic<bool> failed{false};
    std::string error_text;
    std::mutex error_mu;

    auto worker = [&]() {
        std::unique_ptr<uint8_t, AlignedFree> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, chunk)));
        std::vector<float> rowf;
        std::vector<uint8_t> rowq, other;  // other: the half of a fork-fp8 row this tensor does not keep
        size_t first_tensor = 0;
        for (;;) {
            const uint64_t job = next_chunk.fetch_add(1);
            if (job >= n_chunks || failed.load()) return;
            // The file holding this chunk: the last whose first chunk is at or before it.
            const OutFile& f = *(std::upper_bound(files.begin(), files.end(), job,
                                                  [](uint64_t v, const OutFile& o) { return v < o.first_chunk; }) - 1);
            const std::vector<PlannedTensor>& plan = f.plan;
            const uint64_t c = job - f.first_chunk;
            const uint64_t lo = c * chunk, hi = std::min(f.total, lo + chunk);
            uint8_t* out = buf.get();
            std::memset(out, 0, hi - lo);
            if (lo < f.header_bytes.size())
                std::memcpy(out, f.header_bytes.data() + lo, std::min<uint64_t>(f.header_bytes.size(), hi) - lo);
            // Tensors are laid out in order: find the first that ends after lo.
            first_tensor = static_cast<size_t>(std::lower_bound(plan.begin(), plan.end(), lo,
                [](const PlannedTensor& p, uint64_t v) { return p.info.file_offset + p.info.n_bytes <= v; }) - plan.begin());
            for (size_t ti = first_tensor; ti < plan.size(); ++ti) {
                const PlannedTensor& p = plan[ti];
                const uint64_t t_lo = p.info.file_offset, t_hi = t_lo + p.info.n_bytes;
                if (t_lo >= hi) break;
                const uint64_t a = std::max(lo, t_lo), b = std::min(hi, t_hi);
                const uint64_t r0 = (a - t_lo) / p.row_bytes, r1 = (b - t_lo + p.row_bytes - 1) / p.row_bytes;
                rowf.resize(static_cast<size_t>(p.draw_elems));
                rowq.resize(static_cast<size_t>(p.row_bytes));
                other.resize(static_cast<size_t>(p.draw_elems));
                for (uint64_t r = r0; r < r1; ++r) {
                    draw_row(p.init, mix_seed(cfg.seed, p.seed_index, r), p.draw_elems, rowf.data());
                    switch (p.part) {
                        case RowPart::kWhole: quantize_row(p.info.type, rowf.data(), rowq.data(), p.row_elems); break;
                        case RowPart::kFp8Values: fp8::quantize_row(rowf.data(), rowq.data(), other.data(), p.draw_elems); break;
                        case RowPart::kFp8Scales: fp8::quantize_row(rowf.data(), other.data(), rowq.data(), p.draw_elems); break;
                    }
                    const uint64_t row_lo = t_lo + r * p.row_bytes;
                    const uint64_t s = std::max(row_lo, a), e = std::min(row_lo + p.row_bytes, b);
                    std::memcpy(out + (s - lo), rowq.data() + (s - row_lo), e - s);
                }
            }
            // Full chunks go through O_DIRECT; the short tail through the plain descriptor.
            const uint64_t len = hi - lo;
            const int fd = (f.direct && len % 4096 == 0) ? f.fd_direct : f.fd_plain;
            uint64_t done = 0;
            while (done < len) {
                const ssize_t n = ::pwrite(fd, out + done, len - done, static_cast<off_t>(lo + done));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    std::lock_guard<std::mutex> g(error_mu);
                    error_text = strf("make-model: write of '%s' at offset %llu failed: %s", f.tmp.c_str(),
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
        remove_temporaries();
        throw Error(error_text);
    }
    for (OutFile& f : files) {
        if (::fdatasync(f.fd_plain) != 0) {
            const int err = errno;
            remove_temporaries();
            fail("make-model: fdatasync of '%s' failed: %s", f.tmp.c_str(), std::strerror(err));
        }
    }
    for (OutFile& f : files) {
        ::close(f.fd_direct);
        ::close(f.fd_plain);
        f.fd_direct = f.fd_plain = -1;
    }
    // The first shard, which opens the model, is renamed into place last: a reader that finds it
    // finds every shard.
    MakeModelResult res;
    for (size_t k = files.size(); k-- > 0;) {
        OutFile& f = files[k];
        if (::rename(f.tmp.c_str(), f.path.c_str()) != 0) {
            const int err = errno;
            remove_temporaries();
            fail("make-model: cannot rename '%s' to '%s': %s", f.tmp.c_str(), f.path.c_str(), std::strerror(err));
        }
    }
    for (const OutFile& f : files) res.paths.push_back(f.path);
    res.file_bytes = total;
    res.file_type = file_type;
    res.tokenizer_tokens = tokenizer_tokens;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

std::string split_output_prefix(const std::string& out_path) {
    const std::string ext = ".gguf";
    const bool has_ext = out_path.size() > ext.size() && out_path.compare(out_path.size() - ext.size(), ext.size(), ext) == 0;
    return has_ext ? out_path.substr(0, out_path.size() - ext.size()) : out_path;
}

}  // namespace bg
