#include "runtime/runner.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "util/check.h"
#include "util/rng.h"

namespace bg {

std::vector<int32_t> random_prompt(int64_t n, uint64_t seed, int64_t n_vocab, int32_t bos) {
    if (n < 1) fail("prompt: --prompt-tokens must be >= 1");
    std::vector<int32_t> p(static_cast<size_t>(n));
    Rng rng(mix_seed(seed, 0x9407));
    p[0] = bos;
    for (int64_t i = 1; i < n; ++i) p[i] = static_cast<int32_t>(3 + rng.below(static_cast<uint64_t>(n_vocab - 3)));
    return p;
}

std::vector<int32_t> read_prompt_file(const std::string& path, int64_t n_vocab) {
    std::ifstream f(path);
    if (!f) fail("prompt: cannot open '%s'", path.c_str());
    std::vector<int32_t> p;
    std::string word;
    while (f >> word) {
        char* end = nullptr;
        const long long v = std::strtoll(word.c_str(), &end, 10);
        if (!end || *end || v < 0 || v >= n_vocab)
            fail("prompt: '%s' in '%s' is not a token id in [0, %lld)", word.c_str(), path.c_str(), (long long)n_vocab);
        p.push_back(static_cast<int32_t>(v));
    }
    if (p.empty()) fail("prompt: '%s' holds no token ids", path.c_str());
    return p;
}

Runner::Runner(const MoeModel& m, LayerForward& fwd) : m_(m), fwd_(fwd) {}

void Runner::prefill(const std::vector<int32_t>& prompt, PrefillOrder order, int64_t ubatch,
                     std::vector<float>* last_logits, std::vector<float>* all_logits) {
    const int64_t n = static_cast<int64_t>(prompt.size()), L = m_.moe_shape().n_layer, V = m_.moe_shape().n_vocab;
    if (ubatch < 1 || ubatch > fwd_.max_ubatch())
        fail("--ubatch %lld is outside [1, %lld]", (long long)ubatch, (long long)fwd_.max_ubatch());
    if (n > fwd_.n_ctx()) fail("prompt of %lld tokens exceeds the context of %lld", (long long)n, (long long)fwd_.n_ctx());
    fwd_.reset();
    const int64_t n_units = (n + ubatch - 1) / ubatch;
    if (static_cast<int64_t>(units_.size()) < n_units) units_.resize(static_cast<size_t>(n_units));
    if (all_logits) all_logits->assign(static_cast<size_t>(n * V), 0.0f);
    auto unit_logits = [&](const Ubatch& u) {
        if (!all_logits) return;
        for (int64_t i = 0; i < u.n; ++i) fwd_.logits(u, i, &(*all_logits)[(u.pos0 + i) * V]);
    };
    auto embed = [&](int64_t ui) {
        const int64_t p0 = ui * ubatch, cnt = std::min(ubatch, n - p0);
        fwd_.embed(units_[ui], &prompt[p0], cnt, p0);
    };
    if (order == PrefillOrder::kTokenMajor) {
        for (int64_t ui = 0; ui < n_units; ++ui) {
            embed(ui);
            fwd_.plan_reads(&prompt[units_[ui].pos0], units_[ui].pos0, units_[ui].n);
            for (int64_t l = 0; l < L; ++l) fwd_.layer(l, units_[ui]);
            unit_logits(units_[ui]);
        }
    } else {
        // Every unit passes the attention half of layer l, then one MoE half for all of them:
        // each routed expert is brought in once per layer per pass. Consecutive units share the
        // attention half's launches (up to the forward's max_launch() positions), so each dense
        // matrix is read once per launch rather than once per unit.
        unit_ptrs_.clear();
        for (int64_t ui = 0; ui < n_units; ++ui) {
            embed(ui);
            unit_ptrs_.push_back(&units_[ui]);
        }
        fwd_.plan_reads(&prompt[0], 0, n);
        for (int64_t l = 0; l < L; ++l) {
            fwd_.prepare_moe(l, n);
            for (int64_t ui = 0; ui < n_units;) {
                const int64_t nu = units_in_launch(unit_ptrs_.data() + ui, n_units - ui, fwd_.max_launch());
                fwd_.attention_half(l, unit_ptrs_.data() + ui, nu);
                ui += nu;
            }
            fwd_.moe_half(l, unit_ptrs_.data(), n_units);
        }
        for (int64_t ui = 0; ui < n_units; ++ui) unit_logits(units_[ui]);
    }
    if (last_logits) {
        last_logits->resize(static_cast<size_t>(V));
        const Ubatch& u = units_[n_units - 1];
        fwd_.logits(u, u.n - 1, last_logits->data());
    }
    fwd_.finish();
    n_past_ = n;
}

std::vector<int32_t> Runner::decode(std::vector<float>& logits, int64_t n_gen, Sampler* sampler,
                                    const std::function<void(int32_t)>& on_token, const DecodeStop& stop) {
    const int64_t L = m_.moe_shape().n_layer, V = m_.moe_shape().n_vocab;
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(std::max<int64_t>(n_gen, 0)));
    if (units_.empty()) units_.resize(1);
    Ubatch& u = units_[0];
    // Greedy steps take their token where the logits are (LayerForward::greedy_token), the
    // banned ids passed along; a sampler that draws, or more banned ids than a ban holds, takes
    // the logits to the host.
    TokenBan ban;
    bool ban_fits = true;
    if (stop.ignore_eos && stop.eog)
        for (int32_t id : stop.eog->ids) {
            if (id < 0 || id >= V) continue;
            if (ban.n == TokenBan::kMax) {
                ban_fits = false;
                break;
            }
            ban.ids[ban.n++] = id;
        }
    const bool greedy_on_device = (!sampler || sampler->greedy()) && ban_fits;
    bool have_logits = true;  // logits hold the step's (the prompt's last, or a host step's)
    int32_t next = -1;        // else the token the device chose
    for (int64_t g = 0; g < n_gen; ++g) {
        int32_t t = next;
        if (have_logits) {
            if (stop.ignore_eos && stop.eog)
                for (int32_t id : stop.eog->ids)
                    if (id >= 0 && id < V) logits[id] = -INFINITY;
            t = sampler ? sampler->sample(logits.data(), V) : argmax(logits.data(), V);
        }
        out.push_back(t);
        const bool last = g + 1 == n_gen || stop.stopped_at(out);
        // The next step's Engram rows follow from its token alone: their reads start before the
        // host shows the token or embeds it (the slice's first layer is an Engram layer and waits
        // for them whole: the disk's latency for 24 random reads; submitted after the embedding,
        // they started at least 40 us after the token's download in c9ed0e0's H100 trace).
        if (!last && n_past_ < fwd_.n_ctx()) fwd_.plan_reads(&t, n_past_, 1);
        if (on_token) on_token(t);
        if (last) break;
        if (n_past_ >= fwd_.n_ctx()) fail("decode: context of %lld tokens is full", (long long)fwd_.n_ctx());
        fwd_.embed(u, &t, 1, n_past_);
        for (int64_t l = 0; l < L; ++l) fwd_.layer(l, u);
        if (greedy_on_device) {
            next = fwd_.greedy_token(u, 0, ban);
            have_logits = false;
        } else {
            fwd_.logits(u, 0, logits.data());
        }
        ++n_past_;
    }
    fwd_.finish();
    return out;
}

}  // namespace bg
