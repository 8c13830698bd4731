// Random ggml-typed weight matrices with their exact float dequantisation, and the float64
// references and comparison the matmul tests share (tests/test_gpu_quant_matmul.cpp,
// tests/test_int8_matmul.cpp, tests/test_gpu_int8_matmul.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/types.h"
#include "tensor/ggml_types.h"

namespace bgtest {

using bg::GgmlType;
using bg::dequantize_row;
using bg::fp32_to_bf16;
using bg::fp32_to_fp16;
using bg::row_bytes;

// A host weight matrix: rows of `cols` elements, row_stride bytes apart, padding bytes random
// (they must never matter), plus its exact float dequantisation.
struct HostMat {
    GgmlType type;
    int64_t rows, cols;
    uint64_t stride;
    std::vector<uint8_t> bytes;
    std::vector<float> deq;  // [rows][cols]
};

// Where the FP16 super-scales of the 256-weight types sit in a block (ggml-common.h's structs):
// d, and dmin (-1: none).
inline void super_scale_offsets(GgmlType t, int* d, int* dmin) {
    switch (t) {
        case GgmlType::Q2_K: *d = 80, *dmin = 82; return;
        case GgmlType::Q3_K: *d = 108, *dmin = -1; return;
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: *d = 0, *dmin = 2; return;
        case GgmlType::Q6_K: *d = 208, *dmin = -1; return;
        case GgmlType::IQ2_XXS: *d = 0, *dmin = -1; return;
        default: *d = *dmin = -1; return;
    }
}

// Realistic blocks: MXFP4 scale bytes 118..124 (2^-9..2^-3, so |w| up to 6/8), uniform codes;
// Q8_0 scales 1e-3..1e-2 (as f16), uniform int8 in [-127, 127]; BF16 N(0, 0.05) rounded; the
// 256-weight types (cols a multiple of 256) random sub-scales and codes under super-scales d and
// dmin of 1e-3..1e-2 (as f16).
inline HostMat random_mat(GgmlType t, int64_t rows, int64_t cols, uint64_t pad, std::mt19937& rng) {
    HostMat m{t, rows, cols, row_bytes(t, cols) + pad, {}, {}};
    m.bytes.resize(m.stride * rows);
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
    std::uniform_int_distribution<int> e8(118, 124), q8(-127, 127);
    std::uniform_real_distribution<float> d8(1e-3f, 1e-2f);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    int off_d = -1, off_dmin = -1;
    super_scale_offsets(t, &off_d, &off_dmin);
    if (off_d >= 0) {
        const int64_t block_bytes = bg::type_traits(t).block_bytes;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t b = 0; b < cols / 256; ++b) {
                uint8_t* blk = m.bytes.data() + r * m.stride + b * block_bytes;
                for (int off : {off_d, off_dmin}) {
                    if (off < 0) continue;
                    const uint16_t h = fp32_to_fp16(d8(rng));
                    std::memcpy(blk + off, &h, 2);
                }
            }
    }
    for (int64_t r = 0; r < rows && off_d < 0; ++r) {
        uint8_t* row = m.bytes.data() + r * m.stride;
        for (int64_t b = 0; b < cols / 32; ++b) {
            if (t == GgmlType::MXFP4) {
                row[b * 17] = static_cast<uint8_t>(e8(rng));
            } else if (t == GgmlType::Q8_0) {
                uint8_t* blk = row + b * 34;
                const uint16_t d = fp32_to_fp16(d8(rng));
                std::memcpy(blk, &d, 2);
                for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q8(rng)));
            } else {
                for (int i = 0; i < 32; ++i) {
                    const uint16_t h = fp32_to_bf16(nd(rng));
                    std::memcpy(row + (b * 32 + i) * 2, &h, 2);
                }
            }
        }
    }
    m.deq.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) dequantize_row(t, m.bytes.data() + r * m.stride, m.deq.data() + r * cols, cols);
    return m;
}

// y[t][r] = sum_i W[r][i] x[t][i] in double.
inline std::vector<double> ref_matmul(const HostMat& W, const std::vector<float>& x, int64_t ldx, int64_t M) {
    std::vector<double> y(static_cast<size_t>(M * W.rows));
    for (int64_t t = 0; t < M; ++t) {
        const float* xt = x.data() + t * ldx;
        for (int64_t r = 0; r < W.rows; ++r) {
            const float* w = W.deq.data() + r * W.cols;
            double s = 0;
            for (int64_t i = 0; i < W.cols; ++i) s += static_cast<double>(w[i]) * xt[i];
            y[t * W.rows + r] = s;
        }
    }
    return y;
}

inline double swiglu_ref(double g, double u, double limit, bg::SwigluClamp form) {
    auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
    if (limit <= bg::kSwigluNoClamp) return silu(g) * u;
    const double uc = std::min(limit, std::max(-limit, u));
    if (form == bg::SwigluClamp::kLlamaCpp) return std::min(silu(g), limit) * uc;
    return silu(std::min(g, limit)) * uc;
}

// Relative L2 error and a description of the first bad element (NaN = not written).
struct Cmp {
    double rel = 0, ref_norm = 0;
    int64_t bad = -1;  // first non-finite output
};
inline Cmp compare(const std::vector<float>& out, const std::vector<double>& ref) {
    Cmp c;
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(out[i])) {
            if (c.bad < 0) c.bad = static_cast<int64_t>(i);
            continue;
        }
        e2 += (out[i] - ref[i]) * (out[i] - ref[i]);
        r2 += ref[i] * ref[i];
    }
    c.ref_norm = std::sqrt(r2);
    c.rel = r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
    return c;
}

// An expert's tokens as the forward hands them over: T rows of x and of y (strided); the expert
// reads M of them (a random subset in random order when gathered) and writes M others.
struct ExpertTokens {
    int64_t T = 0, ldx = 0, ldy = 0;
    std::vector<float> x, y0;              // [T][ldx], [T][ldy]: y's rows before the call
    std::vector<int32_t> rows, out_rows;   // [M]
};
inline ExpertTokens expert_tokens(int64_t E, int64_t M, bool gathered, std::mt19937& rng) {
    ExpertTokens t;
    t.T = gathered ? M + 7 : M;
    t.ldx = E + 4;
    t.ldy = E + 2;
    std::uniform_real_distribution<float> ux(-1.0f, 1.0f), uy(-0.5f, 0.5f);
    t.x.resize(static_cast<size_t>(t.T * t.ldx));
    for (auto& v : t.x) v = ux(rng);
    t.y0.resize(static_cast<size_t>(t.T * t.ldy));
    for (auto& v : t.y0) v = uy(rng);
    t.rows.resize(static_cast<size_t>(t.T));
    t.out_rows.resize(static_cast<size_t>(t.T));
    for (int64_t i = 0; i < t.T; ++i) t.rows[i] = t.out_rows[i] = static_cast<int32_t>(i);
    if (gathered) {
        std::shuffle(t.rows.begin(), t.rows.end(), rng);
        std::shuffle(t.out_rows.begin(), t.out_rows.end(), rng);
    }
    t.rows.resize(static_cast<size_t>(M));
    t.out_rows.resize(static_cast<size_t>(M));
    return t;
}

}  // namespace bgtest
