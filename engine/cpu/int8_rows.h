// The row kernels behind cpu::matmul_int8 (engine/cpu/int8_matmul.h), one per instruction set:
// each computes y for rows [r0, r1) of W and every token, from activations already quantised, with
// the same arithmetic (tensor/qtypes/int8_act.h: exact integer sums per 16-weight half, then
// chunk_partial in float, added in chunk order), so every kernel gives the same y bit for bit.
#pragma once

#include <cstdint>

#include "backend/types.h"

namespace bg::cpu {

struct Int8RowsArgs {
    const MatView* W;
    const int8_t* xq;   // [n_tok][cols]
    const float* xd;    // [n_tok][cols / 32]
    const int32_t* xs;  // [n_tok][cols / 16] sums of xq over each 16 (weight types with a min, and the AVX2 kernel)
    int64_t n_tok;
    float* y;  // y[t * ldy + r]
    int64_t ldy;
};

// Plain C++ (what the compiler vectorises for the build's target): every machine.
void int8_rows_portable(const Int8RowsArgs& a, int64_t r0, int64_t r1);

// AVX2 (engine/cpu/int8_matmul_avx2.cpp, compiled for AVX2 alone): eight rows at a time, the
// weights decoded to int8 in registers (MXFP4 by table lookup, Q8_0 as stored, other types
// through their traits' unpack), products by pmaddubsw. Call only where int8_avx2_built() and
// the CPU has AVX2.
bool int8_avx2_built();
void int8_rows_avx2(const Int8RowsArgs& a, int64_t r0, int64_t r1);

// Rows the AVX2 kernel takes together (a work split hands it multiples of this where it can).
constexpr int64_t kAvx2Rows = 8;

}  // namespace bg::cpu
