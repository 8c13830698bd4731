#include "cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/host_word.h"
#include "backend/pool_channel.h"
#include "cpu/bf16_expert.h"
#include "cpu/expert_job.h"
#include "cpu/argmax.h"
#include "cpu/int8_expert.h"
#include "cpu/int8_matmul.h"
#include "cpu/ops.h"
#include "cpu/routing.h"
#include "cpu/spin_wait.h"
#include "tensor/fp8_rows.h"
#include "util/check.h"

namespace bg::cpu {

namespace {

constexpr int kHc = 4;

// A scratch vector sized by reserve(): a call that needs more is a forward that broke its limits.
template <typename T>
T* fits(std::vector<T>& v, int64_t n) {
    BG_CHECK(n <= static_cast<int64_t>(v.size()));
    return v.data();
}

class CpuOps final : public Ops {
public:
    explicit CpuOps(ThreadPool& pool) : pool_(pool) {}
    ~CpuOps() override {
        for (void* p : allocations_) std::free(p);
    }

    const char* name() const override { return "cpu"; }
    bool memory_is_host() const override { return true; }
    const void* host_view(const void* host) const override { return host; }
    void* alloc(uint64_t bytes) override {
        void* p = std::calloc(1, std::max<uint64_t>(1, bytes));
        if (!p) fail("cpu ops: cannot allocate %llu bytes", (unsigned long long)bytes);
        allocations_.push_back(p);
        return p;
    }
    void* alloc_host(uint64_t bytes) override {
        void* p = std::calloc(1, std::max<uint64_t>(1, bytes));
        if (!p) fail("cpu ops: cannot allocate %llu bytes", (unsigned long long)bytes);
        return p;
    }
    void free_host(void* p) override { std::free(p); }
    uint64_t own_bytes() const override { return 0; }
    uint64_t own_host_bytes() const override { return reserved_ ? ops_host_bytes(lim_) : 0; }
    void reserve(const OpsLimits& lim) override {
        BG_CHECK(!reserved_);
        reserved_ = true;
        lim_ = lim;
        rows_.resize(static_cast<size_t>(lim.max_tok * lim.max_att_rows));
        n_rows_.resize(static_cast<size_t>(lim.max_tok));
        att_scratch_.resize(static_cast<size_t>(lim.max_tok * lim.n_head * lim.max_att_rows));
        route_scratch_.resize(static_cast<size_t>(2 * lim.n_expert));
        route_order_.resize(static_cast<size_t>(lim.n_expert));
        for (auto* v : {&xg_, &eo_}) v->resize(static_cast<size_t>(expert_work_floats_x(lim)));
        gu_.resize(static_cast<size_t>(2 * expert_work_floats_ff(lim)));
        h_.resize(static_cast<size_t>(expert_work_floats_ff(lim)));
        int8_.xq.resize(static_cast<size_t>(int8_scratch_values(lim)));
        int8_.xd.resize(static_cast<size_t>(int8_scratch_values(lim) / 32));
        int8_.xs.resize(static_cast<size_t>(int8_scratch_values(lim) / 16));
    }

    void upload(void* dst, const void* src, uint64_t bytes) override { std::memmove(dst, src, bytes); }
    void download(void* dst, const void* src, uint64_t bytes) override { std::memmove(dst, src, bytes); }
    void copy(void* dst, const void* src, uint64_t bytes) override { std::memmove(dst, src, bytes); }
    void copy_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t width, int64_t rows) override {
        for (int64_t r = 0; r < rows; ++r) std::memmove(dst + r * ld_dst, src + r * ld_src, width * sizeof(float));
    }
    void zero(void* x, uint64_t bytes) override { std::memset(x, 0, bytes); }

    void sync() override {}
    void expect_work(int64_t us) override { pool_.stay_awake(us); }
    void record_fence(int) override {}
    bool fence_passed(int, bool) override { return true; }
    void wait_host_word(const uint32_t* word_host, uint32_t value) override {
        for (int i = 1; !host_word_reached(load_host_word(word_host), value); ++i) {
            BG_CPU_RELAX();
            if (i % 1024 == 0) std::this_thread::yield();
        }
    }
    void busy_begin(BusyKind) override {}
    void busy_end() override {}

    void matmul(const MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy) override {
        if (lim_.matmul.int8_takes(W.type, W.cols)) {
            BG_CHECK_MSG(n_tok * W.cols <= static_cast<int64_t>(int8_.xq.size()),
                         "cpu ops: an integer-path matmul larger than reserve() was told of");
            cpu::matmul_int8(pool_, int8_, W, x, ldx, n_tok, y, ldy, isa_);
            return;
        }
        cpu::matmul(pool_, W, x, ldx, n_tok, y, ldy, isa_);
    }
    void dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) override { dequantize_row(t, src, dst, n); }
    void dequantize_fp8_rows(const uint8_t* src, float* dst, int64_t rows, int64_t dim) override {
        fp8::dequantize_packed_rows(src, dst, rows, dim);
    }
    void embed_rows(const float* rows, const int32_t* row_ids, int64_t n_tok, int64_t width, float* H) override {
        for (int64_t t = 0; t < n_tok; ++t)
            for (int c = 0; c < kHc; ++c)
                std::memcpy(H + (t * kHc + c) * width, rows + row_ids[t] * width, width * sizeof(float));
    }
    void fill_positions(int32_t* pos, int64_t n, int64_t start, int64_t step) override {
        for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(start + i * step);
    }
    void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y) override {
        for (int64_t r = 0; r < n_rows; ++r) cpu::rmsnorm(x + r * n, w, n, eps, y + r * n);
    }
    void rope(float* x, int64_t row_stride, int64_t n_tok, const int32_t* pos, int64_t n_heads, int64_t head_dim,
              const RopeParams& p, bool inverse) override {
        for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t h = 0; h < n_heads; ++h) cpu::rope(x + t * row_stride + h * head_dim + head_dim - p.n_dims, pos[t], p, inverse);
    }
    void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form, float* out) override {
        cpu::swiglu(gate, up, n, limit, form, out);
    }
    void scale(float* x, int64_t n, float s) override {
        for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }
    void hc_mix(const float* m, const float* base, const float* scale, int64_t n_tok, int n_iter, float eps,
                float* mix) override {
        for (int64_t t = 0; t < n_tok; ++t) {
            const HcMix mx = cpu::hc_mix(m + t * 24, base, scale, n_iter, eps);
            std::memcpy(mix + t * kMixWidth, &mx, sizeof(mx));
        }
    }
    void hc_collapse(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok, int64_t E, float* x) override {
        for (int64_t t = 0; t < n_tok; ++t) {
            const float* p = pre + t * pre_stride;
            const float* h = H + t * kHc * E;
            for (int64_t e = 0; e < E; ++e) {
                float s = 0.0f;
                for (int c = 0; c < kHc; ++c) s += p[c] * h[c * E + e];
                x[t * E + e] = s;
            }
        }
    }
    void hc_expand(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t E, float* H) override {
        for (int64_t t = 0; t < n_tok; ++t) {
            const float* mx = mix + t * kMixWidth;
            const float* r = R + t * kHc * E;
            float* h = H + t * kHc * E;
            for (int64_t e = 0; e < E; ++e) {
                // Each element reads its 4 residual values before writing, so H may alias R.
                float rv[kHc];
                for (int c = 0; c < kHc; ++c) rv[c] = r[c * E + e];
                for (int d = 0; d < kHc; ++d) {
                    float s = mx[kMixPost + d] * y[t * E + e];
                    for (int c = 0; c < kHc; ++c) s += mx[kMixComb + kHc * d + c] * rv[c];
                    h[d * E + e] = s;
                }
            }
        }
    }
    void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n_tok, int64_t E, float eps,
                         float* H) override {
        for (int64_t t = 0; t < n_tok; ++t) {
            const float* k = kv + t * (kHc + 1) * E;
            const float* v = k + kHc * E;
            float* h = H + t * kHc * E;
            for (int c = 0; c < kHc; ++c) {
                const float g = engram_gate(k + c * E, h + c * E, wk + c * E, wq + c * E, E, eps);
                for (int64_t e = 0; e < E; ++e) h[c * E + e] += g * v[e];
            }
        }
    }
    void compress_pool(const float* kv, const float* score, int64_t d, int64_t r, int64_t b0, int64_t n_blocks,
                       float* out) override {
        for (int64_t j = 0; j < n_blocks; ++j)
            for (int64_t c = 0; c < d; ++c) out[j * d + c] = pool_channel(kv, score, d, r, (b0 + j) * r, c);
    }
    void attention(const AttentionArgs& a) override {
        const int64_t max_rows = a.window + a.top_k;
        BG_CHECK(max_rows <= lim_.max_att_rows && a.n_head <= lim_.n_head);
        const float** rows = fits(rows_, a.n_tok * max_rows);
        int64_t* n_rows = fits(n_rows_, a.n_tok);
        float* scratch = fits(att_scratch_, a.n_tok * a.n_head * max_rows);
        for (int64_t i = 0; i < a.n_tok; ++i) {
            const int64_t p = a.pos[i];
            const float** r = rows + i * max_rows;
            int64_t nr = 0;
            for (int64_t j = std::max<int64_t>(0, p - a.window + 1); j <= p; ++j) r[nr++] = a.kv + j * a.d;
            if (a.comp) {
                const int32_t* sel = a.sel + p * a.top_k;
                for (int32_t s = 0; s < a.sel_n[p]; ++s) r[nr++] = a.comp + sel[s] * a.d;
            }
            n_rows[i] = nr;
        }
        pool_.parallel_for(a.n_tok * a.n_head, [&](int64_t b, int64_t e) {
            for (int64_t it = b; it < e; ++it) {
                const int64_t i = it / a.n_head, h = it % a.n_head;
                attention_head(a.q + i * a.ldq + h * a.d, rows + i * max_rows, n_rows[i], a.d, a.scale, a.sinks[h],
                               scratch + it * max_rows, a.out + i * a.ldo + h * a.d);
            }
        });
    }
    void indexer(const IndexerArgs& a) override {
        const int64_t ih = a.n_head, id = a.head_dim;
        pool_.parallel_for(a.n_tok, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                const int64_t p = a.pos[i];
                const float* q = a.q + i * ih * id;
                const int64_t visible = (p + 1) / a.ratio;
                float* score = a.scores + i * a.ld_scores;
                for (int64_t b = 0; b < visible; ++b) {
                    float s = 0.0f;
                    for (int64_t h = 0; h < ih; ++h) {
                        float d = 0.0f;
                        for (int64_t c = 0; c < id; ++c) d += q[h * id + c] * a.keys[b * id + c];
                        s += a.w[i * ih + h] * std::max(d, 0.0f);
                    }
                    score[b] = s;
                }
                const int64_t k = std::min(visible, a.top_k);
                if (k > 0) top_k(score, visible, k, a.sel + p * a.top_k);
                a.sel_n[p] = static_cast<int32_t>(k);
            }
        });
    }
    void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident, const uint8_t* hot,
               int64_t n_tok, int64_t ne, int k, RouteWeighting wt, int32_t* ids, float* weights) override {
        float* scratch = fits(route_scratch_, 2 * ne);
        int32_t* order = fits(route_order_, ne);
        for (int64_t t = 0; t < n_tok; ++t)
            bg::route(policy, logits + t * ne, bias, resident, hot, ne, k, wt, ids + t * k, weights + t * k, scratch, order);
    }
    void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert,
                         int32_t* counts, int32_t* gather, int32_t* scatter, int32_t* host_copy) override {
        bg::group_by_expert(ids, n_slots, k, pos0, n_expert, counts, gather, scatter);
        if (!host_copy) return;
        std::memcpy(host_copy, counts, static_cast<size_t>(n_expert + 1) * sizeof(int32_t));
        std::memcpy(host_copy + n_expert + 1, gather, static_cast<size_t>(n_slots) * sizeof(int32_t));
        std::memcpy(host_copy + n_expert + 1 + n_slots, scatter, static_cast<size_t>(n_slots) * sizeof(int32_t));
    }
    void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width, float* out) override {
        for (int64_t j = 0; j < m; ++j) std::memcpy(out + j * width, x + rows[j] * ldx, width * sizeof(float));
    }
    void moe_scatter_join(const float* src, const int32_t* rows, int64_t m, int64_t add0, int64_t n_add, int64_t width,
                          float* dst) override {
        for (int64_t j = 0; j < m; ++j) {
            if (j < add0 || j >= add0 + n_add) {
                std::memcpy(dst + rows[j] * width, src + j * width, width * sizeof(float));
                continue;
            }
            for (int64_t c = 0; c < width; ++c) dst[rows[j] * width + c] += src[j * width + c];
        }
    }
    void expert_ffn(const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows, int64_t m, float limit,
                    SwigluClamp form, float* out, const int32_t* out_rows) override {
        // F may be part of the expert's hidden rows (ExpertMats::hidden_rows), never more.
        const int64_t E = e.gate.cols, F = e.gate.rows;
        BG_CHECK(E == lim_.n_embd && F > 0 && F <= lim_.n_ff && e.down.rows == E && e.down.cols == F);
        float* gu = fits(gu_, 2 * m * F);
        if (lim_.matmul.int8_expert(e.gate.type, e.up.type, e.down.type, E, F)) {
            // The integer path: the whole expert as one job of the pool (cpu/int8_expert.h), the
            // same y as matmul, swiglu, matmul.
            float* xg = fits(xg_, m * E);
            float* eo = fits(eo_, m * E);
            BG_CHECK_MSG(m * std::max(E, F) <= static_cast<int64_t>(int8_.xq.size()),
                         "cpu ops: an integer-path expert larger than reserve() was told of");
            moe_gather(x, ldx, rows, m, E, xg);
            cpu::expert_ffn_int8(pool_, int8_, {e.gate, e.up, e.down, m}, xg, E, limit, form, gu, fits(h_, m * F), eo,
                                 isa_);
            moe_scatter(eo, out_rows, m, E, out);
            return;
        }
        MatView gate_up;
        if (gate_up_together(e, &gate_up)) {
            // Gate and up lie back to back (an expert's slot): one matmul over their 2F rows, so
            // the activations are quantised once and the threads woken once for both; each row's
            // arithmetic is the same as in two calls. Token t's gate then up are row t of gu.
            float* xg = fits(xg_, m * E);
            float* h = fits(h_, m * F);
            float* eo = fits(eo_, m * E);
            moe_gather(x, ldx, rows, m, E, xg);
            if (e.gate.type == GgmlType::BF16 && e.down.type == GgmlType::BF16) {
                // BF16 weights (no integer path): one job too (cpu/bf16_expert.h), the same y.
                cpu::expert_ffn_bf16(pool_, gate_up, e.down, xg, E, m, limit, form, gu, h, eo, isa_);
                moe_scatter(eo, out_rows, m, E, out);
                return;
            }
            matmul(gate_up, xg, E, m, gu, 2 * F);
            for (int64_t t = 0; t < m; ++t) cpu::swiglu(gu + t * 2 * F, gu + t * 2 * F + F, F, limit, form, h + t * F);
            matmul(e.down, h, F, m, eo, E);
            moe_scatter(eo, out_rows, m, E, out);
            return;
        }
        const ExpertScratch s{fits(xg_, m * E), gu, gu + m * F, fits(h_, m * F), fits(eo_, m * E)};
        expert_ffn_by_ops(*this, e, x, ldx, rows, m, limit, form, out, out_rows, s);
    }
    // The integer path's experts of the batch go together, as one job of the pool per run of
    // them that fits the scratch (reserve()'s expert_batch_tok): a decode layer's CPU experts
    // start the team, meet at its barriers and run out of rows once, not once each. Each expert's
    // y is the same bit for bit as alone (cpu/int8_expert.h). Others alone.
    void expert_ffn_batch(const ExpertCall* calls, int64_t n, const float* x, int64_t ldx, float limit,
                          SwigluClamp form, float* out) override {
        const int64_t room = expert_work_tok(lim_);
        const ExpertCall* run[cpu::kMaxJobExperts];
        cpu::Int8Expert experts[cpu::kMaxJobExperts];
        int64_t n_run = 0, run_tok = 0;
        const auto flush = [&] {
            if (n_run == 0) return;
            const int64_t E = lim_.n_embd, F = lim_.n_ff;
            float* xg = fits(xg_, run_tok * E);
            float* eo = fits(eo_, run_tok * E);
            BG_CHECK_MSG(run_tok * std::max(E, F) <= static_cast<int64_t>(int8_.xq.size()),
                         "cpu ops: an integer-path expert batch larger than reserve() was told of");
            for (int64_t i = 0, t = 0; i < n_run; t += run[i++]->m) moe_gather(x, ldx, run[i]->rows, run[i]->m, E, xg + t * E);
            // Each expert's F is at most n_ff: its gu and h fit the scratch of run_tok full ones.
            cpu::experts_ffn_int8(pool_, int8_, experts, n_run, xg, E, limit, form, fits(gu_, 2 * run_tok * F),
                                  fits(h_, run_tok * F), eo, isa_);
            for (int64_t i = 0, t = 0; i < n_run; t += run[i++]->m) moe_scatter(eo + t * E, run[i]->out_rows, run[i]->m, E, out);
            n_run = run_tok = 0;
        };
        for (int64_t i = 0; i < n; ++i) {
            const ExpertCall& c = calls[i];
            const ExpertMats& e = c.mats;
            const int64_t E = e.gate.cols, F = e.gate.rows;
            const bool together = E == lim_.n_embd && F > 0 && F <= lim_.n_ff && c.m <= room &&
                                  lim_.matmul.int8_expert(e.gate.type, e.up.type, e.down.type, E, F);
            if (!together) {
                expert_ffn(e, x, ldx, c.rows, c.m, limit, form, out, c.out_rows);
                continue;
            }
            if (n_run == cpu::kMaxJobExperts || run_tok + c.m > room) flush();
            run[n_run] = &c;
            experts[n_run++] = {e.gate, e.up, e.down, c.m};
            run_tok += c.m;
        }
        flush();
    }
    void moe_weighted_sum(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width, float* y) override {
        for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t c = 0; c < width; ++c) {
                // routed experts in rank order into a zero, then added to the shared expert's
                // output already in y, so the sum order is fixed.
                float acc = 0.0f;
                for (int64_t j = 0; j < k; ++j) acc += w[t * k + j] * eo[(t * k + j) * width + c];
                y[t * width + c] += acc;
            }
    }

    void argmax(const float* x, int64_t n, const TokenBan& ban, int32_t* out) override {
        out[0] = cpu::argmax(x, n, ban);
    }

private:
    // Whether the expert's gate and up rows lie back to back (an expert's slot), and if so the
    // view of both as one matrix of 2F rows.
    static bool gate_up_together(const ExpertMats& e, MatView* gate_up) {
        const int64_t E = e.gate.cols, F = e.gate.rows;
        if (e.up.type != e.gate.type || e.up.row_stride != e.gate.row_stride || e.up.cols != E || e.up.rows != F ||
            e.up.data != e.gate.data + static_cast<uint64_t>(F) * e.gate.row_stride)
            return false;
        *gate_up = e.gate;
        gate_up->rows = 2 * F;
        return true;
    }

    ThreadPool& pool_;
    std::vector<void*> allocations_;
    // Scratch sized once by reserve() (ops_host_bytes), then reused.
    bool reserved_ = false;
    OpsLimits lim_;
    std::vector<const float*> rows_;
    std::vector<int64_t> n_rows_;
    std::vector<float> att_scratch_, route_scratch_;
    std::vector<float> xg_, gu_, h_, eo_;  // expert_ffn: gathered x, gate and up [m][2F], hidden, output
    std::vector<int32_t> route_order_;
    Int8MatmulScratch int8_;  // --matmul fast: the int8 activations of the largest call
    const CpuIsa isa_ = best_cpu_isa();  // its row kernel, chosen once (the metrics' engine.cpu_int8_kernel)
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops(ThreadPool& pool) { return std::make_unique<CpuOps>(pool); }

// Activations one integer-path matmul quantises at most: the most tokens of a call (a unit, or
// a routed expert's tokens) times the widest integer-path input.
int64_t int8_scratch_values(const OpsLimits& lim) {
    return lim.matmul.int8_max_cols > 0 ? std::max(lim.max_tok, expert_work_tok(lim)) * lim.matmul.int8_max_cols : 0;
}

uint64_t ops_host_bytes(const OpsLimits& lim) {
    const uint64_t rows = static_cast<uint64_t>(lim.max_tok * lim.max_att_rows);
    return rows * sizeof(const float*) + static_cast<uint64_t>(lim.max_tok) * sizeof(int64_t) +
           rows * static_cast<uint64_t>(lim.n_head) * sizeof(float) + 2 * static_cast<uint64_t>(lim.n_expert) * sizeof(float) +
           static_cast<uint64_t>(lim.n_expert) * sizeof(int32_t) + expert_work_bytes(lim) +
           static_cast<uint64_t>(int8_scratch_values(lim)) + static_cast<uint64_t>(int8_scratch_values(lim) / 32) * sizeof(float) +
           static_cast<uint64_t>(int8_scratch_values(lim) / 16) * sizeof(int32_t);
}

}  // namespace bg::cpu
