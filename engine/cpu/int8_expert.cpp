#include "cpu/int8_expert.h"

#include <algorithm>
#include <atomic>

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

    // The gate and up rows go out in groups of the rows the kernel takes together, a group of gate
    // rows with the same group of up rows, so a member's SwiGLU needs only its own rows; the down
    // rows likewise. Small experts (the test models) take fewer members, as matmul_int8 does.
    const int64_t g_up = int8_rows_together(isa, gate_up.type, m), g_down = int8_rows_together(isa, down.type, m);
    const int64_t n_up = (F + g_up - 1) / g_up, n_down = (E + g_down - 1) / g_down;
    const int64_t work_per_member_min = int64_t{1} << 16;  // weights x tokens
    const int64_t by_work = std::max<int64_t>(1, 3 * E * F * m / work_per_member_min);
    const int members = static_cast<int>(std::min<int64_t>({pool.size(), n_up, n_down, by_work}));

    // The job's inputs, which every member reads through one pointer.
    struct Job {
        Int8RowsArgs up, down;
        const float* x;
        int64_t ldx, m, E, F, g_up, g_down, n_up, n_down;
        float limit;
        SwigluClamp form;
        float* h;
        // The int8 activations, written by the quantisation steps: the row arguments hold the
        // same three pointers, but const, as the row kernels only read them.
        int8_t* q;
        float* d;
        int32_t* s;
        CpuIsa isa;
        // The next group of rows to take, per row phase: members take groups one at a time, so
        // a member that runs slower (its core shared, or taken away a while) holds up the
        // others by at most one group, not by a fixed share of the rows.
        std::atomic<int64_t> next_up{0}, next_down{0};
    } job_args{{&gate_up, q, d, s, m, gu, 2 * F}, {&down, q, d, s, m, y, E}, x, ldx, m, E, F, g_up, g_down, n_up,
               n_down, limit, form, h, q, d, s, isa};
    Job* j = &job_args;
    const auto job = [j](const Team& team) {
        const int64_t E = j->E, F = j->F, m = j->m;
        int64_t b, e;
        team.share(m * (E / 32), &b, &e);
        quantize_int8_blocks(j->x, j->ldx, E, b, e, j->q, j->d, j->s);
        team.barrier();
        for (int64_t g; (g = j->next_up.fetch_add(1, std::memory_order_relaxed)) < j->n_up;) {
            const int64_t r0 = g * j->g_up, r1 = std::min(r0 + j->g_up, F);
            int8_rows(j->isa, j->up, r0, r1);
            int8_rows(j->isa, j->up, F + r0, F + r1);
            for (int64_t t = 0; t < m; ++t)
                swiglu(j->up.y + t * 2 * F + r0, j->up.y + t * 2 * F + F + r0, r1 - r0, j->limit, j->form,
                       j->h + t * F + r0);
        }
        team.barrier();  // every member has read x's int8 blocks and written its rows of h
        team.share(m * (F / 32), &b, &e);
        quantize_int8_blocks(j->h, F, F, b, e, j->q, j->d, j->s);
        team.barrier();
        for (int64_t g; (g = j->next_down.fetch_add(1, std::memory_order_relaxed)) < j->n_down;)
            int8_rows(j->isa, j->down, g * j->g_down, std::min((g + 1) * j->g_down, E));
    };
    pool.run(members, job);
}

}  // namespace bg::cpu
