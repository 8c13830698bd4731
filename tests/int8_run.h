// One call of the CPU's integer matmul on fresh random inputs, with what its float64 references
// need: the weights (random_weights.h's realistic blocks, padded rows), x uniform in [-1, 1]
// with a padded stride, y's rows written into a NaN-filled buffer with a padded stride, and the
// activations as the kernel quantises them (tensor/qtypes/int8_act.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/int8_matmul.h"
#include "cpu/thread_pool.h"
#include "random_inputs.h"
#include "random_weights.h"

namespace bgtest {

struct Int8Run {
    HostMat W;
    int64_t M = 0, ldx = 0, ldy = 0;
    std::vector<float> x;   // [M][ldx]
    std::vector<float> y;   // [M][ldy], NaN where the call does not write
    std::vector<int8_t> q;  // [M][cols] the quantised activations
    std::vector<float> d;   // [M][cols / 32] their scales
    std::vector<float> out;  // [M][rows] y without the padding

    // q * d: the activations the integer arithmetic multiplies, in double.
    std::vector<double> dequantised_activations() const {
        std::vector<double> a(static_cast<size_t>(M * W.cols));
        for (int64_t t = 0; t < M; ++t)
            for (int64_t i = 0; i < W.cols; ++i)
                a[static_cast<size_t>(t * W.cols + i)] = static_cast<double>(q[static_cast<size_t>(t * W.cols + i)]) *
                                                         d[static_cast<size_t>(t * (W.cols / 32) + i / 32)];
        return a;
    }
};

inline Int8Run run_int8(bg::GgmlType type, int64_t rows, int64_t cols, int64_t M, std::mt19937& rng) {
    Int8Run r{random_mat(type, rows, cols, 5, rng), M, cols + 3, rows + 2, {}, {}, {}, {}, {}};
    r.x = uniform(rng, M * r.ldx, -1.0f, 1.0f);
    bg::cpu::ThreadPool pool(2);
    bg::cpu::Int8MatmulScratch scratch;
    const bg::MatView v{r.W.bytes.data(), type, cols, rows, r.W.stride};
    r.y.assign(static_cast<size_t>(M * r.ldy), NAN);
    bg::cpu::matmul_int8(pool, scratch, v, r.x.data(), r.ldx, M, r.y.data(), r.ldy);
    r.q.resize(static_cast<size_t>(M * cols));
    r.d.resize(static_cast<size_t>(M * cols / 32));
    bg::cpu::quantize_int8_rows(r.x.data(), r.ldx, M, cols, r.q.data(), r.d.data());
    r.out.resize(static_cast<size_t>(M * rows));
    for (int64_t t = 0; t < M; ++t)
        for (int64_t i = 0; i < rows; ++i) r.out[static_cast<size_t>(t * rows + i)] = r.y[static_cast<size_t>(t * r.ldy + i)];
    return r;
}

}  // namespace bgtest
