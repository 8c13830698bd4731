// Fuzz target: the block decoders and quantisers of the quantized weight types (Q8_0, MXFP4, and
// the 256-weight types Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS) on arbitrary bytes.
//
// Input: byte 0 picks the type; the rest is read twice, as that type's blocks (whole blocks only,
// at most 16) and as float32 values (cycled to fill 256 or more, at most 512) to quantise.
// Decoding any bytes (FP16 scales that are NaN, inf or subnormal included) must not crash or trip
// a sanitizer, and the decoders must agree: dequantize_row, the int8 view (unpack: codes in the
// type's range, weight = d[h] * v - m[h] bit for bit, NaN as NaN), the runs the CUDA generic
// paths decode, and an int8 chunk partial within float rounding of its float64 value wherever
// the chunk's weights are finite and its terms far from overflow.
// Quantising any floats must give blocks that decode to finite values (256-weight types; Q8_0
// and MXFP4 carry an inf input into their scale by design, so for them only no crash).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fuzz_common.h"
#include "tensor/ggml_types.h"
#include "tensor/qtypes/all.h"
#include "tensor/qtypes/int8_act.h"

namespace {

using bg::GgmlType;
using bgfuzz::finding;

constexpr GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                               GgmlType::Q4_K, GgmlType::Q5_K,  GgmlType::Q6_K, GgmlType::IQ2_XXS};

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

// The int8 codes each type's unpack may give.
void code_range(GgmlType t, int* lo, int* hi) {
    switch (t) {
        case GgmlType::Q8_0: *lo = -128, *hi = 127; return;
        case GgmlType::MXFP4: *lo = -12, *hi = 12; return;
        case GgmlType::Q2_K: *lo = 0, *hi = 3; return;
        case GgmlType::Q3_K: *lo = -4, *hi = 3; return;
        case GgmlType::Q4_K: *lo = 0, *hi = 15; return;
        case GgmlType::Q5_K: *lo = 0, *hi = 31; return;
        case GgmlType::Q6_K: *lo = -32, *hi = 31; return;
        default: *lo = -43, *hi = 43; return;
    }
}

template <class T>
void check_blocks(GgmlType t, const uint8_t* blocks, int64_t nb) {
    const int64_t n = nb * T::kBlockWeights;
    std::vector<float> deq(static_cast<size_t>(n));
    bg::dequantize_row(t, blocks, deq.data(), n);
    int lo = 0, hi = 0;
    code_range(t, &lo, &hi);
    // Activations for the chunk partials: fixed, nonzero, both signs.
    float x[32];
    for (int i = 0; i < 32; ++i) x[i] = std::sin(0.7f * static_cast<float>(i) + 0.3f);
    int8_t q[32];
    int32_t qsum = 0;
    const float dx = bg::qtypes::quantize_act_block(x, q, &qsum);
    for (int64_t c = 0; c < n / 32; ++c) {
        int8_t v[32];
        float d[2], m[2];
        T::unpack(blocks, c, v, d, m);
        if (T::kSubK == 32 && !(same_float(d[0], d[1]) && same_float(m[0], m[1]))) finding("unpack", "halves differ");
        if (!T::kHasMin && !(m[0] == 0.0f && m[1] == 0.0f)) finding("unpack", "a min where the type has none");
        bool finite = true;
        int32_t isum[2] = {0, 0}, s[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {
            if (v[i] < lo || v[i] > hi) finding("unpack", "code out of the type's range");
            const float w = d[i / 16] * static_cast<float>(v[i]) - m[i / 16];
            const float want = deq[static_cast<size_t>(c * 32 + i)];
            if (!same_float(w, want)) finding("unpack", "weight differs from dequantize_row");
            finite = finite && std::isfinite(want);
            isum[i / 16] += v[i] * q[i];
            s[i / 16] += q[i];
        }
        if (s[0] + s[1] != qsum) finding("activations", "half sums do not add up to the block sum");
        // The partial against its float64 value, wherever the weights are finite and the terms
        // stay well inside float's range (scales near 2^127 overflow honestly).
        const float p = bg::qtypes::chunk_partial<T>(d, m, dx, isum, s);
        double exact = 0, mag = 0;
        for (int h = 0; h < 2; ++h) {
            const double a = static_cast<double>(d[h]) * dx * isum[h], b = static_cast<double>(m[h]) * dx * s[h];
            exact += a - b;
            mag += std::fabs(a) + std::fabs(b);
        }
        if (finite && mag < 1e37 && !(std::fabs(p - exact) <= 1e-6 * mag + 1e-40))
            finding("chunk_partial", "differs from its float64 value beyond float rounding");
    }
    if constexpr (T::kBlockWeights == 256) {
        for (int64_t b = 0; b < nb; ++b)
            for (int i = 0; i < 256; i += 4) {
                float run[4];
                T::decode(blocks + b * T::kBlockBytes, i, 4, run);
                for (int k = 0; k < 4; ++k)
                    if (!same_float(run[k], deq[static_cast<size_t>(b * 256 + i + k)]))
                        finding("decode", "a run differs from the block");
                if (!same_float(T::row_element(blocks, b * 256 + i), deq[static_cast<size_t>(b * 256 + i)]))
                    finding("row_element", "differs from the block");
            }
    }
}

template <class T>
void check_quantise(GgmlType t, const uint8_t* bytes, size_t size) {
    const size_t n_in = size / 4;
    const int64_t n = n_in <= 256 ? 256 : static_cast<int64_t>(std::min<size_t>(512, n_in / 256 * 256));
    std::vector<float> x(static_cast<size_t>(n), 0.0f);
    if (n_in > 0)
        for (int64_t i = 0; i < n; ++i) std::memcpy(&x[static_cast<size_t>(i)], bytes + 4 * (static_cast<size_t>(i) % n_in), 4);
    std::vector<uint8_t> qb(bg::row_bytes(t, n));
    bg::quantize_row(t, x.data(), qb.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    bg::dequantize_row(t, qb.data(), y.data(), n);
    if constexpr (T::kBlockWeights == 256) {
        for (float v : y)
            if (!std::isfinite(v)) finding("quantize_row", "a block that decodes to a non-finite value");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const GgmlType t = kTypes[data[0] % std::size(kTypes)];
    const uint8_t* payload = data + 1;
    const size_t len = size - 1;
    bg::qtypes::visit(t, [&](auto traits) {
        using T = decltype(traits);
        const int64_t nb = std::min<int64_t>(16, static_cast<int64_t>(len) / T::kBlockBytes);
        if (nb > 0) {
            // A copy of exactly the blocks, so a read past them is a sanitizer report.
            const std::vector<uint8_t> blocks(payload, payload + nb * T::kBlockBytes);
            check_blocks<T>(t, blocks.data(), nb);
        }
        check_quantise<T>(t, payload, len);
    });
    return 0;
}
