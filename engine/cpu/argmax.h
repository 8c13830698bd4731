// The greedy choice over a vocabulary's logits, the one rule every path takes: the host's
// sampler (runtime/sampler.h), the CPU ops' Ops::argmax, and the CUDA kernel held to it
// (engine/cuda/argmax.cu).
#pragma once

#include <cstdint>

#include "backend/types.h"

namespace bg::cpu {

// The first index of the largest of x[0..n), ban's ids counting as -inf and NaN never the
// largest; 0 where every value is NaN (or n is 0).
int32_t argmax(const float* x, int64_t n, const TokenBan& ban = {});

}  // namespace bg::cpu
