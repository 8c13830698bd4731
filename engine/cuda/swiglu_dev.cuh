// cpu::swiglu on the device, both clamp forms (limit <= bg::kSwigluNoClamp: no clamp): the
// elementwise op (swiglu.cu) and the kernels that apply it where the gate/up sums complete
// (quant_matmul.cu, int8_matmul.cu).
#pragma once

#include "backend/types.h"
#include "cuda/common.cuh"

namespace bg::cuda {

__device__ __forceinline__ float swiglu_dev(float g, float u, float limit, int llama) {
    if (limit <= bg::kSwigluNoClamp) return g * sigmoid_dev(g) * u;
    const float uc = fminf(limit, fmaxf(-limit, u));
    if (llama) return fminf(g * sigmoid_dev(g), limit) * uc;
    const float gc = fminf(g, limit);
    return gc * sigmoid_dev(gc) * uc;
}

}  // namespace bg::cuda
