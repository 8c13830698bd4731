// A random host weight matrix (tests/random_weights.h) copied to the device, for the GPU matmul
// tests.
#pragma once

#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "device_buffer.h"
#include "random_weights.h"

namespace bgtest {

// The matrix on the device at byte offset `offset` of its allocation (offset != 0 tests the
// unaligned fallback).
struct DevMat {
    Dev<uint8_t> buf;
    bg::cuda::DeviceMat view;
    DevMat(const HostMat& h, int offset) : buf(h.bytes.size() + 16) {
        BG_CUDA_CHECK(cudaMemcpy(buf.get() + offset, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice));
        view = bg::cuda::DeviceMat{buf.get() + offset, h.type, h.cols, h.rows, h.stride};
    }
};

}  // namespace bgtest
