// One routed BF16 expert's FFN on the CPU, as one pool job (cpu/expert_job.h): y = down(swiglu(
// gate x, up x)) through the BF16 row kernels (cpu/bf16_rows.h), so the same y bit for bit as the
// float matmul over the gate and up rows, the SwiGLU, then the float matmul over the down rows.
#pragma once

#include <cstdint>

#include "backend/types.h"
#include "cpu/int8_matmul.h"
#include "cpu/thread_pool.h"

namespace bg::cpu {

// gate_up: the expert's gate rows then its up rows, back to back in one BF16 matrix (2F rows of
// E columns, as in an expert's slot); down: E BF16 rows of F columns. x [m][ldx] (the m tokens
// routed to it), gu [m][2F] and h [m][F] the caller's scratch, y [m][E] the output.
void expert_ffn_bf16(ThreadPool& pool, const MatView& gate_up, const MatView& down, const float* x, int64_t ldx,
                     int64_t m, float limit, SwigluClamp form, float* gu, float* h, float* y,
                     CpuIsa isa = best_cpu_isa());

}  // namespace bg::cpu
