// The float matmul's BF16 rows (cpu::matmul takes them here): y[t * ldy + r] for rows [r0, r1) of
// a BF16 W, every token, the same floats on every kernel (bf16_rows.cpp says how).
#pragma once

#include <cstdint>

#include "backend/types.h"
#include "cpu/int8_matmul.h"

namespace bg::cpu {

// Rows each kernel takes together; a work split hands out multiples of it (the last group may be
// short, and costs as much as a whole one).
constexpr int64_t kBf16RowsTogether = 4;

// isa: a kernel cpu_isa_usable() accepts.
void bf16_rows(CpuIsa isa, const MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy,
               int64_t r0, int64_t r1);

}  // namespace bg::cpu
