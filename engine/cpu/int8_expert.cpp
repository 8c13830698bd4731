#include "cpu/int8_expert.h"

#include <algorithm>

#include "cpu/expert_job.h"
#include "cpu/int8_rows.h"
#include "cpu/ops.h"
#include "tensor/qtypes/all.h"
#include "util/check.h"

namespace bg::cpu {

void expert_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const MatView& gate_up, const MatView& down,
                     const float* x, int64_t ldx, int64_t m, float limit, SwigluClamp form, float* gu, float* h,
                     float* y, CpuIsa isa) {
    const int64_t E = gate_up.cols, F = down.cols;
    BG_CHECK_MSG(qtypes::int8_path_takes(gate_up.type) && qtypes::int8_path_takes(down.type),
                 "expert_ffn_int8: a weight type without int8 traits");
    if (!cpu_isa_usable(isa)) fail("expert_ffn_int8: the %s kernel is not usable on this machine", cpu_isa_name(isa));
    BG_CHECK(gate_up.rows == 2 * F && down.rows == E && E > 0 && F > 0 && E % 32 == 0 && F % 32 == 0);
    BG_CHECK(gate_up.data != nullptr && down.data != nullptr);
    BG_CHECK(gate_up.row_stride >= row_bytes(gate_up.type, E) && down.row_stride >= row_bytes(down.type, F));
    BG_CHECK(m >= 1 && ldx >= E);
    const int64_t widest = std::max(E, F);
    if (static_cast<int64_t>(scratch.xq.size()) < m * widest) scratch.xq.resize(static_cast<size_t>(m * widest));
    if (static_cast<int64_t>(scratch.xd.size()) < m * widest / 32) scratch.xd.resize(static_cast<size_t>(m * widest / 32));
    if (static_cast<int64_t>(scratch.xs.size()) < m * widest / 16) scratch.xs.resize(static_cast<size_t>(m * widest / 16));
    int8_t* q = scratch.xq.data();
    float* d = scratch.xd.data();
    int32_t* s = scratch.xs.data();

    // The integer activations: x's blocks quantised by the team before the gate and up rows,
    // h's before the down rows (each member a share of the blocks, then a barrier).
    struct Int8Path {
        Int8RowsArgs up, down;
        const float* x;
        int64_t ldx, E, F, m;
        const float* h;
        int8_t* q;
        float* d;
        int32_t* s;
        CpuIsa isa;
        // src [m][ld], width columns: each member quantises its share of the blocks.
        void quantize(const Team& team, const float* src, int64_t ld, int64_t width) const {
            int64_t b, e;
            team.share(m * (width / 32), &b, &e);
            quantize_int8_blocks(src, ld, width, b, e, q, d, s);
            team.barrier();
        }
        void before_up(const Team& team) const { quantize(team, x, ldx, E); }
        void up_rows(int64_t r0, int64_t r1) const { int8_rows(isa, up, r0, r1); }
        void before_down(const Team& team) const { quantize(team, h, F, F); }
        void down_rows(int64_t r0, int64_t r1) const { int8_rows(isa, down, r0, r1); }
    };
    const Int8Path path{{&gate_up, q, d, s, m, gu, 2 * F}, {&down, q, d, s, m, y, E}, x, ldx, E, F, m, h, q, d, s, isa};
    ExpertJobShape shape;
    shape.E = E, shape.F = F, shape.m = m;
    shape.up_group = int8_rows_together(isa, gate_up.type, m);
    shape.down_group = int8_rows_together(isa, down.type, m);
    shape.limit = limit, shape.form = form, shape.gu = gu, shape.h = h;
    run_expert_job(pool, expert_job_members(pool, shape), shape, path);
}

}  // namespace bg::cpu
