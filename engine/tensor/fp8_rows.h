// The Engram table format of one llama.cpp fork, tarruda/llama.cpp (its deepseek41 converter,
// conversion/deepseek41.py `_write_engram_tables`, and loader, src/models/deepseek41.cpp): the
// checkpoint's layers.N.engram.embed.weight (float8_e4m3fn, [rows, dim]) kept as raw bytes in a
// GGML I8 tensor blk.N.engram_embd.weight {dim, rows}, and layers.N.engram.embed.scale (E8M0
// bytes, [rows, dim/32]) in an I8 tensor blk.N.engram_embd_scale.weight {dim/32, rows}. Value j
// of a row is e4m3(values[j]) * 2^(scales[j/32] - 127): the fork decodes each group as its
// dequantize_row_mxfp8_act does a block of one scale byte and 32 E4M3 bytes.
//
// A row read from disk is packed as its dim value bytes, then its dim/32 scale bytes (264 bytes
// at dim 256, the checkpoint's own row size); the CPU and CUDA decode such packed rows with
// packed_value below.
#pragma once

#include <cstdint>

#include "tensor/fp8.h"
#include "tensor/qtypes/hd.h"

namespace bg::fp8 {

constexpr int64_t kGroup = 32;  // values per E8M0 scale

BG_HD constexpr int64_t scale_bytes(int64_t dim) { return dim / kGroup; }
BG_HD constexpr int64_t packed_row_bytes(int64_t dim) { return dim + scale_bytes(dim); }

// Value j (< dim) of a packed row.
BG_HD float packed_value(const uint8_t* row, int64_t dim, int64_t j) {
    return e4m3_to_float(row[j]) * e8m0_to_float(row[dim + j / kGroup]);
}

// rows packed rows back to back -> rows x dim floats. dim must be a multiple of kGroup.
void dequantize_packed_rows(const uint8_t* src, float* dst, int64_t rows, int64_t dim);

// One row of n floats (n a multiple of kGroup) into n E4M3 values and n/32 E8M0 scales: each
// group's scale the smallest power of two that fits its largest magnitude in 448 (e8m0_for_max),
// each value rounded to the nearest E4M3 (ties to even).
void quantize_row(const float* x, uint8_t* values, uint8_t* scales, int64_t n);

}  // namespace bg::fp8
