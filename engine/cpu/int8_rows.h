// The row kernels behind cpu::matmul_int8 (engine/cpu/int8_matmul.h), one per instruction set:
// each computes y for rows [r0, r1) of W and every token, from activations already quantised, with
// the same arithmetic (tensor/qtypes/int8_act.h: exact integer sums per 16-weight half, then
// chunk_partial in float, added in chunk order), so every kernel gives the same y bit for bit.
#pragma once

#include <cstdint>

#include "backend/types.h"
#include "cpu/int8_matmul.h"

namespace bg::cpu {

struct Int8RowsArgs {
    const MatView* W;
    const int8_t* xq;   // [n_tok][cols]
    const float* xd;    // [n_tok][cols / 32]
    const int32_t* xs;  // [n_tok][cols / 16] sums of xq over each 16 (types with a min, the SIMD kernels)
    int64_t n_tok;
    float* y;  // y[t * ldy + r]
    int64_t ldy;
};

// Asks for bytes [p, p + n) in the core's L2 (prefetcht1 on x86), a cache line at a time. The
// SIMD kernels call it for each row's next K-quant block when they enter a block: the block's
// scales and super-scales are read before its codes, and in Q2_K, Q3_K and Q6_K the super-scales
// (in Q3_K and Q6_K the scales too) sit at the block's end, so each row's reads jump ahead and
// back within a block where the hardware prefetchers look for a steady stride, and the kernel
// waited on memory for most of its time (Q6_K at one token, one thread: 20 GB/s from the caches,
// 6 from memory, 12 with this; bench_cpu BM_CpuRowsInt8, bench/KERNELS.md).
// Into L2, not L1: prefetcht0 of sixteen rows' blocks at once held up the kernel's own loads.
inline void prefetch_to_l2(const uint8_t* p, int n) {
    for (int o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 2);
    __builtin_prefetch(p + n - 1, 0, 2);  // the line of the last byte, where p is not line-aligned
}

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

// AVX-512 with VNNI (engine/cpu/int8_matmul_avx512.cpp, compiled for AVX-512 F, BW, VL and VNNI
// alone): one token of MXFP4, Q8_0 or a K-quant (Q2_K..Q6_K) sixteen rows at a time, products by
// vpdpbusd; every other case through int8_rows_avx2. Call only where int8_avx512_built() and the
// CPU has those and AVX2.
bool int8_avx512_built();
void int8_rows_avx512(const Int8RowsArgs& a, int64_t r0, int64_t r1);

// Rows the AVX-512 kernel takes together where it computes itself; int8_avx512_rows gives, for
// a call, that or kAvx2Rows where it hands the call on (a work split hands multiples of it).
constexpr int64_t kAvx512Rows = 16;
static_assert(kAvx512Rows % kAvx2Rows == 0);
int64_t int8_avx512_rows(GgmlType type, int64_t n_tok);

// The kernel of `isa` over rows [r0, r1), and the rows it takes together in such a call (a work
// split hands out multiples of it; the last group may be short).
void int8_rows(CpuIsa isa, const Int8RowsArgs& a, int64_t r0, int64_t r1);
int64_t int8_rows_together(CpuIsa isa, GgmlType type, int64_t n_tok);

// Activation blocks [i0, i1) of x [n_tok][ldx] (block i: token i / (cols / 32), its block
// i % (cols / 32)) quantised into q [n_tok][cols] and d [n_tok][cols / 32], with their half sums
// into s [n_tok][cols / 16] (none where s is null): quantize_int8_rows and int8_half_sums for
// part of the rows, so a team can share the work.
void quantize_int8_blocks(const float* x, int64_t ldx, int64_t cols, int64_t i0, int64_t i1, int8_t* q, float* d,
                          int32_t* s);

}  // namespace bg::cpu
