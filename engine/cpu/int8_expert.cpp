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
    const int64_t E = experts[0].gate_up.cols, F = experts[0].down.cols;
    BG_CHECK(E > 0 && F > 0 && E % 32 == 0 && F % 32 == 0 && ldx >= E);
    int64_t m_all = 0;
    for (int64_t i = 0; i < n; ++i) {
        const Int8Expert& e = experts[i];
        BG_CHECK_MSG(qtypes::int8_path_takes(e.gate_up.type) && qtypes::int8_path_takes(e.down.type),
                     "expert_ffn_int8: a weight type without int8 traits");
        BG_CHECK(e.gate_up.cols == E && e.gate_up.rows == 2 * F && e.down.cols == F && e.down.rows == E);
        BG_CHECK(e.gate_up.data != nullptr && e.down.data != nullptr);
        BG_CHECK(e.gate_up.row_stride >= row_bytes(e.gate_up.type, E) && e.down.row_stride >= row_bytes(e.down.type, F));
        BG_CHECK(e.m >= 1);
        m_all += e.m;
    }
    const int64_t widest = std::max(E, F);
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
        Int8RowsArgs up[kMaxJobExperts], down[kMaxJobExperts];
        const float* x;
        int64_t ldx, E, F, m_all;
        const float* h;
        int8_t* q;
        float* d;
        int32_t* s;
        CpuIsa isa;
        // src [m_all][ld], width columns: each member quantises its share of the blocks.
        void quantize(const Team& team, const float* src, int64_t ld, int64_t width) const {
            int64_t b, e;
            team.share(m_all * (width / 32), &b, &e);
            quantize_int8_blocks(src, ld, width, b, e, q, d, s);
            team.barrier();
        }
        void before_up(const Team& team) const { quantize(team, x, ldx, E); }
        void up_rows(int64_t i, int64_t r0, int64_t r1) const { int8_rows(isa, up[i], r0, r1); }
        void before_down(const Team& team) const { quantize(team, h, F, F); }
        void down_rows(int64_t i, int64_t r0, int64_t r1) const { int8_rows(isa, down[i], r0, r1); }
    };
    Int8Path path{};
    path.x = x, path.ldx = ldx, path.E = E, path.F = F, path.m_all = m_all, path.h = h;
    path.q = q, path.d = d, path.s = s, path.isa = isa;
    ExpertJobShape shapes[kMaxJobExperts];
    for (int64_t i = 0, t = 0; i < n; t += experts[i++].m) {
        const Int8Expert& e = experts[i];
        path.up[i] = {&e.gate_up, q + t * E, d + t * E / 32, s + t * E / 16, e.m, gu + t * 2 * F, 2 * F};
        path.down[i] = {&e.down, q + t * F, d + t * F / 32, s + t * F / 16, e.m, y + t * E, E};
        ExpertJobShape& sh = shapes[i];
        sh.E = E, sh.F = F, sh.m = e.m;
        sh.up_group = int8_rows_together(isa, e.gate_up.type, e.m);
        sh.down_group = int8_rows_together(isa, e.down.type, e.m);
        sh.limit = limit, sh.form = form, sh.gu = gu + t * 2 * F, sh.h = h + t * F;
    }
    run_experts_job(pool, experts_job_members(pool, shapes, n), shapes, n, path);
}

void expert_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const MatView& gate_up, const MatView& down,
                     const float* x, int64_t ldx, int64_t m, float limit, SwigluClamp form, float* gu, float* h,
                     float* y, CpuIsa isa) {
    const Int8Expert e{gate_up, down, m};
    experts_ffn_int8(pool, scratch, &e, 1, x, ldx, limit, form, gu, h, y, isa);
}

}  // namespace bg::cpu
