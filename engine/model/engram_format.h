// How an Engram table is stored in a file, and how its rows dequantise.
//   typed     one tensor blk.N.engram_embd.weight {dim, rows} of any type the engine dequantises:
//             Q8_0 (make-model's default; llama.cpp's converter), a K-quant (llama-quantize),
//             BF16, ... Its rows go through the same dequantise call as every ggml type.
//   fork-fp8  tarruda/llama.cpp's deepseek41 converter (tensor/fp8_rows.h): the FP8-E4M3 bytes in
//             an I8 tensor blk.N.engram_embd.weight {dim, rows} and their E8M0 scales, one per 32
//             values, in an I8 tensor blk.N.engram_embd_scale.weight {dim/32, rows}. A row is two
//             byte ranges on disk, packed back to back (values, then scales) when read.
#pragma once

#include <cstdint>
#include <string>

#include "backend/ops.h"
#include "tensor/ggml_types.h"

namespace bg {

struct EngramFormat {
    enum class Kind { kTyped, kForkFp8 };
    Kind kind = Kind::kTyped;
    GgmlType type = GgmlType::Q8_0;  // kTyped: the table's type; kForkFp8: I8, the values' file type

    static EngramFormat typed(GgmlType t) { return {Kind::kTyped, t}; }
    static EngramFormat fork_fp8() { return {Kind::kForkFp8, GgmlType::I8}; }
    bool fork() const { return kind == Kind::kForkFp8; }
    bool operator==(const EngramFormat& o) const { return kind == o.kind && type == o.type; }

    // "q8_0", "bf16", ..., "fork-fp8": what --engram-format and a scale's engram_type take.
    std::string name() const;
    // One line for `betelgeuse info`.
    std::string describe() const;
    // Whether a row of dim values is whole in this format (whole blocks; whole scale groups).
    bool row_fits(int64_t dim) const;
    // Bytes of one row as read and packed: for fork-fp8 its dim values, then its dim/32 scales.
    uint64_t row_bytes(int64_t dim) const;
};

// "fork-fp8", or any type name the engine dequantises ("q8_0", "bf16", ...). Throws bg::Error
// naming the text and the choices.
EngramFormat parse_engram_format(const std::string& text);

// rows packed rows (row_bytes(dim) each, back to back) -> rows x dim floats: in host memory, and
// queued on ops (src and dst in its backend's memory). Both decode every element as the CPU
// reference does (dequantize_row, fp8::packed_value), bit for bit.
void dequantize_engram_rows(const EngramFormat& f, const uint8_t* src, float* dst, int64_t rows, int64_t dim);
void dequantize_engram_rows(Ops& ops, const EngramFormat& f, const uint8_t* src, float* dst, int64_t rows, int64_t dim);

}  // namespace bg
