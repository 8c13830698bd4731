#include "cpu/bf16_expert.h"

#include "cpu/bf16_rows.h"
#include "cpu/expert_job.h"
#include "util/check.h"

namespace bg::cpu {

void expert_ffn_bf16(ThreadPool& pool, const MatView& gate_up, const MatView& down, const float* x, int64_t ldx,
                     int64_t m, float limit, SwigluClamp form, float* gu, float* h, float* y, CpuIsa isa) {
    const int64_t E = gate_up.cols, F = down.cols;
    BG_CHECK_MSG(gate_up.type == GgmlType::BF16 && down.type == GgmlType::BF16, "expert_ffn_bf16: weights not BF16");
    if (!cpu_isa_usable(isa)) fail("expert_ffn_bf16: the %s kernel is not usable on this machine", cpu_isa_name(isa));
    BG_CHECK(gate_up.rows == 2 * F && down.rows == E && E > 0 && F > 0);
    BG_CHECK(gate_up.data != nullptr && down.data != nullptr);
    BG_CHECK(gate_up.row_stride >= row_bytes(gate_up.type, E) && down.row_stride >= row_bytes(down.type, F));
    BG_CHECK(m >= 1 && ldx >= E);
    // Float activations: nothing to prepare before either phase.
    struct Bf16Path {
        const MatView* gate_up;
        const MatView* down;
        const float* x;
        int64_t ldx, E, F, m;
        float* gu;
        const float* h;
        float* y;
        CpuIsa isa;
        void before_up(const Team&) const {}
        void up_rows(int64_t, int64_t r0, int64_t r1) const { bf16_rows(isa, *gate_up, x, ldx, m, gu, 2 * F, r0, r1); }
        void before_down(const Team&) const {}
        void down_rows(int64_t, int64_t r0, int64_t r1) const { bf16_rows(isa, *down, h, F, m, y, E, r0, r1); }
    };
    const Bf16Path path{&gate_up, &down, x, ldx, E, F, m, gu, h, y, isa};
    ExpertJobShape shape;
    shape.E = E, shape.F = F, shape.m = m;
    shape.up_group = shape.down_group = kBf16RowsTogether;
    shape.limit = limit, shape.form = form, shape.gu = gu, shape.h = h;
    run_expert_job(pool, expert_job_members(pool, shape), shape, path);
}

}  // namespace bg::cpu
