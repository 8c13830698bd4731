// Which path the CUDA backend multiplies each weight matrix through, and the memory those paths
// hold, decided from weight types, shapes and byte offsets alone: `betelgeuse plan` (no device)
// and the CUDA ops (at reserve) size the same memory from the same functions, so the plan equals
// the live allocations.
//
// Paths (engine/cuda/cuda_ops.cu):
//  - integer (MatmulMode::kFast, the default): weight types with int8 traits (tensor/qtypes:
//    MXFP4, Q8_0) go through the int8 tensor-core kernels (engine/cuda/int8_matmul.cuh); their
//    workspace holds the int8 activations of one 64-token pass with their block scales, the
//    expert FFN's h the same way, and the split-K partial sums;
//  - fused: MXFP4, Q8_0 and BF16 rows of whole 32-blocks go through the fused quantized kernels
//    (engine/cuda/quant_matmul.cuh), reading the blocks in place; their workspace holds the
//    converted activations of one 64-token chunk, the expert FFN's hidden activations, the
//    split-K partial sums and the split-K counters;
//  - direct SGEMM: F32 rows at 4-byte aligned addresses, read in place by cuBLAS;
//  - dequantised SGEMM: everything else (F16; F32 or BF16 at odd addresses; BF16 rows that are
//    not whole 32-blocks) is dequantised in row chunks into an FP32 scratch, then cuBLAS. The
//    scratch is sized for the largest such matrix (at most kMaxDequantScratchBytes, at least one
//    row), 0 when the model has none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/all.h"
#include "util/named_enum.h"

namespace bg {

// How quantized weights are multiplied (`--matmul`): kFast through int8 activations and exact
// integer block sums (llama.cpp's habit; engine/cuda/int8_matmul.cuh, engine/cpu/int8_matmul.h),
// kPrecise through the float path (activations kept to about 2^-22, weights decoded exactly;
// engine/cuda/quant_matmul.cuh, cpu::matmul), which the float64 reference checks use.
enum class MatmulMode { kFast, kPrecise };
template <>
struct EnumNames<MatmulMode> {
    static constexpr NamedValue<MatmulMode> kNames[] = {{MatmulMode::kFast, "fast"}, {MatmulMode::kPrecise, "precise"}};
    static constexpr const char* kWhat = "--matmul";
};

// `addr` is the matrix's address, or its offset from a base aligned to at least 16 bytes.
inline bool fused_matmul_takes(GgmlType t, int64_t cols, uint64_t addr) {
    if (cols <= 0 || cols % 32 != 0) return false;
    if (t == GgmlType::MXFP4 || t == GgmlType::Q8_0) return true;
    return t == GgmlType::BF16 && addr % 2 == 0;
}
inline bool sgemm_direct(GgmlType t, uint64_t addr) { return t == GgmlType::F32 && addr % 4 == 0; }

// The fused kernels' workspace (cuda::QuantMatmulWorkspace), in bytes, for inputs up to max_cols
// wide and expert FFNs up to max_ff wide (0: none).
constexpr int64_t kQuantChunk = 64;                        // tokens per kernel pass
constexpr uint64_t kQuantPartialFloats = uint64_t{1} << 21;  // split-K partial sums (8 MiB)
constexpr int64_t kQuantCounters = 4096;                   // split-K row-tile counters
inline uint64_t quant_workspace_bytes(int64_t max_cols, int64_t max_ff) {
    uint64_t b = static_cast<uint64_t>(kQuantChunk) * static_cast<uint64_t>(max_cols) * 2;  // x as FP16/BF16
    if (max_ff > 0) b += static_cast<uint64_t>(kQuantChunk) * static_cast<uint64_t>(max_ff) * 2;  // h
    return b + kQuantPartialFloats * sizeof(float) + static_cast<uint64_t>(kQuantCounters) * sizeof(int32_t);
}

// The integer path's workspace (cuda::Int8Workspace), in bytes: x as int8 for 64 tokens with a
// float scale per 32 values and two float half-block sums (for the K-quants' min term), the same
// for h (max_ff > 0), and the split-K partial sums.
constexpr uint64_t kInt8PartialFloats = uint64_t{1} << 21;  // 8 MiB
constexpr int64_t kInt8Counters = 4096;                    // row tiles of one launch
inline uint64_t int8_workspace_bytes(int64_t max_cols, int64_t max_ff) {
    const uint64_t tok = static_cast<uint64_t>(kQuantChunk);
    uint64_t b = tok * static_cast<uint64_t>(max_cols) + tok * static_cast<uint64_t>(max_cols / 32) * 3 * sizeof(float);
    if (max_ff > 0)
        b += tok * static_cast<uint64_t>(max_ff) + tok * static_cast<uint64_t>(max_ff / 32) * 3 * sizeof(float);
    return b + kInt8PartialFloats * sizeof(float) + static_cast<uint64_t>(kInt8Counters) * sizeof(int32_t);
}

constexpr uint64_t kMaxDequantScratchBytes = uint64_t{128} << 20;

// Accumulates what a model's matrices ask of the CUDA matmul paths.
struct MatmulNeeds {
    MatmulMode mode = MatmulMode::kFast;
    int64_t int8_max_cols = 0;      // widest input of an integer-path matrix (0: none)
    int64_t int8_max_ff = 0;        // widest integer-path expert FFN (0: none)
    int64_t quant_max_cols = 0;     // widest input of a fused matrix (0: no fused matrix)
    int64_t quant_max_ff = 0;       // widest fused expert FFN (0: none)
    bool sgemm = false;             // some matrix goes through cuBLAS
    uint64_t dequant_bytes = 0;     // FP32 scratch for the dequantised path (0: none)

    // One matrix multiplied through Ops::matmul.
    void add_matrix(GgmlType t, int64_t cols, int64_t rows, uint64_t addr) {
        if (int8_takes(t, cols)) {
            int8_max_cols = std::max(int8_max_cols, cols);
            return;
        }
        if (fused_matmul_takes(t, cols, addr)) {
            quant_max_cols = std::max(quant_max_cols, cols);
            return;
        }
        sgemm = true;
        if (sgemm_direct(t, addr)) return;
        const uint64_t row = static_cast<uint64_t>(cols) * sizeof(float);
        const uint64_t whole = row * static_cast<uint64_t>(std::max<int64_t>(rows, 1));
        dequant_bytes = std::max(dequant_bytes, std::max(row, std::min(whole, kMaxDequantScratchBytes)));
    }
    // Whether a matrix (an expert) goes through the integer kernels in this mode.
    bool int8_takes(GgmlType t, int64_t cols) const {
        return mode == MatmulMode::kFast && cols > 0 && cols % 32 == 0 && qtypes::int8_path_takes(t);
    }
    bool int8_expert(GgmlType gate, GgmlType up, GgmlType down, int64_t n_embd, int64_t n_ff) const {
        return gate == up && int8_takes(gate, n_embd) && int8_takes(down, n_ff);
    }
    // Whether Ops::expert_ffn runs an expert fused (gate, up: n_ff rows of n_embd; down: n_embd
    // rows of n_ff; all one fused type, each at its address).
    static bool fused_expert(GgmlType gate, GgmlType up, GgmlType down, int64_t n_embd, int64_t n_ff,
                             uint64_t gate_addr, uint64_t up_addr, uint64_t down_addr) {
        return gate == up && gate == down && fused_matmul_takes(gate, n_embd, gate_addr) &&
               fused_matmul_takes(up, n_embd, up_addr) && fused_matmul_takes(down, n_ff, down_addr);
    }
    // One routed expert's three matrices, laid end to end from an aligned slot; false when the
    // expert runs unfused (gather, three matmuls, SwiGLU, scatter).
    bool add_expert(GgmlType gate, GgmlType up, GgmlType down, int64_t n_embd, int64_t n_ff) {
        if (int8_expert(gate, up, down, n_embd, n_ff)) {
            int8_max_cols = std::max({int8_max_cols, n_embd, n_ff});
            int8_max_ff = std::max(int8_max_ff, n_ff);
            return true;
        }
        const uint64_t up_at = static_cast<uint64_t>(n_ff) * row_bytes(gate, n_embd);
        const uint64_t down_at = up_at + static_cast<uint64_t>(n_ff) * row_bytes(up, n_embd);
        if (fused_expert(gate, up, down, n_embd, n_ff, 0, up_at, down_at)) {
            quant_max_cols = std::max({quant_max_cols, n_embd, n_ff});
            quant_max_ff = std::max(quant_max_ff, n_ff);
            return true;
        }
        add_matrix(gate, n_embd, n_ff, 0);
        add_matrix(up, n_embd, n_ff, up_at);
        add_matrix(down, n_ff, n_embd, down_at);
        return false;
    }
};

}  // namespace bg
