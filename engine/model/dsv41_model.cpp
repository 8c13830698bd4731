#include "model/dsv41_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "util/check.h"
#include "util/file_io.h"

namespace bg::dsv41 {

namespace {
uint64_t aligned_up64(uint64_t b) { return (b + 63) & ~uint64_t{63}; }
}  // namespace

Model::~Model() {
    std::free(dense_);
    std::free(embd_);
    for (int fd : fds_) ::close(fd);
}

void Model::read_tensor(const gguf::TensorInfo& t, void* dst, uint64_t bytes, uint64_t at, const char* what) const {
    BG_CHECK(at <= t.n_bytes && bytes <= t.n_bytes - at);
    pread_exact(fd(t.shard), dst, bytes, t.file_offset + at, what);
}

std::unique_ptr<Model> Model::open(const std::string& path, DenseHome home) {
    std::unique_ptr<Model> m(new Model());
    m->path_ = path;
    m->home_ = home;
    m->reader_ = gguf::Reader::open(path);
    m->hp_ = read_hparams(m->reader_);
    m->roles_ = validate_tensors(m->hp_, m->reader_);
    const HParams& hp = m->hp_;
    m->shape_ = MoeShape{hp.n_layer, hp.n_expert, hp.n_expert_used, hp.n_vocab, hp.bos_id, hp.engram_layers, hp.engram_dim};
    for (const gguf::Shard& s : m->reader_.shards()) {
        const std::string& p = s.path;
        const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("model: cannot open '%s': %s", p.c_str(), std::strerror(errno));
        m->fds_.push_back(fd);
        m->shard_paths_.push_back(p);
    }

    // Classify by the architecture's tensor table: experts and Engram tables stay on disk,
    // tensors the engine skips (MTP layers, the vision bias) are never read, and every other
    // tensor goes into the dense image. 1-D weights are held as F32 whatever their file type
    // (dequantised here), so the forward pass reads them as plain floats.
    // Image order: 1-D weights, then the matrices, then the token embedding, so a device holds
    // one contiguous prefix and the host's vector part is at the same offsets in either home.
    std::map<std::string, TensorClass> cls;
    for (const TensorSpec& spec : tensor_specs(hp, m->roles_)) cls[spec.name] = spec.cls;
    std::vector<DenseEntry> entries;
    std::vector<const gguf::TensorInfo*> infos;
    for (const gguf::TensorInfo& t : m->reader_.tensors()) {
        const auto c = cls.find(t.name);
        if (c == cls.end()) continue;
        if (c->second == TensorClass::kExperts) m->expert_bytes_ += t.n_bytes;
        else if (is_engram_table(c->second)) m->engram_bytes_ += t.n_bytes;
        else {
            entries.push_back({t.name, c->second, t.n_elems, t.n_bytes});
            infos.push_back(&t);
        }
    }
    const DenseLayout layout = dense_layout(entries);
    std::map<std::string, uint64_t> image_at;  // tensor name -> offset in the image
    std::vector<const gguf::TensorInfo*> vectors, matrices;
    const gguf::TensorInfo* embd = nullptr;
    for (size_t i = 0; i < entries.size(); ++i) {
        image_at[entries[i].name] = layout.offset[i];
        if (entries[i].cls == TensorClass::kVector) vectors.push_back(infos[i]);
        else if (entries[i].name == "token_embd.weight") embd = infos[i];
        else matrices.push_back(infos[i]);
    }
    BG_CHECK(embd != nullptr);
    for (const gguf::TensorInfo* t : vectors) m->device_tensors_.push_back({t, image_at.at(t->name), true});
    for (const gguf::TensorInfo* t : matrices) m->device_tensors_.push_back({t, image_at.at(t->name), false});
    m->vector_bytes_ = layout.vector_bytes;
    m->device_image_bytes_ = layout.device_image_bytes;
    const uint64_t image_bytes = layout.image_bytes();

    // Host memory: the whole image, or the vector part plus the embedding on their own.
    auto host_alloc = [](uint64_t bytes) {
        auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, std::max<uint64_t>(64, aligned_up64(bytes))));
        if (!p) fail("model: cannot allocate %llu bytes for dense weights", static_cast<unsigned long long>(bytes));
        return p;
    };
    const bool on_host = home == DenseHome::kHost;
    m->dense_bytes_ = layout.host_bytes(home);
    m->dense_ = host_alloc(on_host ? image_bytes : m->vector_bytes_);
    uint8_t* embd_host = on_host ? m->dense_ + image_at.at(embd->name) : (m->embd_ = host_alloc(embd->n_bytes));
    std::vector<uint8_t> packed;  // a quantized 1-D weight as stored, before dequantisation
    for (const gguf::TensorInfo* t : vectors) {
        float* out = reinterpret_cast<float*>(m->dense_ + image_at.at(t->name));
        if (t->type == GgmlType::F32) {
            m->read_tensor(*t, out, t->n_bytes, 0, "model: dense weights");
            continue;
        }
        packed.resize(t->n_bytes);
        m->read_tensor(*t, packed.data(), t->n_bytes, 0, "model: dense weights");
        const int64_t cols = t->ne[0];
        const uint64_t rows = t->n_elems / static_cast<uint64_t>(cols), rb = row_bytes(t->type, cols);
        for (uint64_t r = 0; r < rows; ++r) dequantize_row(t->type, packed.data() + r * rb, out + r * cols, cols);
    }
    if (on_host)
        for (const gguf::TensorInfo* t : matrices)
            m->read_tensor(*t, m->dense_ + image_at.at(t->name), t->n_bytes, 0, "model: dense weights");
    m->read_tensor(*embd, embd_host, embd->n_bytes, 0, "model: token embedding");

    auto mat = [&](const std::string& name) -> MatView {
        const gguf::TensorInfo* t = m->reader_.tensor(name);
        if (!t) return {};
        MatView v;
        v.image_offset = image_at.at(name);
        v.data = name == embd->name ? embd_host : (on_host ? m->dense_ + v.image_offset : nullptr);
        v.type = t->type;
        v.cols = t->ne[0];
        v.rows = static_cast<int64_t>(t->n_elems / static_cast<uint64_t>(t->ne[0]));
        v.row_stride = row_bytes(t->type, t->ne[0]);
        return v;
    };
    auto vec = [&](const std::string& name) -> const float* {
        const gguf::TensorInfo* t = m->reader_.tensor(name);
        if (!t) return nullptr;
        BG_CHECK(cls.at(name) == TensorClass::kVector);
        return reinterpret_cast<const float*>(m->dense_ + image_at.at(name));
    };
    m->token_embd_ = mat("token_embd.weight");
    m->output_ = mat("output.weight");
    m->output_norm_ = vec("output_norm.weight");
    m->layers_.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights& w = m->layers_[l];
        auto N = [&](const char* base, const char* suffix = "weight") { return layer_tensor_name(l, base, suffix); };
        w.attn_norm = vec(N("attn_norm"));
        w.ffn_norm = vec(N("ffn_norm"));
        w.attn_sinks = vec(N("attn_sinks"));
        w.q_a = mat(N("attn_q_a"));
        w.q_a_norm = vec(N("attn_q_a_norm"));
        w.q_b = mat(N("attn_q_b"));
        w.kv = mat(N("attn_kv"));
        w.kv_a_norm = vec(N("attn_kv_a_norm"));
        w.o_a = mat(N("attn_output_a"));
        w.o_b = mat(N("attn_output_b"));
        w.hc_attn_fn = mat(N("hc_attn_fn"));
        w.hc_ffn_fn = mat(N("hc_ffn_fn"));
        w.hc_attn_base = vec(N("hc_attn_base"));
        w.hc_attn_scale = vec(N("hc_attn_scale"));
        w.hc_ffn_base = vec(N("hc_ffn_base"));
        w.hc_ffn_scale = vec(N("hc_ffn_scale"));
        w.comp_kv = mat(N("attn_compressor_kv"));
        w.comp_gate = mat(N("attn_compressor_gate"));
        w.comp_norm = vec(N("attn_compressor_norm"));
        w.idx_k = mat(N("indexer.attn_k"));
        w.idx_k_norm = vec(N("indexer.k_norm"));
        w.idx_q_b = mat(N("indexer.attn_q_b"));
        w.idx_proj = mat(N("indexer.proj"));
        w.gate_inp = mat(N("ffn_gate_inp"));
        w.exp_probs_b = vec(N("exp_probs_b", "bias"));
        w.sh_gate = mat(N("ffn_gate_shexp"));
        w.sh_up = mat(N("ffn_up_shexp"));
        w.sh_down = mat(N("ffn_down_shexp"));
        w.engram_wkv = mat(N("engram_wkv"));
        w.engram_q = vec(N("engram_q"));
        w.engram_k = vec(N("engram_k"));
        w.engram_embd = m->reader_.tensor(N("engram_embd"));
        w.engram_embd_scale = m->roles_[l].engram_fp8 ? m->reader_.tensor(N("engram_embd_scale")) : nullptr;
        w.gate_exps = m->reader_.tensor(N("ffn_gate_exps"));
        w.up_exps = m->reader_.tensor(N("ffn_up_exps"));
        w.down_exps = m->reader_.tensor(N("ffn_down_exps"));
        w.expert_types = {w.gate_exps->type, w.up_exps->type, w.down_exps->type};
    }
    return m;
}

DenseLayout dense_layout(const std::vector<DenseEntry>& entries) {
    DenseLayout d;
    d.offset.assign(entries.size(), 0);
    auto aligned = [](uint64_t b) { return (b + 63) & ~uint64_t{63}; };
    uint64_t at = 0;
    for (size_t i = 0; i < entries.size(); ++i)
        if (entries[i].cls == TensorClass::kVector) {
            d.offset[i] = at;
            at += aligned(entries[i].n_elems * sizeof(float));
        }
    d.vector_bytes = at;
    for (size_t i = 0; i < entries.size(); ++i)
        if (entries[i].cls == TensorClass::kMatrix && entries[i].name != "token_embd.weight") {
            d.offset[i] = at;
            at += aligned(entries[i].n_bytes);
        }
    d.device_image_bytes = at;
    for (size_t i = 0; i < entries.size(); ++i)
        if (entries[i].name == "token_embd.weight") {
            d.offset[i] = at;
            d.embedding_bytes = aligned(entries[i].n_bytes);
        }
    return d;
}

ExpertRanges Model::expert_ranges(int64_t layer, int64_t expert) const {
    BG_CHECK(layer >= 0 && layer < hp_.n_layer && expert >= 0 && expert < hp_.n_expert);
    const LayerWeights& w = layers_[static_cast<size_t>(layer)];
    auto slice = [&](const gguf::TensorInfo* t) {
        const uint64_t each = t->n_bytes / static_cast<uint64_t>(hp_.n_expert);
        return ByteRange{t->file_offset + each * static_cast<uint64_t>(expert), each, t->shard};
    };
    return {slice(w.gate_exps), slice(w.up_exps), slice(w.down_exps)};
}

void Model::expert_views(int64_t layer, const uint8_t* buf, MatView* gate, MatView* up,
                         MatView* down) const {
    const LayerWeights& w = layers_[static_cast<size_t>(layer)];
    const ExpertRanges r = expert_ranges(layer, 0);
    auto view = [](const uint8_t* p, GgmlType t, int64_t cols, int64_t rows) {
        MatView v;
        v.data = p;
        v.type = t;
        v.cols = cols;
        v.rows = rows;
        v.row_stride = row_bytes(t, cols);
        return v;
    };
    *gate = view(buf, w.expert_types.gate, hp_.n_embd, hp_.n_ff_exp);
    *up = view(buf + r.gate.bytes, w.expert_types.up, hp_.n_embd, hp_.n_ff_exp);
    *down = view(buf + r.gate.bytes + r.up.bytes, w.expert_types.down, hp_.n_ff_exp, hp_.n_embd);
}

EngramRowRanges Model::engram_row(int64_t layer, uint64_t row) const {
    const LayerWeights& w = layers_[static_cast<size_t>(layer)];
    const gguf::TensorInfo* t = w.engram_embd;
    BG_CHECK(t != nullptr && row < static_cast<uint64_t>(t->ne[1]));
    EngramRowRanges r;
    const uint64_t rb = row_bytes(t->type, t->ne[0]);
    r.values = {t->file_offset + rb * row, rb, t->shard};
    if (const gguf::TensorInfo* s = w.engram_embd_scale) {
        const uint64_t sb = row_bytes(s->type, s->ne[0]);
        r.scales = {s->file_offset + sb * row, sb, s->shard};
    }
    return r;
}

EngramFormat Model::engram_format(int64_t layer) const {
    const LayerWeights& w = layers_[static_cast<size_t>(layer)];
    BG_CHECK(w.engram_embd != nullptr);
    return w.engram_embd_scale ? EngramFormat::fork_fp8() : EngramFormat::typed(w.engram_embd->type);
}

}  // namespace bg::dsv41
