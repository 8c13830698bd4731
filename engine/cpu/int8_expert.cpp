#include "cpu/int8_expert.h"

#include <algorithm>

#include "cpu/expert_job.h"
#include "cpu/int8_rows.h"
#include "cpu/ops.h"
#include "tensor/qtypes/all.h"
#include "util/check.h"

namespace bg::cpu {

void experts_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const Int8Expert* experts, int64_t n,
                      const float* x, int64_t ldx, float limit, SwigluClamp form, float* gu, float* h, float* y,
                      CpuIsa isa) {
    BG_CHECK(n >= 1 && n <= kMaxJobExperts);
    if (!cpu_isa_usable(isa)) fail("expert_ffn_int8: the %s kernel is not usable on this machine", cpu_isa_name(isa));
    const int64_t E = experts[0].gate.cols;
    BG_CHECK(E > 0 && E % 32 == 0 && ldx >= E);
    int64_t m_all = 0, widest = E, hidden_all = 0;  // hidden_all: the sum of m F
    for (int64_t i = 0; i < n; ++i) {
        const Int8Expert& e = experts[i];
        const int64_t F = e.gate.rows;
        BG_CHECK_MSG(qtypes::int8_path_takes(e.gate.type) && qtypes::int8_path_takes(e.up.type) &&
                         qtypes::int8_path_takes(e.down.type),
                     "expert_ffn_int8: a weight type without int8 traits");
        BG_CHECK(F > 0 && F % 32 == 0 && e.gate.cols == E && e.up.cols == E && e.up.rows == F && e.down.cols == F &&
                 e.down.rows == E);
        BG_CHECK(e.gate.data != nullptr && e.up.data != nullptr && e.down.data != nullptr);
        BG_CHECK(e.gate.row_stride >= row_bytes(e.gate.type, E) && e.up.row_stride >= row_bytes(e.up.type, E) &&
                 e.down.row_stride >= row_bytes(e.down.type, F));
        BG_CHECK(e.m >= 1);
        m_all += e.m;
        hidden_all += e.m * F;
        widest = std::max(widest, F);
    }
    if (static_cast<int64_t>(scratch.xq.size()) < m_all * widest) scratch.xq.resize(static_cast<size_t>(m_all * widest));
    if (static_cast<int64_t>(scratch.xd.size()) < m_all * widest / 32)
        scratch.xd.resize(static_cast<size_t>(m_all * widest / 32));
    if (static_cast<int64_t>(scratch.xs.size()) < m_all * widest / 16)
        scratch.xs.resize(static_cast<size_t>(m_all * widest / 16));
    int8_t* q = scratch.xq.data();
    float* d = scratch.xd.data();
    int32_t* s = scratch.xs.data();

    // The integer activations: every expert's x blocks quantised by the team before the gate and
    // up rows, their h blocks before the down rows (each member a share of the blocks, then a
    // barrier). Token row t of every expert quantises as it would alone: blocks do not cross rows.
    struct Int8Path {
        Int8RowsArgs gate[kMaxJobExperts], up[kMaxJobExperts], down[kMaxJobExperts];
        int64_t F[kMaxJobExperts];
        const float* x;
        int64_t ldx, E, m_all, hidden_all;
        const float* h;
        int8_t* q;
        float* d;
        int32_t* s;
        CpuIsa isa;
        // Blocks [0, blocks) of src, a row of `width` columns each ld apart: each member
        // quantises its share of the blocks.
        void quantize(const Team& team, const float* src, int64_t ld, int64_t width, int64_t blocks) const {
            int64_t b, e;
            team.share(blocks, &b, &e);
            quantize_int8_blocks(src, ld, width, b, e, q, d, s);
            team.barrier();
        }
        void before_up(const Team& team) const { quantize(team, x, ldx, E, m_all * (E / 32)); }
        // Rows [0, F) of the job's gate_up are the gate's, [F, 2F) the up's.
        void up_rows(int64_t i, int64_t r0, int64_t r1) const {
            if (r0 < F[i]) int8_rows(isa, gate[i], r0, r1);
            else int8_rows(isa, up[i], r0 - F[i], r1 - F[i]);
        }
        // h lies packed (every expert's m rows of F, one after another): its blocks as rows of 32.
        void before_down(const Team& team) const { quantize(team, h, 32, 32, hidden_all / 32); }
        void down_rows(int64_t i, int64_t r0, int64_t r1) const { int8_rows(isa, down[i], r0, r1); }
    };
    Int8Path path{};
    path.x = x, path.ldx = ldx, path.E = E, path.m_all = m_all, path.hidden_all = hidden_all, path.h = h;
    path.q = q, path.d = d, path.s = s, path.isa = isa;
    ExpertJobShape shapes[kMaxJobExperts];
    for (int64_t i = 0, t = 0, u = 0; i < n; t += experts[i].m, u += experts[i].m * experts[i].gate.rows, ++i) {
        const Int8Expert& e = experts[i];
        const int64_t F = e.gate.rows;
        path.F[i] = F;
        path.gate[i] = {&e.gate, q + t * E, d + t * E / 32, s + t * E / 16, e.m, gu + 2 * u, 2 * F};
        path.up[i] = {&e.up, q + t * E, d + t * E / 32, s + t * E / 16, e.m, gu + 2 * u + F, 2 * F};
        path.down[i] = {&e.down, q + u, d + u / 32, s + u / 16, e.m, y + t * E, E};
        ExpertJobShape& sh = shapes[i];
        sh.E = E, sh.F = F, sh.m = e.m;
        // A run of rows goes to one kernel call: gate and up take the same groups.
        sh.up_group = std::max(int8_rows_together(isa, e.gate.type, e.m), int8_rows_together(isa, e.up.type, e.m));
        sh.down_group = int8_rows_together(isa, e.down.type, e.m);
        sh.limit = limit, sh.form = form, sh.gu = gu + 2 * u, sh.h = h + u;
    }
    run_experts_job(pool, experts_job_members(pool, shapes, n), shapes, n, path);
}

void expert_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const Int8Expert& e, const float* x, int64_t ldx,
                     float limit, SwigluClamp form, float* gu, float* h, float* y, CpuIsa isa) {
    experts_ffn_int8(pool, scratch, &e, 1, x, ldx, limit, form, gu, h, y, isa);
}

}  // namespace bg::cpu
