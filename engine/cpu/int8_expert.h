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

// One expert of a job: gate and up, F rows of E columns each, and down, E rows of F columns, all
// of types the integer path takes (qtypes::int8_path_takes), E and F multiples of 32; m tokens.
// F may be part of an expert's hidden rows (ExpertMats::hidden_rows: the CPU's share of an expert
// split between the CPU and the GPU), so gate and up need not lie back to back.
struct Int8Expert {
    MatView gate, up, down;
    int64_t m = 0;
};

// n <= kMaxJobExperts experts of the same E as one job, each of its own F. Expert i's tokens are
// rows [t_i, t_i + m_i) of x [.][ldx] and of y [.][E] (the output), t_i the sum of the m before
// it; its gu [m_i][2 F_i] (token t's gate then up) and h [m_i][F_i] (the SwiGLU) lie in the
// caller's scratch gu and h at 2 u_i and u_i floats, u_i the sum of m F before it (with one F
// for all, token row t_i as before). scratch holds the int8 activations of x, then of h (grown to
// (sum of m) * max(E, F) values once).
void experts_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const Int8Expert* experts, int64_t n,
                      const float* x, int64_t ldx, float limit, SwigluClamp form, float* gu, float* h, float* y,
                      CpuIsa isa = best_cpu_isa());

// One expert: experts_ffn_int8 of one.
void expert_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const Int8Expert& e, const float* x, int64_t ldx,
                     float limit, SwigluClamp form, float* gu, float* h, float* y, CpuIsa isa = best_cpu_isa());

}  // namespace bg::cpu
