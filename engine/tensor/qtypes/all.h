// The weight types the integer matmul path takes, one traits struct each (tensor/qtypes/*.h), and
// the dispatch from a ggml type id to its traits. Adding a type: its traits file (block layout,
// unpack to int8 with the block's scale and min, the CUDA A-fragment load) and one line here.
#pragma once

#include "tensor/ggml_types.h"
#include "tensor/qtypes/mxfp4.h"
#include "tensor/qtypes/q8_0.h"
#include "util/check.h"

namespace bg::qtypes {

inline bool int8_path_takes(GgmlType t) { return t == GgmlType::MXFP4 || t == GgmlType::Q8_0; }

// f(Traits{}) for type t; t must satisfy int8_path_takes.
template <class F>
decltype(auto) visit(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::MXFP4: return f(Mxfp4{});
        case GgmlType::Q8_0: return f(Q8_0{});
        default: break;
    }
    fail("integer matmul: no int8 traits for weight type %s", type_name(t));
}

}  // namespace bg::qtypes
