// The CPU's integer matmul (`--matmul fast`, issue 22): the same arithmetic as the CUDA int8
// kernels (engine/cuda/int8_matmul.cuh). Each token's input is quantised once per call to int8
// blocks of 32 (tensor/qtypes/int8_act.h); each weight row is unpacked once to int8 with its
// half-chunk scales and mins (tensor/qtypes/*.h); each 16-weight half's dot product is an exact
// int32 sum, and y is the float sum of the chunk partials (qtypes::chunk_partial) in chunk order.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/types.h"
#include "cpu/thread_pool.h"

namespace bg::cpu {

// The row kernel matmul_int8 runs (engine/cpu/int8_rows.h): every kernel gives the same y bit for
// bit, so this chooses speed only.
enum class CpuIsa { kPortable, kAvx2, kAvx512 };
const char* cpu_isa_name(CpuIsa isa);
// The fastest kernel this build has and this CPU runs.
CpuIsa best_cpu_isa();
// Whether this build has the kernel and this CPU runs it.
bool cpu_isa_usable(CpuIsa isa);

// Memory the call reuses (grown to the largest call once; nothing allocates after).
struct Int8MatmulScratch {
    std::vector<int8_t> xq;   // [n_tok][cols]
    std::vector<float> xd;    // [n_tok][cols / 32]
    std::vector<int32_t> xs;  // [n_tok][cols / 16] sums of xq over each 16 (weight types with a min)
};

// y[t*ldy + r] = sum over 32-chunks b of chunk_partial(W's chunk b of row r, x's block b of token t).
// W: a type qtypes::int8_path_takes accepts, cols a multiple of its block.
// isa: a kernel cpu_isa_usable() accepts.
void matmul_int8(ThreadPool& pool, Int8MatmulScratch& scratch, const MatView& W, const float* x, int64_t ldx,
                 int64_t n_tok, float* y, int64_t ldy, CpuIsa isa = best_cpu_isa());

// The activation quantisation alone: x [n_tok][ldx] -> q [n_tok][cols], d [n_tok][cols/32].
void quantize_int8_rows(const float* x, int64_t ldx, int64_t n_tok, int64_t cols, int8_t* q, float* d);
// The half sums of quantised rows: q [n_tok][cols] -> s [n_tok][cols/16].
void int8_half_sums(const int8_t* q, int64_t n_tok, int64_t cols, int32_t* s);

}  // namespace bg::cpu
