#include "reference/dsv41_reference.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <numeric>
#include <stdexcept>

#include "ops_reference.h"
#include "tensor/ggml_types.h"

namespace ref {

using bg::gguf::Reader;
using bg::gguf::Value;
using bg::gguf::ValueType;
using Vec = std::vector<double>;

namespace {

[[noreturn]] void refuse(const std::string& what) { throw std::runtime_error("dsv41 reference: " + what); }

std::string key(const std::string& k) { return "deepseek41." + k; }

// A scalar or an array of numbers, as llama.cpp's get_key_or_arr reads it: a scalar stands for
// every layer; an array must cover every block (it may be longer than the main layers, which
// take its first values).
bool per_layer(const Reader& r, const std::string& k, int64_t n_all, int64_t n, std::vector<double>* out) {
    const Value* v = r.find(k);
    if (!v) return false;
    auto num = [&](const Value& x) -> double {
        switch (x.type) {
            case ValueType::FLOAT32: case ValueType::FLOAT64: return x.f;
            case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
                return static_cast<double>(x.i);
            case ValueType::ARRAY: case ValueType::STRING: refuse(k + " holds a non-number");
            default: return static_cast<double>(x.u);
        }
    };
    out->clear();
    if (v->type != ValueType::ARRAY) {
        out->assign(static_cast<size_t>(n), num(*v));
        return true;
    }
    if (static_cast<int64_t>(v->items.size()) < n_all) refuse(k + " is shorter than block_count");
    for (int64_t l = 0; l < n; ++l) out->push_back(num(v->items[static_cast<size_t>(l)]));
    return true;
}

double rms_inv(const Vec& x, size_t off, size_t n, double eps) {
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
    return 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
}

// RMSNorm of x (whole vector) times an optional weight.
Vec rmsnorm(const Vec& x, const std::vector<float>* w, double eps) {
    const double s = rms_inv(x, 0, x.size(), eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * (w ? (*w)[i] : 1.0);
    return y;
}

// ggml NORM mode: adjacent pairs (2i, 2i+1) of the n_dims values at x[off..].
void rope_inplace(Vec& x, size_t off, int64_t n_dims, const Dsv41Hparams& hp, double base, bool scaled,
                  int64_t pos, bool inverse) {
    for (int64_t i = 0; i < n_dims / 2; ++i) {
        const double th = dsv41_rope_theta(hp, base, scaled, n_dims, pos, i) * (inverse ? -1.0 : 1.0);
        const double a = x[off + 2 * i], b = x[off + 2 * i + 1];
        x[off + 2 * i] = a * std::cos(th) - b * std::sin(th);
        x[off + 2 * i + 1] = a * std::sin(th) + b * std::cos(th);
    }
}

struct Mix {
    double pre[4], post[4], comb[4][4];  // comb[dst][src]
};

}  // namespace

Dsv41Route dsv41_route(const Vec& logits, const Vec& bias, int64_t k, bool norm, double scale) {
    const size_t n = logits.size();
    Vec p(n), sel(n);
    for (size_t e = 0; e < n; ++e) {
        p[e] = std::sqrt(softplus(logits[e]));
        sel[e] = p[e] + (bias.empty() ? 0.0 : bias[e]);
    }
    Dsv41Route r;
    r.ids = top_k(sel, k);
    double sum = 0;
    for (int32_t id : r.ids) sum += p[id];
    for (int32_t id : r.ids) {
        double w = p[id];
        if (norm) w /= std::max(sum, 6.103515625e-5);
        if (scale != 0.0 && scale != 1.0) w *= scale;
        r.weights.push_back(w);
    }
    return r;
}

double dsv41_swiglu(double g, double u, double limit, SwigluForm form) {
    if (!(limit > 1e-6)) return silu(g) * u;
    const double uc = std::clamp(u, -limit, limit);
    if (form == SwigluForm::kDeepSeek) return silu(std::min(g, limit)) * uc;
    return std::min(silu(g), limit) * uc;
}

double dsv41_rope_theta(const Dsv41Hparams& hp, double base, bool scaled, int64_t n_dims, int64_t pos,
                        int64_t i) {
    const double extrap = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / n_dims);
    if (!scaled || hp.rope_scaling == RopeScaling::kNone) return extrap;
    const double interp = extrap / hp.rope_factor;
    if (hp.rope_scaling == RopeScaling::kLinear) return interp;
    // ggml rope_yarn with ext_factor 1: the ramp blends interpolation (low-frequency pairs) into
    // extrapolation (high-frequency pairs) between the correction dims of beta_fast/beta_slow.
    // Its magnitude factor 1 + 0.1 ln(factor) is cancelled by llama.cpp's attention factor, so
    // only the angle changes.
    auto corr_dim = [&](double beta) {
        return n_dims * std::log(static_cast<double>(hp.yarn_n_ctx_orig) / (beta * 2 * std::numbers::pi)) /
               (2 * std::log(base));
    };
    const double low = std::max(0.0, std::floor(corr_dim(hp.yarn_beta_fast)));
    const double high = std::min(static_cast<double>(n_dims - 1), std::ceil(corr_dim(hp.yarn_beta_slow)));
    const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
    const double ramp = 1.0 - std::clamp(y, 0.0, 1.0);
    return interp * (1 - ramp) + extrap * ramp;
}

Dsv41Hparams dsv41_read_hparams(const Reader& r) {
    Dsv41Hparams hp;
    if (r.get_str("general.architecture") != "deepseek41") refuse("architecture is not deepseek41");
    hp.n_layer_all = static_cast<int64_t>(r.get_u64(key("block_count")));
    // llama.cpp: the last nextn_predict_layers blocks are MTP only when the file really has the
    // first MTP block's eh_proj; otherwise every block is a main layer.
    hp.n_layer = hp.n_layer_all;
    if (r.find(key("nextn_predict_layers"))) {
        const int64_t nextn = static_cast<int64_t>(r.get_u64(key("nextn_predict_layers")));
        if (nextn > 0 && nextn < hp.n_layer_all &&
            r.tensor("blk." + std::to_string(hp.n_layer_all - nextn) + ".nextn.eh_proj.weight"))
            hp.n_layer = hp.n_layer_all - nextn;
    }
    const int64_t L = hp.n_layer;
    hp.n_embd = static_cast<int64_t>(r.get_u64(key("embedding_length")));
    hp.n_head = static_cast<int64_t>(r.get_u64(key("attention.head_count")));
    hp.head_dim = static_cast<int64_t>(r.get_u64(key("attention.key_length")));
    hp.rope_dims = static_cast<int64_t>(r.get_u64(key("rope.dimension_count")));
    hp.q_lora_rank = static_cast<int64_t>(r.get_u64(key("attention.q_lora_rank")));
    hp.window = static_cast<int64_t>(r.get_u64(key("attention.sliding_window")));
    hp.o_groups = static_cast<int64_t>(r.get_u64(key("attention.output_group_count")));
    hp.o_lora_rank = static_cast<int64_t>(r.get_u64(key("attention.output_lora_rank")));
    hp.n_expert = static_cast<int64_t>(r.get_u64(key("expert_count")));
    hp.n_expert_used = static_cast<int64_t>(r.get_u64(key("expert_used_count")));
    hp.n_ff_exp = static_cast<int64_t>(r.get_u64(key("expert_feed_forward_length")));
    hp.idx_n_head = static_cast<int64_t>(r.get_u64(key("attention.indexer.head_count")));
    hp.idx_head_dim = static_cast<int64_t>(r.get_u64(key("attention.indexer.key_length")));
    hp.idx_top_k = static_cast<int64_t>(r.get_u64(key("attention.indexer.top_k")));
    hp.hc = static_cast<int64_t>(r.get_u64(key("hyper_connection.count")));
    if (hp.hc != 4) refuse("hyper_connection.count must be 4");
    hp.sinkhorn_iters = static_cast<int64_t>(r.get_u64(key("hyper_connection.sinkhorn_iterations")));
    hp.hc_eps = r.get_f64(key("hyper_connection.epsilon"));
    hp.rms_eps = r.get_f64(key("attention.layer_norm_rms_epsilon"));
    hp.rope_base = r.get_f64(key("rope.freq_base"));
    hp.compress_rope_base = r.get_f64(key("attention.compress_rope_freq_base"));
    if (r.get_u64(key("expert_gating_func")) != 4) refuse("expert_gating_func is not sqrt-softplus (4)");
    hp.weights_norm = r.get_bool(key("expert_weights_norm"));
    hp.weights_scale = r.get_f64(key("expert_weights_scale"));

    // llama.cpp: an absent scaling type reads as "linear"; a factor of 0 (or none) means 1.
    const std::string type = r.find(key("rope.scaling.type")) ? r.get_str(key("rope.scaling.type")) : "linear";
    if (type == "none") hp.rope_scaling = RopeScaling::kNone;
    else if (type == "linear") hp.rope_scaling = RopeScaling::kLinear;
    else if (type == "yarn") hp.rope_scaling = RopeScaling::kYarn;
    else refuse("unknown rope.scaling.type '" + type + "'");
    hp.rope_factor = r.find(key("rope.scaling.factor")) ? r.get_f64(key("rope.scaling.factor")) : 0.0;
    if (hp.rope_factor == 0.0) hp.rope_factor = 1.0;
    if (hp.rope_scaling == RopeScaling::kNone) hp.rope_factor = 1.0;
    hp.yarn_n_ctx_orig = r.find(key("rope.scaling.original_context_length"))
                             ? static_cast<int64_t>(r.get_u64(key("rope.scaling.original_context_length")))
                             : static_cast<int64_t>(r.get_u64(key("context_length")));
    if (r.find(key("rope.scaling.yarn_beta_fast"))) hp.yarn_beta_fast = r.get_f64(key("rope.scaling.yarn_beta_fast"));
    if (r.find(key("rope.scaling.yarn_beta_slow"))) hp.yarn_beta_slow = r.get_f64(key("rope.scaling.yarn_beta_slow"));

    std::vector<double> ratios;
    if (!per_layer(r, key("attention.compress_ratios"), hp.n_layer_all, L, &ratios) ||
        r.find(key("attention.compress_ratios"))->type != ValueType::ARRAY)
        refuse("attention.compress_ratios must be an array");
    for (double x : ratios) hp.compress_ratio.push_back(static_cast<int64_t>(x));
    // Required, as in llama.cpp; the shared expert's clamp falls back to the routed one's.
    if (!per_layer(r, key("swiglu_clamp_exp"), hp.n_layer_all, L, &hp.clamp_exp)) refuse("missing swiglu_clamp_exp");
    if (!per_layer(r, key("swiglu_clamp_shexp"), hp.n_layer_all, L, &hp.clamp_shexp)) hp.clamp_shexp = hp.clamp_exp;

    if (r.find(key("engram.layer_ids"))) {
        for (int64_t id : r.get_arr_i64(key("engram.layer_ids"))) hp.engram_layers.push_back(id);
        hp.engram_heads = static_cast<int64_t>(r.get_u64(key("engram.head_count")));
        hp.engram_dim = static_cast<int64_t>(r.get_u64(key("engram.key_length")));
        hp.engram_max_ngram = static_cast<int64_t>(r.get_u64(key("engram.max_ngram_size")));
        hp.engram_mult = r.get_arr_u64(key("engram.multipliers"));
        hp.engram_primes = r.get_arr_u64(key("engram.primes"));
        hp.engram_offsets = r.get_arr_u64(key("engram.offsets"));
        hp.engram_token_map = r.get_arr_u64(key("engram.token_map"));
        hp.engram_pad = r.get_u64(key("engram.pad_id"));
        const size_t ne = hp.engram_layers.size();
        const size_t n_cols = static_cast<size_t>((hp.engram_max_ngram - 1) * hp.engram_heads);
        if (hp.engram_max_ngram < 2 || hp.engram_heads < 1) refuse("engram needs a head and a 2-gram");
        if (hp.engram_mult.size() != ne * static_cast<size_t>(hp.engram_max_ngram) ||
            hp.engram_primes.size() != ne * n_cols || hp.engram_offsets.size() != ne * n_cols)
            refuse("engram multiplier/prime/offset counts do not match");
        for (uint64_t p : hp.engram_primes)
            if (p == 0) refuse("engram prime of zero");
    }
    return hp;
}

// ---------------------------------------------------------------------------------------------

struct Dsv41Reference::Layer {
    Mat attn_norm, ffn_norm, sinks, q_a, q_a_norm, q_b, kv, kv_norm, o_a, o_b;
    Mat hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    Mat comp_kv, comp_gate, comp_norm;
    Mat idx_k, idx_k_norm, idx_q_b, idx_proj;
    Mat gate_inp, probs_b, gate_sh, up_sh, down_sh;
    Mat eng_wkv, eng_q, eng_k;
    int64_t engram = -1;  // index into the engram arrays
    // Roles by tensor presence (DSV41.md, llama.cpp load_arch_tensors): which layer publishes the
    // compressed stream, the index keys and the index selection this layer reads.
    int64_t kv_src = -1, key_src = -1, topk_src = -1;
};

Vec Dsv41Reference::Mat::mul(const Vec& x) const {
    if (static_cast<int64_t>(x.size()) != cols) refuse("matmul shape mismatch");
    Vec y(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        const float* row = w.data() + r * cols;
        for (int64_t i = 0; i < cols; ++i) s += static_cast<double>(row[i]) * x[i];
        y[r] = s;
    }
    return y;
}

Dsv41Reference::Mat Dsv41Reference::load_rows(const std::string& name, int64_t r0, int64_t n) const {
    const bg::gguf::TensorInfo* t = r_.tensor(name);
    if (!t) refuse("missing tensor " + name);
    const int64_t ne0 = t->ne[0];
    const uint64_t rb = bg::row_bytes(t->type, ne0);
    std::vector<uint8_t> bytes(rb * static_cast<uint64_t>(n));
    const uint64_t off = t->file_offset + rb * static_cast<uint64_t>(r0);
    if (::pread(fds_.at(t->shard), bytes.data(), bytes.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(bytes.size()))
        refuse("short read of " + name);
    Mat m;
    m.rows = n;
    m.cols = ne0;
    m.w.resize(static_cast<size_t>(n * ne0));
    for (int64_t r = 0; r < n; ++r)
        bg::dequantize_row(t->type, bytes.data() + rb * r, m.w.data() + r * ne0, ne0);
    return m;
}

Dsv41Reference::Mat Dsv41Reference::load(const std::string& name, bool required) const {
    const bg::gguf::TensorInfo* t = r_.tensor(name);
    if (!t) {
        if (required) refuse("missing tensor " + name);
        return {};
    }
    int64_t rows = 1;
    for (size_t d = 1; d < t->ne.size(); ++d) rows *= t->ne[d];
    return load_rows(name, 0, rows);
}

// OCP FP8-E4M3 ("e4m3fn", as torch.float8_e4m3fn): sign, 4 exponent bits with bias 7, 3 mantissa
// bits, exponent 0 subnormal, S.1111.111 NaN, no infinities.
static double e4m3(uint8_t c) {
    const unsigned e = (c >> 3) & 15u, m = c & 7u;
    const double mag = e == 15 && m == 7 ? NAN : e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, static_cast<int>(e) - 10);
    return (c & 0x80) ? -mag : mag;
}

std::vector<double> Dsv41Reference::engram_row(int64_t l, int64_t row) const {
    const std::string tab = "blk." + std::to_string(l) + ".engram_embd.weight";
    const bg::gguf::TensorInfo* scales = r_.tensor("blk." + std::to_string(l) + ".engram_embd_scale.weight");
    if (!scales) {
        const Mat m = load_rows(tab, row, 1);
        return std::vector<double>(m.w.begin(), m.w.end());
    }
    const bg::gguf::TensorInfo* values = r_.tensor(tab);
    if (!values || values->type != bg::GgmlType::I8 || scales->type != bg::GgmlType::I8 || values->ne.size() != 2 ||
        scales->ne.size() != 2 || scales->ne[0] * 32 != values->ne[0])
        refuse("fork-fp8 Engram pair of layer " + std::to_string(l) + " is not I8 values beside one I8 scale per 32");
    const int64_t dim = values->ne[0];
    std::vector<uint8_t> v(static_cast<size_t>(dim)), e(static_cast<size_t>(dim / 32));
    if (::pread(fds_.at(values->shard), v.data(), v.size(), static_cast<off_t>(values->file_offset + row * dim)) !=
            static_cast<ssize_t>(v.size()) ||
        ::pread(fds_.at(scales->shard), e.data(), e.size(), static_cast<off_t>(scales->file_offset + row * (dim / 32))) !=
            static_cast<ssize_t>(e.size()))
        refuse("short read of " + tab);
    std::vector<double> out(static_cast<size_t>(dim));
    for (int64_t j = 0; j < dim; ++j)
        out[j] = e4m3(v[j]) * (e[j / 32] == 255 ? NAN : std::ldexp(1.0, static_cast<int>(e[j / 32]) - 127));
    return out;
}

const Dsv41Reference::Mat& Dsv41Reference::expert(int64_t l, int which, int64_t e) const {
    const auto k = std::make_tuple(l, which, e);
    auto it = expert_cache_.find(k);
    if (it != expert_cache_.end()) return it->second;
    static const char* names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    const std::string name = "blk." + std::to_string(l) + "." + names[which] + ".weight";
    const bg::gguf::TensorInfo* t = r_.tensor(name);
    if (!t || t->ne.size() != 3) refuse("missing or non-3-D " + name);
    // Expert-major: expert e is the ne[1] rows starting at row e * ne[1].
    return expert_cache_.emplace(k, load_rows(name, e * t->ne[1], t->ne[1])).first->second;
}

Dsv41Reference::Dsv41Reference(const std::string& path, Dsv41Options opt)
    : opt_(opt), r_(Reader::open(path)) {
    for (const bg::gguf::Shard& s : r_.shards()) {
        const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) refuse("cannot open " + s.path);
        fds_.push_back(fd);
    }
    hp_ = dsv41_read_hparams(r_);
    hp_.n_vocab = r_.tensor("token_embd.weight") ? r_.tensor("token_embd.weight")->ne[1] : 0;
    if (hp_.engram_token_map.size() < static_cast<size_t>(hp_.n_vocab)) refuse("engram token map too short");
    output_ = load("output.weight");
    output_norm_ = load("output_norm.weight");
    layers_.resize(static_cast<size_t>(hp_.n_layer));
    int64_t last_kv = -1, last_key = -1, last_idx = -1;
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
        Layer& y = layers_[static_cast<size_t>(l)];
        auto T = [&](const char* n, bool req = true) {
            return load("blk." + std::to_string(l) + "." + n + ".weight", req);
        };
        y.attn_norm = T("attn_norm");
        y.ffn_norm = T("ffn_norm");
        y.sinks = T("attn_sinks");
        y.q_a = T("attn_q_a");
        y.q_a_norm = T("attn_q_a_norm");
        y.q_b = T("attn_q_b");
        y.kv = T("attn_kv");
        y.kv_norm = T("attn_kv_a_norm");
        y.o_a = T("attn_output_a");
        y.o_b = T("attn_output_b");
        y.hc_attn_fn = T("hc_attn_fn");
        y.hc_attn_base = T("hc_attn_base");
        y.hc_attn_scale = T("hc_attn_scale");
        y.hc_ffn_fn = T("hc_ffn_fn");
        y.hc_ffn_base = T("hc_ffn_base");
        y.hc_ffn_scale = T("hc_ffn_scale");
        y.comp_kv = T("attn_compressor_kv", false);
        y.comp_gate = T("attn_compressor_gate", false);
        y.comp_norm = T("attn_compressor_norm", false);
        y.idx_k = T("indexer.attn_k", false);
        y.idx_k_norm = T("indexer.k_norm", false);
        y.idx_q_b = T("indexer.attn_q_b", false);
        y.idx_proj = T("indexer.proj", false);
        y.gate_inp = T("ffn_gate_inp");
        y.probs_b = load("blk." + std::to_string(l) + ".exp_probs_b.bias");
        y.gate_sh = T("ffn_gate_shexp");
        y.up_sh = T("ffn_up_shexp");
        y.down_sh = T("ffn_down_shexp");
        for (size_t e = 0; e < hp_.engram_layers.size(); ++e)
            if (hp_.engram_layers[e] == l) y.engram = static_cast<int64_t>(e);
        if (y.engram >= 0) {
            y.eng_wkv = T("engram_wkv");
            y.eng_q = T("engram_q");
            y.eng_k = T("engram_k");
        }
        if (!y.comp_kv.empty()) last_kv = l;
        if (!y.idx_k.empty()) last_key = l;
        if (!y.idx_q_b.empty()) last_idx = l;
        const int64_t ratio = hp_.compress_ratio[static_cast<size_t>(l)];
        if (ratio == 0) continue;
        if (last_kv < 0 || last_key < 0 || last_idx < 0) refuse("a compressed layer reads a stream nobody publishes");
        if (ratio != hp_.compress_ratio[static_cast<size_t>(last_kv)]) refuse("ratio differs from its kv source");
        if (ratio > 1 && layers_[static_cast<size_t>(last_kv)].comp_gate.empty()) refuse("pooling without a gate");
        y.kv_src = last_kv;
        y.key_src = last_key;
        y.topk_src = last_idx;
    }
}

Dsv41Reference::~Dsv41Reference() {
    for (int fd : fds_) ::close(fd);
}

namespace {

Mix make_mix(const Vec& H, const Dsv41Reference::Mat& fn, const Dsv41Reference::Mat& base,
             const Dsv41Reference::Mat& scale, const Dsv41Hparams& hp) {
    const Vec flat = rmsnorm(H, nullptr, hp.rms_eps);
    const Vec m = fn.mul(flat);
    const auto& b = base.w;
    const auto& s = scale.w;
    const double eps = hp.hc_eps;
    Mix x;
    for (int i = 0; i < 4; ++i) {
        x.pre[i] = sigmoid(s[0] * m[i] + b[i]) + eps;
        x.post[i] = 2 * sigmoid(s[1] * m[4 + i] + b[4 + i]);
    }
    double c[4][4];
    for (int d = 0; d < 4; ++d)
        for (int r = 0; r < 4; ++r) c[d][r] = s[2] * m[8 + d + 4 * r] + b[8 + d + 4 * r];
    // Softmax over dst for each source, + eps; then each dst normalised over its sources; then
    // (iters - 1) rounds of sources over dst, dst over sources; every divisor sum + eps.
    for (int r = 0; r < 4; ++r) {
        double mx = c[0][r];
        for (int d = 1; d < 4; ++d) mx = std::max(mx, c[d][r]);
        double z = 0;
        for (int d = 0; d < 4; ++d) z += c[d][r] = std::exp(c[d][r] - mx);
        for (int d = 0; d < 4; ++d) c[d][r] = c[d][r] / z + eps;
    }
    auto per_dst = [&] {
        for (int d = 0; d < 4; ++d) {
            double t = eps;
            for (int r = 0; r < 4; ++r) t += c[d][r];
            for (int r = 0; r < 4; ++r) c[d][r] /= t;
        }
    };
    auto per_src = [&] {
        for (int r = 0; r < 4; ++r) {
            double t = eps;
            for (int d = 0; d < 4; ++d) t += c[d][r];
            for (int d = 0; d < 4; ++d) c[d][r] /= t;
        }
    };
    per_dst();
    for (int64_t it = 1; it < hp.sinkhorn_iters; ++it) {
        per_src();
        per_dst();
    }
    for (int d = 0; d < 4; ++d)
        for (int r = 0; r < 4; ++r) x.comb[d][r] = c[d][r];
    return x;
}

Vec collapse(const Vec& H, const double* pre, int64_t n) {
    Vec x(static_cast<size_t>(n), 0.0);
    for (int c = 0; c < 4; ++c)
        for (int64_t i = 0; i < n; ++i) x[i] += pre[c] * H[c * n + i];
    return x;
}

Vec expand(const Vec& y, const Vec& R, const Mix& m, int64_t n) {
    Vec H(static_cast<size_t>(4 * n), 0.0);
    for (int d = 0; d < 4; ++d)
        for (int64_t i = 0; i < n; ++i) {
            double v = m.post[d] * y[i];
            for (int s = 0; s < 4; ++s) v += m.comb[d][s] * R[s * n + i];
            H[d * n + i] = v;
        }
    return H;
}

}  // namespace

std::vector<std::vector<double>> Dsv41Reference::logits(const std::vector<int32_t>& tokens) const {
    const Dsv41Hparams& hp = hp_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    const int64_t n = hp.n_embd, hd = hp.head_dim, nr = hp.rope_dims, nope = hd - nr;
    const int64_t idn = hp.idx_head_dim, idh = hp.idx_n_head;
    for (int32_t t : tokens)
        if (t < 0 || t >= hp.n_vocab) refuse("token id out of range");

    std::vector<Vec> H(static_cast<size_t>(T));
    std::vector<std::array<double, 4>> pre(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
        const Mat e = load_rows("token_embd.weight", tokens[t], 1);
        H[t].resize(static_cast<size_t>(4 * n));
        for (int c = 0; c < 4; ++c)
            for (int64_t i = 0; i < n; ++i) H[t][c * n + i] = e.w[i];
        pre[t] = {1.0, 0.0, 0.0, 0.0};  // layer 0's attention collapses with a one-hot on copy 0
    }

    // Per-layer products later layers read: compressed rows (roped, and latent before rope),
    // index keys, and each index source's per-token query and head weights.
    std::vector<std::vector<Vec>> comp_rows(layers_.size()), comp_latent(layers_.size()), idx_keys(layers_.size());
    std::vector<std::vector<Vec>> idx_q(layers_.size()), idx_w(layers_.size());

    for (int64_t l = 0; l < hp.n_layer; ++l) {
        const Layer& y = layers_[static_cast<size_t>(l)];
        const int64_t ratio = hp.compress_ratio[static_cast<size_t>(l)];
        // Ratio-0 layers: rope.freq_base, never scaled; all others compress_rope_freq_base with
        // the file's scaling (llama.cpp build_attention_impl: freq_scale_l = use_compress_rope ? ...).
        const bool scaled = ratio != 0;
        const double base = scaled ? hp.compress_rope_base : hp.rope_base;

        if (y.engram >= 0) {
            const int64_t N = hp.engram_max_ngram, heads = hp.engram_heads, cols = (N - 1) * heads;
            const uint64_t* mult = hp.engram_mult.data() + y.engram * N;
            const uint64_t* prime = hp.engram_primes.data() + y.engram * cols;
            const uint64_t* offs = hp.engram_offsets.data() + y.engram * cols;
            auto map_of = [&](int64_t tok) -> uint64_t {
                if (tok < 0 || static_cast<size_t>(tok) >= hp.engram_token_map.size()) return hp.engram_pad;
                return hp.engram_token_map[static_cast<size_t>(tok)];
            };
            for (int64_t t = 0; t < T; ++t) {
                // Look-back before the sequence start reads as pad; unsigned products wrap mod 2^64.
                std::vector<uint64_t> c(static_cast<size_t>(N));
                for (int64_t s = 0; s < N; ++s) c[s] = t - s >= 0 ? map_of(tokens[t - s]) : hp.engram_pad;
                uint64_t h = c[0] * mult[0];
                Vec emb;  // bucket-major: bucket b = (order - 2) * heads + head
                for (int64_t s = 1; s < N; ++s) {
                    h ^= c[s] * mult[s];
                    for (int64_t j = 0; j < heads; ++j) {
                        const int64_t b = (s - 1) * heads + j;
                        const std::vector<double> row = engram_row(l, static_cast<int64_t>(h % prime[b] + offs[b]));
                        emb.insert(emb.end(), row.begin(), row.end());
                    }
                }
                const Vec kv = y.eng_wkv.mul(emb);  // 4 keys (one per copy), then one shared value
                for (int c2 = 0; c2 < 4; ++c2) {
                    const double sk = rms_inv(kv, c2 * n, n, hp.rms_eps);
                    const double sh = rms_inv(H[t], c2 * n, n, hp.rms_eps);
                    double s = 0;
                    for (int64_t i = 0; i < n; ++i)
                        s += kv[c2 * n + i] * sk * y.eng_k.w[c2 * n + i] * H[t][c2 * n + i] * sh * y.eng_q.w[c2 * n + i];
                    s /= std::sqrt(static_cast<double>(n));
                    const double sgn = s > 0 ? 1.0 : (s < 0 ? -1.0 : 0.0);  // ggml_sgn(0) = 0
                    const double g = sigmoid(sgn * std::sqrt(std::max(std::fabs(s), 1e-6)));
                    for (int64_t i = 0; i < n; ++i) H[t][c2 * n + i] += g * kv[4 * n + i];
                }
            }
        }

        // ---- attention sub-layer
        std::vector<Mix> mixA(static_cast<size_t>(T));
        std::vector<Vec> xa(static_cast<size_t>(T)), qr(static_cast<size_t>(T)), q(static_cast<size_t>(T)),
            kvr(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) {
            mixA[t] = make_mix(H[t], y.hc_attn_fn, y.hc_attn_base, y.hc_attn_scale, hp);
            xa[t] = rmsnorm(collapse(H[t], pre[t].data(), n), &y.attn_norm.w, hp.rms_eps);
            // V4.1 has no per-head norm after W_qb (DSV41.md), unlike V4's graph in llama.cpp.
            qr[t] = rmsnorm(y.q_a.mul(xa[t]), &y.q_a_norm.w, hp.rms_eps);
            q[t] = y.q_b.mul(qr[t]);
            for (int64_t h = 0; h < hp.n_head; ++h) rope_inplace(q[t], h * hd + nope, nr, hp, base, scaled, t, false);
            kvr[t] = rmsnorm(y.kv.mul(xa[t]), &y.kv_norm.w, hp.rms_eps);
            rope_inplace(kvr[t], nope, nr, hp, base, scaled, t, false);
        }
        if (!y.comp_kv.empty()) {
            // Blocks of `ratio` tokens, complete ones only; per channel a softmax of the gate
            // scores over the block's tokens weights the kv (ratio 1: weight 1).
            const int64_t nb = T / ratio;
            for (int64_t b = 0; b < nb; ++b) {
                Vec pooled(static_cast<size_t>(hd), 0.0);
                std::vector<Vec> kvs, sc;
                for (int64_t j = 0; j < ratio; ++j) {
                    kvs.push_back(y.comp_kv.mul(xa[b * ratio + j]));
                    if (!y.comp_gate.empty()) sc.push_back(y.comp_gate.mul(xa[b * ratio + j]));
                }
                for (int64_t i = 0; i < hd; ++i) {
                    if (sc.empty()) {
                        for (int64_t j = 0; j < ratio; ++j) pooled[i] += kvs[j][i];
                        continue;
                    }
                    double mx = -INFINITY;
                    for (int64_t j = 0; j < ratio; ++j) mx = std::max(mx, sc[j][i]);
                    double z = 0;
                    for (int64_t j = 0; j < ratio; ++j) z += std::exp(sc[j][i] - mx);
                    for (int64_t j = 0; j < ratio; ++j) pooled[i] += std::exp(sc[j][i] - mx) / z * kvs[j][i];
                }
                Vec lat = rmsnorm(pooled, &y.comp_norm.w, hp.rms_eps);
                comp_latent[l].push_back(lat);
                rope_inplace(lat, nope, nr, hp, hp.compress_rope_base, true, b * ratio, false);
                comp_rows[l].push_back(lat);
            }
        }
        if (!y.idx_k.empty()) {
            // Index keys from the latent (before rope) of the stream this key owner reads.
            int64_t src = -1;
            for (int64_t j = l; j >= 0 && src < 0; --j)
                if (!layers_[static_cast<size_t>(j)].comp_kv.empty()) src = j;
            if (src < 0) refuse("key owner without a kv source");
            const int64_t rsrc = hp.compress_ratio[static_cast<size_t>(src)];
            for (size_t b = 0; b < comp_latent[src].size(); ++b) {
                Vec k = rmsnorm(y.idx_k.mul(comp_latent[src][b]), &y.idx_k_norm.w, hp.rms_eps);
                rope_inplace(k, idn - nr, nr, hp, hp.compress_rope_base, true, static_cast<int64_t>(b) * rsrc, false);
                idx_keys[l].push_back(k);
            }
        }
        if (!y.idx_q_b.empty()) {
            for (int64_t t = 0; t < T; ++t) {
                Vec iq = y.idx_q_b.mul(qr[t]);
                for (int64_t h = 0; h < idh; ++h) rope_inplace(iq, h * idn + idn - nr, nr, hp, hp.compress_rope_base, true, t, false);
                Vec w = y.idx_proj.mul(xa[t]);
                for (auto& v : w) v /= std::sqrt(static_cast<double>(idn * idh));
                idx_q[l].push_back(iq);
                idx_w[l].push_back(w);
            }
        }

        std::vector<Vec> attn_out(static_cast<size_t>(T));
        const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
        for (int64_t p = 0; p < T; ++p) {
            std::vector<const Vec*> rows;
            for (int64_t j = std::max<int64_t>(0, p - hp.window + 1); j <= p; ++j) rows.push_back(&kvr[j]);
            if (ratio > 0) {
                // The index source's query and head weights at p score compressed rows; which keys
                // and how many rows depend on IndexSelection (see the header).
                const bool from_source = opt_.selection == IndexSelection::kSourceSelection;
                const int64_t isrc = y.topk_src;
                const int64_t ratio_sel = from_source ? hp.compress_ratio[static_cast<size_t>(isrc)] : ratio;
                const int64_t owner = from_source ? layers_[static_cast<size_t>(isrc)].key_src : y.key_src;
                const int64_t nvis = (p + 1) / ratio_sel;
                const auto& keys = idx_keys[owner];
                const auto& iq = idx_q[y.topk_src][p];
                const auto& iw = idx_w[y.topk_src][p];
                Vec score(static_cast<size_t>(nvis));
                for (int64_t b = 0; b < nvis; ++b) {
                    double s = 0;
                    for (int64_t h = 0; h < idh; ++h) {
                        double d = 0;
                        for (int64_t i = 0; i < idn; ++i) d += iq[h * idn + i] * keys[b][i];
                        s += iw[h] * std::max(d, 0.0);
                    }
                    score[b] = s;
                }
                for (int32_t b : top_k(score, std::min(nvis, hp.idx_top_k))) {
                    // A source at a finer ratio than this layer could name a block this query
                    // cannot see yet; no layout llama.cpp loads does that, so refuse, not guess.
                    if (b >= (p + 1) / ratio) refuse("selection names an invisible compressed row");
                    rows.push_back(&comp_rows[y.kv_src][b]);
                }
            }
            Vec o(static_cast<size_t>(hp.n_head * hd), 0.0);
            for (int64_t h = 0; h < hp.n_head; ++h) {
                const double sink = y.sinks.w[h];
                Vec lg(rows.size());
                double mx = sink;
                for (size_t j = 0; j < rows.size(); ++j) {
                    double s = 0;
                    for (int64_t i = 0; i < hd; ++i) s += q[p][h * hd + i] * (*rows[j])[i];
                    lg[j] = s * scale;
                    mx = std::max(mx, lg[j]);
                }
                double z = std::exp(sink - mx);  // the sink only in the denominator
                for (double v : lg) z += std::exp(v - mx);
                for (size_t j = 0; j < rows.size(); ++j) {
                    const double w = std::exp(lg[j] - mx) / z;
                    for (int64_t i = 0; i < hd; ++i) o[h * hd + i] += w * (*rows[j])[i];
                }
                rope_inplace(o, h * hd + nope, nr, hp, base, scaled, p, true);
            }
            // Grouped output projection: group g takes its slice of the heads and rows
            // [g*rank, (g+1)*rank) of W_oa; the groups' outputs concatenate into W_ob's input.
            const int64_t gdim = hp.n_head * hd / hp.o_groups, rank = hp.o_lora_rank;
            Vec oa(static_cast<size_t>(hp.o_groups * rank));
            for (int64_t g = 0; g < hp.o_groups; ++g)
                for (int64_t r = 0; r < rank; ++r) {
                    double s = 0;
                    const float* row = y.o_a.w.data() + (g * rank + r) * gdim;
                    for (int64_t i = 0; i < gdim; ++i) s += static_cast<double>(row[i]) * o[g * gdim + i];
                    oa[g * rank + r] = s;
                }
            attn_out[p] = y.o_b.mul(oa);
        }

        // ---- FFN sub-layer
        for (int64_t t = 0; t < T; ++t) {
            H[t] = expand(attn_out[t], H[t], mixA[t], n);
            const Mix mixF = make_mix(H[t], y.hc_ffn_fn, y.hc_ffn_base, y.hc_ffn_scale, hp);
            const Vec x = rmsnorm(collapse(H[t], mixA[t].pre, n), &y.ffn_norm.w, hp.rms_eps);
            const Vec bias(y.probs_b.w.begin(), y.probs_b.w.end());
            const Dsv41Route route = dsv41_route(y.gate_inp.mul(x), bias, hp.n_expert_used, hp.weights_norm,
                                                 hp.weights_scale);
            Vec out(static_cast<size_t>(n), 0.0);
            auto ffn = [&](const Mat& G, const Mat& U, const Mat& D, double limit, double weight) {
                const Vec g = G.mul(x), u = U.mul(x);
                Vec a(g.size());
                for (size_t i = 0; i < g.size(); ++i) a[i] = dsv41_swiglu(g[i], u[i], limit, opt_.swiglu);
                const Vec d = D.mul(a);
                for (int64_t i = 0; i < n; ++i) out[i] += weight * d[i];
            };
            for (size_t k = 0; k < route.ids.size(); ++k)
                ffn(expert(l, 0, route.ids[k]), expert(l, 1, route.ids[k]), expert(l, 2, route.ids[k]),
                    hp.clamp_exp[static_cast<size_t>(l)], route.weights[k]);
            ffn(y.gate_sh, y.up_sh, y.down_sh, hp.clamp_shexp[static_cast<size_t>(l)], 1.0);
            H[t] = expand(out, H[t], mixF, n);
            for (int c = 0; c < 4; ++c) pre[t][c] = mixF.pre[c];  // the next sub-layer collapses with it
        }
    }

    // The last FFN mix, unused by any layer, collapses the copies for the head.
    std::vector<std::vector<double>> result(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
        result[t] = output_.mul(rmsnorm(collapse(H[t], pre[t].data(), n), &output_norm_.w, hp.rms_eps));
    return result;
}

std::vector<int32_t> Dsv41Reference::greedy(const std::vector<int32_t>& prompt, int64_t n_gen) const {
    std::vector<int32_t> seq = prompt, out;
    for (int64_t i = 0; i < n_gen; ++i) {
        const Vec last = logits(seq).back();
        const int32_t best = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
        out.push_back(best);
        seq.push_back(best);
    }
    return out;
}

}  // namespace ref
