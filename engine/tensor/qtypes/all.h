// The weight types the integer matmul path takes, one traits struct each (tensor/qtypes/*.h), and
// the dispatch from a ggml type id to its traits. Adding a type: its traits file and one line in
// visit() below.
//
// The traits contract (host side; every function BG_HD, so CUDA code may call it too):
//   kType            the ggml type
//   kBlockWeights    weights a block (32, or 256 for the K-quants and IQ2_XXS); rows are whole
//                    blocks, and a row is walked in chunks of 32 weights
//   kBlockBytes      bytes a block
//   kSubK            weights sharing one scale (and min): 16 (Q2_K, Q3_K, Q6_K) or 32 (the rest)
//   kHasMin          whether weights carry a min term (Q2_K, Q4_K, Q5_K)
//   unpack(row, chunk, int8_t v[32], float d[2], float m[2])
//                    weights chunk*32 .. chunk*32+31 of the row: weight i = d[i/16] * v[i] - m[i/16]
//                    with d, m as ggml rounds them (so the float products d[h] * v[i], minus m[h],
//                    are dequantize_row's values bit for bit). Where kSubK is 32, d[0] == d[1] and
//                    m[0] == m[1]; without a min, m = {0, 0}. Value ranges of v: MXFP4 -12..12,
//                    Q8_0 -127..127 (-128 as stored), Q2_K 0..3, Q3_K -4..3, Q4_K 0..15,
//                    Q5_K 0..31, Q6_K -32..31, IQ2_XXS +-{8, 25, 43}.
// The 256-weight types also have decode(blk, i, n, out) (n weights from i inside one 16-weight
// group of one block, exactly as ggml; what dequantize_row and the CUDA generic paths call) and
// their sub_scale / code (tensor/qtypes/super_block.h). The int8 dot product of one chunk with a
// quantised activation block is in tensor/qtypes/int8_act.h (chunk_partial).
#pragma once

#include "tensor/ggml_types.h"
#include "tensor/qtypes/iq2_xxs.h"
#include "tensor/qtypes/mxfp4.h"
#include "tensor/qtypes/q2_k.h"
#include "tensor/qtypes/q3_k.h"
#include "tensor/qtypes/q4_k.h"
#include "tensor/qtypes/q5_k.h"
#include "tensor/qtypes/q6_k.h"
#include "tensor/qtypes/q8_0.h"
#include "util/check.h"

namespace bg::qtypes {

// Types with int8 traits (every one visit() below knows).
inline bool has_int8_traits(GgmlType t) {
    switch (t) {
        case GgmlType::MXFP4:
        case GgmlType::Q8_0:
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ2_XXS: return true;
        default: return false;
    }
}

// Types the integer path runs in `--matmul fast`, on both backends (the CPU's
// engine/cpu/int8_matmul.h and the CUDA kernel engine/cuda/int8_matmul_kernel.cuh, instantiated
// per type in int8_matmul_<type>.cu): every type with int8 traits.
inline bool int8_path_takes(GgmlType t) { return has_int8_traits(t); }

// f(Traits{}) for type t; t must satisfy has_int8_traits.
template <class F>
decltype(auto) visit(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::MXFP4: return f(Mxfp4{});
        case GgmlType::Q8_0: return f(Q8_0{});
        case GgmlType::Q2_K: return f(Q2_K{});
        case GgmlType::Q3_K: return f(Q3_K{});
        case GgmlType::Q4_K: return f(Q4_K{});
        case GgmlType::Q5_K: return f(Q5_K{});
        case GgmlType::Q6_K: return f(Q6_K{});
        case GgmlType::IQ2_XXS: return f(Iq2_XXS{});
        default: break;
    }
    fail("integer matmul: no int8 traits for weight type %s", type_name(t));
}

}  // namespace bg::qtypes
