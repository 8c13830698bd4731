#include "tensor/kquant_quantizers.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/ggml_types.h"
#include "tensor/qtypes/iq2_xxs.h"
#include "tensor/qtypes/k_scales.h"
#include "tensor/qtypes/q2_k.h"
#include "tensor/qtypes/q3_k.h"
#include "tensor/qtypes/q4_k.h"
#include "tensor/qtypes/q5_k.h"
#include "tensor/qtypes/q6_k.h"

namespace bg {

namespace {

constexpr int kQK = 256;
// Inputs beyond this magnitude saturate: their scales would not fit FP16 anyway, and keeping
// every intermediate (ranges, squares of 32 values) finite keeps the searches well defined.
constexpr float kInputLimit = 1e15f;
constexpr float kHalfMax = 65504.0f;

// The block's inputs with NaN as 0 and magnitudes clamped.
void sanitize(const float* x, float* out) {
    for (int i = 0; i < kQK; ++i) {
        const float v = x[i];
        out[i] = v != v ? 0.0f : std::fmin(kInputLimit, std::fmax(-kInputLimit, v));
    }
}

// round(v) (half away from zero) clamped to [lo, hi]; clamping first keeps the conversion
// defined for any float (NaN goes to lo). Comparisons, not std::fmin / std::lround: those are
// library calls per weight without -ffast-math.
inline int round_clamp(float v, int lo, int hi) {
    const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
    v = v > flo ? v : flo;
    v = v < fhi ? v : fhi;
    return static_cast<int>(v + (v < 0 ? -0.5f : 0.5f));
}

// FP16 bits of v clamped to the finite range, and the float the decoder will see.
inline uint16_t half_of(float v, float* decoded) {
    const uint16_t h = fp32_to_fp16(std::fmin(kHalfMax, std::fmax(-kHalfMax, v)));
    *decoded = fp16_to_fp32(h);
    return h;
}
inline void put_half(uint8_t* p, uint16_t h) {
    p[0] = static_cast<uint8_t>(h & 0xFF);
    p[1] = static_cast<uint8_t>(h >> 8);
}

// ---------------------------------------------------------------------------------------------
// Affine sub-blocks: value = s * q - m, q in 0..qmax, s >= 0, m >= 0.

struct Affine {
    float s = 0, m = 0;
};

// One pass over a sub-block with the codes a assigns: a's squared error, and the least-squares
// (s, m) for those codes with m kept >= 0 (a itself where the fit degenerates).
float affine_pass(const float* x, int n, int qmax, Affine a, Affine* refit) {
    const float inv = a.s > 0 ? 1.0f / a.s : 0.0f;
    float err = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
        const float q = static_cast<float>(round_clamp((x[i] + a.m) * inv, 0, qmax));
        const float r = a.s * q - a.m - x[i];
        err += r * r;
        sq += q;
        sqq += q * q;
        sx += x[i];
        sqx += q * x[i];
    }
    *refit = a;
    const float nf = static_cast<float>(n), det = nf * sqq - sq * sq;
    if (det > 0) {
        Affine r{(nf * sqx - sq * sx) / det, 0};
        r.m = -(sx - r.s * sq) / nf;
        if (r.m < 0) {  // the offset would be positive, which the format cannot hold
            r.m = 0;
            r.s = sqx / sqq;
        }
        if (r.s > 0) *refit = r;
    }
    return err;
}

Affine fit_affine(const float* x, int n, int qmax) {
    float lo = 0, hi = x[0];
    for (int i = 0; i < n; ++i) {
        lo = std::fmin(lo, x[i]);
        hi = std::fmax(hi, x[i]);
    }
    Affine best{0, -lo};
    if (!(hi > lo)) return best;
    float best_e = INFINITY;
    // Ranges a little narrower and wider than [lo, hi], each with its least-squares refit.
    for (const float k : {-1.0f, 0.0f, 1.0f, 2.5f}) {
        const Affine a{(hi - lo) / (static_cast<float>(qmax) + 0.125f * k), -lo};
        Affine r, unused;
        const float e = affine_pass(x, n, qmax, a, &r);
        const float er = affine_pass(x, n, qmax, r, &unused);
        if (e < best_e) best_e = e, best = a;
        if (er < best_e) best_e = er, best = r;
    }
    return best;
}

// Super-scales for values v[0..n) >= 0 quantised to 0..lmax: the FP16 scale and the levels.
void quantize_levels(const float* v, int n, int lmax, uint8_t* out, float* scale, uint16_t* bits) {
    float vmax = 0;
    for (int i = 0; i < n; ++i) vmax = std::fmax(vmax, v[i]);
    *bits = half_of(vmax / static_cast<float>(lmax), scale);
    for (int i = 0; i < n; ++i)
        out[i] = static_cast<uint8_t>(*scale > 0 ? round_clamp(v[i] / *scale, 0, lmax) : 0);
}

// Code of one weight of an affine sub-block with its final (rounded) scale and min.
inline int affine_code(float x, float d, float m, int qmax) { return d > 0 ? round_clamp((x + m) / d, 0, qmax) : 0; }

// ---------------------------------------------------------------------------------------------
// Signed sub-blocks: value = s * q, q in qmin..qmax (qmin = -qmax - 1).

// One pass with scale s: its squared error and the least-squares scale for its codes.
float signed_pass(const float* x, int n, int qmin, int qmax, float s, float* refit) {
    const float inv = s != 0 ? 1.0f / s : 0.0f;
    float err = 0, sqx = 0, sqq = 0;
    for (int i = 0; i < n; ++i) {
        const float q = static_cast<float>(round_clamp(x[i] * inv, qmin, qmax));
        const float r = s * q - x[i];
        err += r * r;
        sqx += q * x[i];
        sqq += q * q;
    }
    *refit = sqq > 0 ? sqx / sqq : s;
    return err;
}

float fit_signed(const float* x, int n, int qmin, int qmax) {
    float vmax = 0;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
    if (vmax == 0) return 0;
    // The largest magnitude on the long side of the range (vmax = s * qmin), or a little inside.
    float best = 0, best_e = INFINITY;
    for (const float k : {0.0f, 0.3f, 0.7f}) {
        const float s = vmax / (static_cast<float>(qmin) - k);
        float r, unused;
        const float e = signed_pass(x, n, qmin, qmax, s, &r);
        const float er = signed_pass(x, n, qmin, qmax, r, &unused);
        if (e < best_e) best_e = e, best = s;
        if (er < best_e) best_e = er, best = r;
    }
    return best;
}

// Signed sub-block scales s[0..n) quantised to lmin..lmax (lmin = -lmax - 1) against one FP16
// scale that puts the largest magnitude on lmin.
void quantize_signed_levels(const float* s, int n, int lmin, int lmax, int* out, float* scale, uint16_t* bits) {
    float smax = 0;
    for (int i = 0; i < n; ++i)
        if (std::fabs(s[i]) > std::fabs(smax)) smax = s[i];
    *bits = half_of(smax / static_cast<float>(lmin), scale);
    for (int i = 0; i < n; ++i) out[i] = *scale != 0 ? round_clamp(s[i] / *scale, lmin, lmax) : 0;
}

// ---------------------------------------------------------------------------------------------
// Q2_K, Q4_K, Q5_K

// The n groups of 256 / n weights of a block, each fitted to s * q - m with q in 0..qmax; the n
// scales and the n mins quantised to levels 0..levels (ls, lm) under FP16 super-scales written
// at d_at and dmin_at.
template <int n>
void fit_affine_groups(const float* x, int qmax, int levels, uint8_t* d_at, uint8_t* dmin_at, uint8_t (&ls)[n],
                       uint8_t (&lm)[n]) {
    constexpr int width = 256 / n;
    float s[n], m[n];
    for (int g = 0; g < n; ++g) {
        const Affine a = fit_affine(x + width * g, width, qmax);
        s[g] = a.s;
        m[g] = a.m;
    }
    float d, dmin;
    uint16_t hd, hm;
    quantize_levels(s, n, levels, ls, &d, &hd);
    quantize_levels(m, n, levels, lm, &dmin, &hm);
    put_half(d_at, hd);
    put_half(dmin_at, hm);
}

void quantize_q2_k_block(const float* x, uint8_t* blk) {
    using T = qtypes::Q2_K;
    std::memset(blk, 0, T::kBlockBytes);
    uint8_t ls[16], lm[16];
    fit_affine_groups(x, 3, 15, blk + T::kOffD, blk + T::kOffDmin, ls, lm);
    for (int g = 0; g < 16; ++g) blk[T::kOffScales + g] = static_cast<uint8_t>(ls[g] | (lm[g] << 4));
    for (int g = 0; g < 16; ++g) {
        float dg, mg;
        T::sub_scale(blk, g, &dg, &mg);
        for (int k = 0; k < 16; ++k) {
            const int i = 16 * g + k;
            const int q = affine_code(x[i], dg, mg, 3);
            blk[T::kOffQs + 32 * (i / 128) + i % 32] |= static_cast<uint8_t>(q << (2 * ((i % 128) / 32)));
        }
    }
}

// Q4_K and Q5_K: eight 32-weight sub-blocks, 6-bit scales and mins; Q5_K adds a fifth code bit.
template <int kBits>
void quantize_q45_k_block(const float* x, uint8_t* blk) {
    using T = std::conditional_t<kBits == 4, qtypes::Q4_K, qtypes::Q5_K>;
    constexpr int qmax = (1 << kBits) - 1;
    std::memset(blk, 0, T::kBlockBytes);
    uint8_t ls[8], lm[8];
    fit_affine_groups(x, qmax, 63, blk + T::kOffD, blk + T::kOffDmin, ls, lm);
    qtypes::k_pack_scale_min(ls, lm, blk + T::kOffScales);
    for (int j = 0; j < 8; ++j) {
        float dj, mj;
        T::sub_scale(blk, 2 * j, &dj, &mj);
        for (int k = 0; k < 32; ++k) {
            const int i = 32 * j + k;
            const int q = affine_code(x[i], dj, mj, qmax);
            blk[T::kOffQs + 32 * (i / 64) + i % 32] |= static_cast<uint8_t>((q & 0x0F) << (4 * (j & 1)));
            if constexpr (kBits == 5) blk[qtypes::Q5_K::kOffQh + i % 32] |= static_cast<uint8_t>((q >> 4) << j);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q3_K, Q6_K

void quantize_q3_k_block(const float* x, uint8_t* blk) {
    using T = qtypes::Q3_K;
    std::memset(blk, 0, T::kBlockBytes);
    float s[16];
    for (int g = 0; g < 16; ++g) s[g] = fit_signed(x + 16 * g, 16, -4, 3);
    int l[16];
    float d;
    uint16_t hd;
    quantize_signed_levels(s, 16, -32, 31, l, &d, &hd);
    put_half(blk + T::kOffD, hd);
    for (int g = 0; g < 16; ++g) {
        const int u = l[g] + 32;  // stored 0..63
        blk[T::kOffScales + g % 8] |= static_cast<uint8_t>((u & 0x0F) << (4 * (g / 8)));
        blk[T::kOffScales + 8 + g % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (g / 4)));
    }
    for (int g = 0; g < 16; ++g) {
        float dg, unused;
        T::sub_scale(blk, g, &dg, &unused);
        for (int k = 0; k < 16; ++k) {
            const int i = 16 * g + k, j = (i % 128) / 32;
            const int q = dg != 0 ? round_clamp(x[i] / dg, -4, 3) : 0;
            const int u = q + 4;  // 0..7: the high bit set means q = low, clear means q = low - 4
            blk[T::kOffQs + 32 * (i / 128) + i % 32] |= static_cast<uint8_t>((u & 3) << (2 * j));
            if (u >= 4) blk[T::kOffHmask + i % 32] |= static_cast<uint8_t>(1 << (4 * (i / 128) + j));
        }
    }
}

void quantize_q6_k_block(const float* x, uint8_t* blk) {
    using T = qtypes::Q6_K;
    std::memset(blk, 0, T::kBlockBytes);
    float s[16];
    for (int g = 0; g < 16; ++g) s[g] = fit_signed(x + 16 * g, 16, -32, 31);
    int l[16];
    float d;
    uint16_t hd;
    quantize_signed_levels(s, 16, -128, 127, l, &d, &hd);
    put_half(blk + T::kOffD, hd);
    for (int g = 0; g < 16; ++g) blk[T::kOffScales + g] = static_cast<uint8_t>(static_cast<int8_t>(l[g]));
    for (int g = 0; g < 16; ++g) {
        float dg, unused;
        T::sub_scale(blk, g, &dg, &unused);
        for (int k = 0; k < 16; ++k) {
            const int i = 16 * g + k, h = i / 128, kq = (i % 128) / 32, ll = i % 32;
            const int u = (dg != 0 ? round_clamp(x[i] / dg, -32, 31) : 0) + 32;  // 0..63
            blk[T::kOffQl + 64 * h + 32 * (kq % 2) + ll] |= static_cast<uint8_t>((u & 0x0F) << (4 * (kq / 2)));
            blk[T::kOffQh + 32 * h + ll] |= static_cast<uint8_t>((u >> 4) << (2 * kq));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// IQ2_XXS

// The grid as coordinate levels 0, 1, 2 (magnitudes 8, 25, 43), and each point's first and
// last four levels as base-3 numbers (0..80), built once.
struct GridLevels {
    uint8_t level[256][8];
    uint8_t lo[256], hi[256];
    GridLevels() {
        for (int k = 0; k < 256; ++k) {
            int l = 0, h = 0;
            for (int j = 0; j < 8; ++j) {
                const int v = static_cast<int>((qtypes::kIq2xxsGrid[k] >> (8 * j)) & 0xFF);
                level[k][j] = static_cast<uint8_t>(v == 8 ? 0 : v == 25 ? 1 : 2);
            }
            for (int j = 3; j >= 0; --j) l = 3 * l + level[k][j], h = 3 * h + level[k][j + 4];
            lo[k] = static_cast<uint8_t>(l);
            hi[k] = static_cast<uint8_t>(h);
        }
    }
};
const GridLevels& grid_levels() {
    static const GridLevels g;
    return g;
}
constexpr float kLevelMag[3] = {8.0f, 25.0f, 43.0f};

struct RunChoice {
    int index = 0;   // grid entry
    int signs = 0;   // eight sign bits, an even number set
    float err = 0;   // squared error at the scale searched
};

// Over the 81 level patterns of four coordinates: the summed squared error (sum) and the
// cheapest sign flip (flip, at coordinate at[] of the four).
struct QuadTable {
    float sum[81], flip[81];
    uint8_t at[81];
};
void quad_table(const float e[4][3], const float f[4][3], QuadTable* t) {
    int c = 0;
    for (int v3 = 0; v3 < 3; ++v3)
        for (int v2 = 0; v2 < 3; ++v2)
            for (int v1 = 0; v1 < 3; ++v1)
                for (int v0 = 0; v0 < 3; ++v0, ++c) {
                    t->sum[c] = (e[0][v0] + e[1][v1]) + (e[2][v2] + e[3][v3]);
                    const float f01 = f[0][v0] <= f[1][v1] ? f[0][v0] : f[1][v1];
                    const float f23 = f[2][v2] <= f[3][v3] ? f[2][v2] : f[3][v3];
                    const int j01 = f[0][v0] <= f[1][v1] ? 0 : 1, j23 = f[2][v2] <= f[3][v3] ? 2 : 3;
                    t->flip[c] = f01 <= f23 ? f01 : f23;
                    t->at[c] = static_cast<uint8_t>(f01 <= f23 ? j01 : j23);
                }
}

// The best grid point and signs for 8 values at scale db (> 0). The error splits over the two
// halves of the point, so it is two table reads a point; an odd number of negative inputs costs
// the cheapest flip to the other sign (4 |x| m for weight x put at -sign(x) m).
RunChoice best_run(const float* x, float db) {
    const GridLevels& G = grid_levels();
    float e[8][3], f[8][3];
    int negs = 0;
    for (int j = 0; j < 8; ++j) {
        const float a = std::fabs(x[j]);
        for (int v = 0; v < 3; ++v) {
            const float m = db * kLevelMag[v];
            e[j][v] = (a - m) * (a - m);
            f[j][v] = 4.0f * a * m;
        }
        if (x[j] < 0) negs |= 1 << j;
    }
    const bool odd = __builtin_popcount(static_cast<unsigned>(negs)) & 1;
    QuadTable lo, hi;
    quad_table(e, f, &lo);
    quad_table(e + 4, f + 4, &hi);
    RunChoice best;
    best.err = INFINITY;
    if (!odd) {
        for (int k = 0; k < 256; ++k) {
            const float err = lo.sum[G.lo[k]] + hi.sum[G.hi[k]];
            if (err < best.err) best.err = err, best.index = k;
        }
        best.signs = negs;
        return best;
    }
    for (int k = 0; k < 256; ++k) {
        const int l = G.lo[k], h = G.hi[k];
        const float err = lo.sum[l] + hi.sum[h] + (lo.flip[l] <= hi.flip[h] ? lo.flip[l] : hi.flip[h]);
        if (err < best.err) best.err = err, best.index = k;
    }
    const int l = G.lo[best.index], h = G.hi[best.index];
    best.signs = negs ^ (1 << (lo.flip[l] <= hi.flip[h] ? lo.at[l] : 4 + hi.at[h]));
    return best;
}

// A first scale for 32 values, before any grid search: with the largest magnitude on each of
// the three levels in turn, every magnitude on its nearest level (grid or not), the
// least-squares scale for those levels; the one of the three with the least error. The grid
// search then runs once, at the scale the block stores.
float first_scale(const float* x, float amax) {
    float best = amax / kLevelMag[2], best_e = INFINITY;
    for (const float top : kLevelMag) {
        const float inv = top / amax;
        float sxg = 0, sgg = 0, sxx = 0;
        for (int i = 0; i < 32; ++i) {
            const float ax = std::fabs(x[i]), a = ax * inv;
            const float g = a < 16.5f ? kLevelMag[0] : a < 34.0f ? kLevelMag[1] : kLevelMag[2];
            sxg += ax * g;
            sgg += g * g;
            sxx += ax * ax;
        }
        const float db = sxg / sgg, e = sxx - db * sxg;  // the residual of the fit
        if (e < best_e) best_e = e, best = db;
    }
    return best;
}

void quantize_iq2_xxs_block(const float* x, uint8_t* blk) {
    using T = qtypes::Iq2_XXS;
    std::memset(blk, 0, T::kBlockBytes);
    float db[8];
    for (int g = 0; g < 8; ++g) {
        const float* xg = x + 32 * g;
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xg[i]));
        db[g] = amax > 0 ? first_scale(xg, amax) : 0.0f;
    }
    // db = d * (0.5 + ls) / 4 with ls in 0..15: d puts the largest group scale at ls = 15.
    float dmax = 0;
    for (float v : db) dmax = std::fmax(dmax, v);
    float d;
    put_half(blk + T::kOffD, half_of(dmax / (15.5f * 0.25f), &d));
    for (int g = 0; g < 8; ++g) {
        uint8_t* grp = blk + T::kOffGroups + T::kGroupBytes * g;
        const int ls = d > 0 ? round_clamp(db[g] / (0.25f * d) - 0.5f, 0, 15) : 0;
        // The points again at the scale exactly as the decoder computes it.
        const float dbq = qtypes::mul_rn(qtypes::mul_rn(d, 0.5f + static_cast<float>(ls)), 0.25f);
        uint32_t w = static_cast<uint32_t>(ls) << 28;
        for (int r = 0; r < 4; ++r) {
            const RunChoice c = dbq > 0 ? best_run(x + 32 * g + 8 * r, dbq) : RunChoice{};
            grp[r] = static_cast<uint8_t>(c.index);
            w |= static_cast<uint32_t>(c.signs & 127) << (7 * r);
        }
        for (int b = 0; b < 4; ++b) grp[4 + b] = static_cast<uint8_t>(w >> (8 * b));
    }
}

template <void (*Block)(const float*, uint8_t*), int kBytes>
void quantize_blocks(const float* src, uint8_t* dst, int64_t nb) {
    float x[kQK];
    for (int64_t b = 0; b < nb; ++b) {
        sanitize(src + b * kQK, x);
        Block(x, dst + b * kBytes);
    }
}

}  // namespace

void quantize_q2_k(const float* src, uint8_t* dst, int64_t nb) {
    quantize_blocks<quantize_q2_k_block, qtypes::Q2_K::kBlockBytes>(src, dst, nb);
}
void quantize_q3_k(const float* src, uint8_t* dst, int64_t nb) {
    quantize_blocks<quantize_q3_k_block, qtypes::Q3_K::kBlockBytes>(src, dst, nb);
}
void quantize_q4_k(const float* src, uint8_t* dst, int64_t nb) {
    quantize_blocks<quantize_q45_k_block<4>, qtypes::Q4_K::kBlockBytes>(src, dst, nb);
}
void quantize_q5_k(const float* src, uint8_t* dst, int64_t nb) {
    quantize_blocks<quantize_q45_k_block<5>, qtypes::Q5_K::kBlockBytes>(src, dst, nb);
}
void quantize_q6_k(const float* src, uint8_t* dst, int64_t nb) {
    quantize_blocks<quantize_q6_k_block, qtypes::Q6_K::kBlockBytes>(src, dst, nb);
}
void quantize_iq2_xxs(const float* src, uint8_t* dst, int64_t nb) {
    quantize_blocks<quantize_iq2_xxs_block, qtypes::Iq2_XXS::kBlockBytes>(src, dst, nb);
}

}  // namespace bg
