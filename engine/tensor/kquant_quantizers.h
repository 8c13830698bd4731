// Quantisers of our own for the 256-weight types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS), for
// make-model. They write valid ggml blocks (tensor/qtypes/<type>.h has each layout) that decode
// close to the input; they do not reproduce llama-quantize's bits (no importance matrix, simpler
// searches). Each takes nb blocks of 256 floats.
//   K-quants with a min (Q2_K, Q4_K, Q5_K): per sub-block an affine fit value = s * q - m (m >= 0),
//     searched over a few ranges with a least-squares refit; the sub-block scales and mins are
//     then quantised against FP16 super-scales, and the codes recomputed with the rounded ones.
//   Q3_K, Q6_K: per sub-block a signed scale with its largest magnitude on the code range's long
//     side (-4 of -4..3, -32 of -32..31), refined the same way, then quantised likewise.
//   IQ2_XXS: per 32 weights a scale (a least-squares fit on the three magnitude levels), quantised
//     to its 4 bits; then per run of 8 the grid point and signs (an even number of negatives,
//     ggml's ksigns rule) with the least squared error at that scale.
// Non-finite inputs give finite blocks (NaN counts as 0, infinities and huge values saturate).
#pragma once

#include <cstdint>

namespace bg {

void quantize_q2_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_q3_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_q4_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_q5_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_q6_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_iq2_xxs(const float* src, uint8_t* dst, int64_t nb);

}  // namespace bg
