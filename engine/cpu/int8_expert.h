// Routed experts' FFNs on the CPU's integer path, as one pool job (cpu/expert_job.h): y =
// down(swiglu(gate x, up x)). The same arithmetic as matmul_int8 over the gate and up rows, the
// SwiGLU, then matmul_int8 over the down rows (so the same y bit for bit), with x's and then h's
// int8 blocks quantised by the team before each phase. Several experts of a layer go in one job,
// each computed exactly as alone.
#pragma once

#include <cstdint>

#include "backend/types.h"
#include "cpu/int8_matmul.h"
#include "cpu/thread_pool.h"

namespace bg::cpu {

// One expert of a job: gate_up, its gate rows then its up rows, back to back in one matrix (2F
// rows of E columns, as in an expert's slot); down, E rows of F columns; both of types the
// integer path takes (qtypes::int8_path_takes), E and F multiples of 32; m tokens.
struct Int8Expert {
    MatView gate_up, down;
    int64_t m = 0;
};

// n <= kMaxJobExperts experts of the same E and F as one job. Expert i's tokens are rows [t_i,
// t_i + m_i) of x [.][ldx], of gu [.][2F] and h [.][F] (the caller's scratch; gu row t: token t's
// gate then up, h: the SwiGLU) and of y [.][E] (the output), t_i the sum of the m before it.
// scratch holds the int8 activations of x, then of h (grown to (sum of m) * max(E, F) values
// once).
void experts_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const Int8Expert* experts, int64_t n,
                      const float* x, int64_t ldx, float limit, SwigluClamp form, float* gu, float* h, float* y,
                      CpuIsa isa = best_cpu_isa());

// One expert: experts_ffn_int8 of one.
void expert_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const MatView& gate_up, const MatView& down,
                     const float* x, int64_t ldx, int64_t m, float limit, SwigluClamp form, float* gu, float* h,
                     float* y, CpuIsa isa = best_cpu_isa());

}  // namespace bg::cpu
