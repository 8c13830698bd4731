// A device copy of a host vector for the GPU tests; aborts (cuda/check.cuh) on any CUDA failure.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/check.cuh"

namespace bgtest {

template <typename T>
class Dev {
public:
    explicit Dev(size_t n) : n_(n) {
        if (n_) BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)));
    }
    explicit Dev(const std::vector<T>& h) : Dev(h.size()) { upload(h); }
    ~Dev() {
        if (p_) cudaFree(p_);
    }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;

    T* get() { return p_; }
    const T* get() const { return p_; }
    void upload(const std::vector<T>& h) {
        EXPECT_EQ(h.size(), n_);
        if (n_) BG_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> h(n_);
        if (n_) BG_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }

private:
    T* p_ = nullptr;
    size_t n_ = 0;
};

}  // namespace bgtest
