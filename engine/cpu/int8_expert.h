// One routed expert's FFN on the CPU's integer path, as one pool job (cpu/expert_job.h): y =
// down(swiglu(gate x, up x)). The same arithmetic as matmul_int8 over the gate and up rows, the
// SwiGLU, then matmul_int8 over the down rows (so the same y bit for bit), with x's and then h's
// int8 blocks quantised by the team before each phase.
#pragma once

#include <cstdint>

#include "backend/types.h"
#include "cpu/int8_matmul.h"
#include "cpu/thread_pool.h"

namespace bg::cpu {

// gate_up: the expert's gate rows then its up rows, back to back in one matrix (2F rows of E
// columns, as in an expert's slot); down: E rows of F columns; both of types the integer path
// takes (qtypes::int8_path_takes), E and F multiples of 32.
// x [m][ldx] (the m tokens routed to it), gu [m][2F] and h [m][F] the caller's scratch (gu row t:
// token t's gate then up; h: the SwiGLU), y [m][E] the output. scratch holds the int8 activations
// of x, then of h (grown to m * max(E, F) values once).
void expert_ffn_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const MatView& gate_up, const MatView& down,
                     const float* x, int64_t ldx, int64_t m, float limit, SwigluClamp form, float* gu, float* h,
                     float* y, CpuIsa isa = best_cpu_isa());

}  // namespace bg::cpu
