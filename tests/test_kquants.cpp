// The 256-weight types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS) on the CPU:
//  - dequantize_row against a reference decoder written here from ggml's block definitions
//    (ggml-common.h's structs, ggml-quants.c's loops), not through the engine's traits: bit-equal
//    to ggml's float expressions, and within their rounding of the float64 value; on fresh random
//    blocks with realistic and extreme FP16 super-scales (max, min normal, subnormals, zero,
//    negative, inf, NaN) and all-ones code bytes;
//  - the traits' int8 view (unpack) rebuilds dequantize_row's values exactly, in range;
//  - the quantisers' round-trip error on fresh random rows;
//  - the CPU integer matmul against a float64 reference of its arithmetic, and the precise CPU
//    matmul against float64 dequantised weights, at M = 1, 3, 8, 16, 64 and odd row counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/types.h"
#include "cpu/int8_matmul.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "int8_run.h"
#include "random_inputs.h"
#include "random_weights.h"
#include "tensor/ggml_types.h"
#include "tensor/qtypes/all.h"
#include "tensor/qtypes/int8_act.h"
#include "util/check.h"

using namespace bg;

namespace {

constexpr GgmlType kTypes[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                               GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS};
constexpr int QK_K = 256;

// ggml-common.h's blocks, as plain structs (FP16 fields as their bits).
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
};
struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
struct block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
struct block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
struct block_iq2_xxs {
    uint16_t d;
    uint16_t qs[QK_K / 8];
};
static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144 &&
              sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210 && sizeof(block_iq2_xxs) == 66);

// ggml's ksigns_iq2xs (ggml-common.h), as data: the engine computes it by a rule.
constexpr uint8_t kSignsRef[128] = {
      0, 129, 130,   3, 132,   5,   6, 135, 136,   9,  10, 139,  12, 141, 142,  15,
    144,  17,  18, 147,  20, 149, 150,  23,  24, 153, 154,  27, 156,  29,  30, 159,
    160,  33,  34, 163,  36, 165, 166,  39,  40, 169, 170,  43, 172,  45,  46, 175,
     48, 177, 178,  51, 180,  53,  54, 183, 184,  57,  58, 187,  60, 189, 190,  63,
    192,  65,  66, 195,  68, 197, 198,  71,  72, 201, 202,  75, 204,  77,  78, 207,
     80, 209, 210,  83, 212,  85,  86, 215, 216,  89,  90, 219,  92, 221, 222,  95,
     96, 225, 226,  99, 228, 101, 102, 231, 232, 105, 106, 235, 108, 237, 238, 111,
    240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255,
};

// One reference weight: ggml's float expression, the float64 value, and the magnitude its
// float rounding is relative to (|scaled code| + |min|).
struct RefValue {
    float f;
    double exact, mag;
};
using Emit = std::function<void(float, double, double)>;

template <class B>
B load_block(const uint8_t* p) {
    B b;
    std::memcpy(&b, p, sizeof(B));
    return b;
}

void ref_q2_K(const uint8_t* p, const Emit& emit) {
    const block_q2_K x = load_block<block_q2_K>(p);
    const float d = fp16_to_fp32(x.d), min = fp16_to_fp32(x.dmin);
    const uint8_t* q = x.qs;
    int is = 0;
    for (int n = 0; n < QK_K; n += 128) {
        for (int j = 0, shift = 0; j < 4; ++j, shift += 2) {
            for (int half = 0; half < 2; ++half) {
                const uint8_t sc = x.scales[is++];
                const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) {
                    const int qv = (q[l + 16 * half] >> shift) & 3;
                    const double a = static_cast<double>(d) * (sc & 0xF) * qv, b = static_cast<double>(min) * (sc >> 4);
                    emit(dl * qv - ml, a - b, std::fabs(a) + std::fabs(b));
                }
            }
        }
        q += 32;
    }
}

void ref_q3_K(const uint8_t* p, const Emit& emit) {
    const block_q3_K x = load_block<block_q3_K>(p);
    const float d_all = fp16_to_fp32(x.d);
    uint32_t aux[4];
    std::memcpy(aux, x.scales, 12);
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, 16);
    const uint8_t* q = x.qs;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < QK_K; n += 128) {
        for (int j = 0, shift = 0; j < 4; ++j, shift += 2, m <<= 1) {
            for (int half = 0; half < 2; ++half) {
                const int sc = scales[is++] - 32;
                const float dl = d_all * sc;
                for (int l = 0; l < 16; ++l) {
                    const int qv = ((q[l + 16 * half] >> shift) & 3) - ((x.hmask[l + 16 * half] & m) ? 0 : 4);
                    const double a = static_cast<double>(d_all) * sc * qv;
                    emit(dl * qv, a, std::fabs(a));
                }
            }
        }
        q += 32;
    }
}

void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

// Q4_K and Q5_K: the same walk, Q5_K adding the fifth bit from qh.
template <class B, bool kFive>
void ref_q45_K(const uint8_t* p, const Emit& emit) {
    const B x = load_block<B>(p);
    const float d = fp16_to_fp32(x.d), min = fp16_to_fp32(x.dmin);
    const uint8_t* ql = x.qs;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
        for (int half = 0; half < 2; ++half) {
            uint8_t sc, mn;
            scale_min_k4(is + half, x.scales, &sc, &mn);
            const float d1 = d * sc, m1 = min * mn;
            for (int l = 0; l < 32; ++l) {
                int qv = half ? (ql[l] >> 4) : (ql[l] & 0xF);
                if constexpr (kFive) qv += (x.qh[l] & (half ? u2 : u1)) ? 16 : 0;
                const double a = static_cast<double>(d) * sc * qv, b = static_cast<double>(min) * mn;
                emit(d1 * qv - m1, a - b, std::fabs(a) + std::fabs(b));
            }
        }
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}

void ref_q6_K(const uint8_t* p, const Emit& emit) {
    const block_q6_K x = load_block<block_q6_K>(p);
    const float d = fp16_to_fp32(x.d);
    const uint8_t* ql = x.ql;
    const uint8_t* qh = x.qh;
    const int8_t* sc = x.scales;
    RefValue out[QK_K];
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q[4] = {((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32,
                              ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32,
                              ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
                              ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32};
            for (int k = 0; k < 4; ++k) {
                const double a = static_cast<double>(d) * sc[is + 2 * k] * q[k];
                out[n + l + 32 * k] = {d * sc[is + 2 * k] * q[k], a, std::fabs(a)};
            }
        }
        ql += 64;
        qh += 32;
        sc += 8;
    }
    for (const RefValue& v : out) emit(v.f, v.exact, v.mag);
}

void ref_iq2_xxs(const uint8_t* p, const Emit& emit) {
    const block_iq2_xxs x = load_block<block_iq2_xxs>(p);
    const float d = fp16_to_fp32(x.d);
    for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
        uint32_t aux32[2];
        std::memcpy(aux32, x.qs + 4 * ib32, 8);
        const uint8_t* aux8 = reinterpret_cast<const uint8_t*>(aux32);
        const uint32_t ls = aux32[1] >> 28;
        const float db = d * (0.5f + ls) * 0.25f;
        const double db64 = static_cast<double>(d) * (0.5 + ls) * 0.25;
        for (int l = 0; l < 4; ++l) {
            const uint64_t grid = qtypes::kIq2xxsGrid[aux8[l]];  // the format's table, as data
            const uint8_t signs = kSignsRef[(aux32[1] >> 7 * l) & 127];
            for (int j = 0; j < 8; ++j) {
                const int g = static_cast<int>((grid >> (8 * j)) & 0xFF);
                const bool neg = signs & (1u << j);
                const double a = db64 * g * (neg ? -1 : 1);
                emit(db * g * (neg ? -1.f : 1.f), a, std::fabs(a));
            }
        }
    }
}

// The reference values of one 256-weight block of type t.
std::vector<RefValue> ref_block(GgmlType t, const uint8_t* p) {
    std::vector<RefValue> v;
    v.reserve(QK_K);
    const Emit emit = [&](float f, double exact, double mag) { v.push_back({f, exact, mag}); };
    switch (t) {
        case GgmlType::Q2_K: ref_q2_K(p, emit); break;
        case GgmlType::Q3_K: ref_q3_K(p, emit); break;
        case GgmlType::Q4_K: ref_q45_K<block_q4_K, false>(p, emit); break;
        case GgmlType::Q5_K: ref_q45_K<block_q5_K, true>(p, emit); break;
        case GgmlType::Q6_K: ref_q6_K(p, emit); break;
        case GgmlType::IQ2_XXS: ref_iq2_xxs(p, emit); break;
        default: ADD_FAILURE() << "no reference for " << type_name(t);
    }
    EXPECT_EQ(v.size(), static_cast<size_t>(QK_K));
    return v;
}

int64_t block_bytes(GgmlType t) { return type_traits(t).block_bytes; }

// FP16 patterns at the edges: max, min normal, max and min subnormal, zero, -0, negative,
// infinities, NaNs.
constexpr uint16_t kExtremeHalves[] = {0x7BFF, 0x0400, 0x03FF, 0x0001, 0x0000, 0x8000, 0xFBFF,
                                       0x8001, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF};

enum class Fill { kRealistic, kExtremeScales, kAllOnes };

// nb random blocks of type t: every byte random, then the super-scales per the fill.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t nb, Fill fill, std::mt19937& rng) {
    std::vector<uint8_t> b(static_cast<size_t>(nb * block_bytes(t)));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<size_t> pick(0, std::size(kExtremeHalves) - 1);
    std::uniform_real_distribution<float> mag(-14.0f, 4.0f);
    for (auto& v : b) v = static_cast<uint8_t>(fill == Fill::kAllOnes ? 0xFF : byte(rng));
    int off_d = -1, off_dmin = -1;
    bgtest::super_scale_offsets(t, &off_d, &off_dmin);
    for (int64_t k = 0; k < nb; ++k)
        for (int off : {off_d, off_dmin}) {
            if (off < 0) continue;
            uint16_t h = fp32_to_fp16((byte(rng) & 1 ? -1.0f : 1.0f) * std::exp2(mag(rng)));
            if (fill == Fill::kExtremeScales) h = kExtremeHalves[pick(rng)];
            if (fill == Fill::kAllOnes) h = byte(rng) & 1 ? 0x7BFF : 0x3C00;  // max finite, 1
            std::memcpy(b.data() + k * block_bytes(t) + off, &h, 2);
        }
    return b;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

// dequantize_row of nb blocks against the reference, element by element.
void check_dequant(GgmlType t, const std::vector<uint8_t>& bytes, const char* what) {
    const int64_t nb = static_cast<int64_t>(bytes.size()) / block_bytes(t);
    std::vector<float> out(static_cast<size_t>(nb * QK_K), 12345.0f);
    dequantize_row(t, bytes.data(), out.data(), nb * QK_K);
    constexpr double u = 0x1p-24, tiny = 0x1p-149;
    for (int64_t b = 0; b < nb; ++b) {
        const std::vector<RefValue> ref = ref_block(t, bytes.data() + b * block_bytes(t));
        for (int i = 0; i < QK_K; ++i) {
            const float got = out[static_cast<size_t>(b * QK_K + i)];
            const RefValue& r = ref[static_cast<size_t>(i)];
            ASSERT_TRUE(same_float(got, r.f)) << type_name(t) << " " << what << " block " << b << " weight " << i
                                              << ": " << got << " against ggml's " << r.f;
            if (std::isfinite(r.exact) && std::isfinite(got))
                ASSERT_LE(std::fabs(got - r.exact), 4 * u * r.mag + 4 * tiny)
                    << type_name(t) << " " << what << " block " << b << " weight " << i;
            else
                ASSERT_FALSE(std::isfinite(got) && std::isfinite(r.f));
        }
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Type table

TEST(KQuants, TypeTable) {
    struct Row {
        GgmlType t;
        uint32_t id;
        const char* name;
        int64_t bytes;
    };
    for (const Row& r : {Row{GgmlType::Q2_K, 10, "q2_K", 84}, Row{GgmlType::Q3_K, 11, "q3_K", 110},
                         Row{GgmlType::Q4_K, 12, "q4_K", 144}, Row{GgmlType::Q5_K, 13, "q5_K", 176},
                         Row{GgmlType::Q6_K, 14, "q6_K", 210}, Row{GgmlType::IQ2_XXS, 16, "iq2_xxs", 66}}) {
        ASSERT_NE(type_traits(r.id), nullptr) << r.name;
        EXPECT_EQ(static_cast<uint32_t>(r.t), r.id);
        EXPECT_STREQ(type_name(r.t), r.name);
        EXPECT_EQ(type_traits(r.t).block_elems, 256);
        EXPECT_EQ(type_traits(r.t).block_bytes, r.bytes);
        EXPECT_EQ(parse_type_name(r.name), r.t);
        std::string upper = r.name, lower = r.name;
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        EXPECT_EQ(parse_type_name(upper), r.t);
        EXPECT_EQ(parse_type_name(lower), r.t);
        uint64_t rb = 0;
        EXPECT_TRUE(row_bytes_checked(r.t, 768, &rb));
        EXPECT_EQ(rb, 3u * static_cast<uint64_t>(r.bytes));
        EXPECT_FALSE(row_bytes_checked(r.t, 128, &rb));
        EXPECT_FALSE(row_bytes_checked(r.t, 288, &rb));
        EXPECT_TRUE(qtypes::int8_path_takes(r.t));
    }
    EXPECT_EQ(type_traits(15u), nullptr);  // q8_K: an intermediate type, never in a file
    EXPECT_THROW(parse_type_name("q4_1"), Error);
    EXPECT_THROW(parse_type_name("q4_K_M"), Error);  // a preset, not a type
}

TEST(KQuants, Iq2GridAndSignsAreGgmls) {
    // FNV-1a over the grid's bytes, computed from ggml-common.h's iq2xxs_grid.
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t v : qtypes::kIq2xxsGrid)
        for (int j = 0; j < 8; ++j) {
            h ^= (v >> (8 * j)) & 0xFF;
            h *= 0x100000001b3ull;
        }
    EXPECT_EQ(h, 0xbb4ee025b5ac6e8eull);
    EXPECT_EQ(qtypes::kIq2xxsGrid[0], 0x0808080808080808ull);
    EXPECT_EQ(qtypes::kIq2xxsGrid[1], 0x080808080808082bull);
    EXPECT_EQ(qtypes::kIq2xxsGrid[100], 0x08192b0808081908ull);
    EXPECT_EQ(qtypes::kIq2xxsGrid[200], 0x192b081908080808ull);
    EXPECT_EQ(qtypes::kIq2xxsGrid[255], 0x2b2b2b1908081908ull);
    for (uint32_t k = 0; k < 128; ++k) EXPECT_EQ(qtypes::iq2_signs(k), kSignsRef[k]) << k;
}

// ---------------------------------------------------------------------------------------------
// Dequantisation

TEST(KQuants, DequantMatchesGgmlOnRandomBlocks) {
    auto rng = bgtest::fresh_rng();
    for (GgmlType t : kTypes) {
        check_dequant(t, random_blocks(t, 48, Fill::kRealistic, rng), "realistic");
        if (HasFatalFailure()) return;
    }
}

TEST(KQuants, DequantMatchesGgmlAtExtremeScales) {
    auto rng = bgtest::fresh_rng();
    for (GgmlType t : kTypes) {
        check_dequant(t, random_blocks(t, 64, Fill::kExtremeScales, rng), "extreme scales");
        check_dequant(t, random_blocks(t, 8, Fill::kAllOnes, rng), "all-ones codes");
        if (HasFatalFailure()) return;
    }
}

// The K-quants whose traits describe where their codes and scale integers sit (what the AVX2 and
// AVX-512 kernels decode from): fn(t, traits) for each of kTypes, all five of which must be so.
template <class T>
concept DescribedKQuant = requires {
    T::chunk_planes(0);
    T::scale_int(0);
};
template <class Fn>
void for_each_described_kquant(Fn&& fn) {
    int checked = 0;
    for (GgmlType t : kTypes)
        qtypes::visit(t, [&](auto traits) {
            if constexpr (DescribedKQuant<decltype(traits)>) {
                fn(t, traits);
                ++checked;
            }
        });
    EXPECT_EQ(checked, 5);  // Q2_K .. Q6_K
}

// The traits' description of where a chunk's codes sit (chunk_planes, kHighAt, kCodeOffset) gives
// each weight's code as the traits' code() does, on random blocks, every chunk and weight of the
// five K-quants.
TEST(KQuants, ChunkPlanesGiveTheTraitsCodes) {
    auto rng = bgtest::fresh_rng();
    for_each_described_kquant([&](GgmlType t, auto traits) {
        using T = decltype(traits);
        const std::vector<uint8_t> b = random_blocks(t, 8, Fill::kRealistic, rng);
        for (int64_t blk = 0; blk < 8; ++blk) {
            const uint8_t* p = b.data() + blk * T::kBlockBytes;
            for (int k = 0; k < 8; ++k) {
                const qtypes::ChunkPlanes c = T::chunk_planes(k);
                ASSERT_GT(c.low.mask, 0);
                ASSERT_LE(c.low.offset + 32, T::kBlockBytes);
                ASSERT_EQ(c.high.mask > 0, T::kHighAt > 0);
                if (c.high.mask > 0) {
                    ASSERT_LE(c.high.offset + 32, T::kBlockBytes);
                }
                for (int i = 0; i < 32; ++i) {
                    int v = (p[c.low.offset + i] >> c.low.shift) & c.low.mask;
                    if (c.high.mask > 0) v |= ((p[c.high.offset + i] >> c.high.shift) & c.high.mask) << T::kHighAt;
                    ASSERT_EQ(v - T::kCodeOffset, T::code(p, 32 * k + i))
                        << type_name(t) << " block " << blk << " chunk " << k << " weight " << i;
                    ASSERT_GE(v, 0);
                    ASSERT_LE(v, 255);
                }
            }
        }
    });
}

// The traits' description of where their scale integers sit (kScaleBytes, scale_int, min_int)
// gives each group's scale and min as sub_ints does, on random blocks (extreme scales too), every
// group of the five K-quants.
TEST(KQuants, ScaleIntsGiveTheTraitsSubInts) {
    auto rng = bgtest::fresh_rng();
    for_each_described_kquant([&](GgmlType t, auto traits) {
        using T = decltype(traits);
        ASSERT_LE(T::kOffScales + T::kScaleBytes, T::kBlockBytes);
        for (Fill fill : {Fill::kRealistic, Fill::kExtremeScales}) {
            const std::vector<uint8_t> b = random_blocks(t, 16, fill, rng);
            for (int64_t blk = 0; blk < 16; ++blk) {
                const uint8_t* p = b.data() + blk * T::kBlockBytes;
                for (int g = 0; g < 256 / T::kSubK; ++g) {
                    int sc = 0, mn = 0;
                    T::sub_ints(p, g * (T::kSubK / 16), &sc, &mn);
                    const qtypes::ScaleInt f = T::scale_int(g);
                    ASSERT_LT(f.low.offset, T::kScaleBytes);
                    ASSERT_LT(f.high.offset, T::kScaleBytes);
                    ASSERT_EQ(qtypes::scale_int_of(p + T::kOffScales, f), sc)
                        << type_name(t) << " block " << blk << " group " << g;
                    if constexpr (T::kHasMin) {
                        ASSERT_EQ(qtypes::scale_int_of(p + T::kOffScales, T::min_int(g)), mn)
                            << type_name(t) << " block " << blk << " group " << g << " (min)";
                    } else {
                        ASSERT_EQ(mn, 0);
                    }
                }
            }
        }
    });
}

TEST(KQuants, DequantOfSeveralRowsIsPerBlock) {
    // A row of three blocks decodes as its blocks do, and writes exactly its 768 floats.
    auto rng = bgtest::fresh_rng();
    for (GgmlType t : kTypes) {
        const std::vector<uint8_t> b = random_blocks(t, 3, Fill::kRealistic, rng);
        std::vector<float> row(768 + 8, -7.0f), one(256);
        dequantize_row(t, b.data(), row.data(), 768);
        for (int k = 0; k < 3; ++k) {
            dequantize_row(t, b.data() + k * block_bytes(t), one.data(), 256);
            for (int i = 0; i < 256; ++i) ASSERT_TRUE(same_float(row[static_cast<size_t>(256 * k + i)], one[i]));
        }
        for (int i = 768; i < 776; ++i) EXPECT_EQ(row[static_cast<size_t>(i)], -7.0f);
    }
}

// ---------------------------------------------------------------------------------------------
// The traits: decode runs and the int8 view

TEST(KQuants, DecodeRunsMatchTheBlock) {
    // The CUDA generic paths decode 1 or 4 weights at a time; any run inside a 16-weight group
    // gives the block's values.
    auto rng = bgtest::fresh_rng();
    for (GgmlType t : kTypes) {
        const std::vector<uint8_t> b = random_blocks(t, 4, Fill::kExtremeScales, rng);
        std::vector<float> full(4 * 256);
        dequantize_row(t, b.data(), full.data(), 4 * 256);
        qtypes::visit(t, [&](auto traits) {
            using T = decltype(traits);
            if constexpr (T::kBlockWeights == 256) {
                for (int k = 0; k < 4; ++k)
                    for (int n : {1, 4, 16})
                        for (int i = 0; i < 256; i += n) {
                            float out[16];
                            T::decode(b.data() + k * T::kBlockBytes, i, n, out);
                            for (int j = 0; j < n; ++j)
                                ASSERT_TRUE(same_float(out[j], full[static_cast<size_t>(256 * k + i + j)]))
                                    << type_name(t) << " block " << k << " weight " << i + j << " run " << n;
                        }
            }
        });
    }
}

TEST(KQuants, UnpackRebuildsTheWeightsExactly) {
    auto rng = bgtest::fresh_rng();
    for (GgmlType t : kTypes) {
        for (Fill fill : {Fill::kRealistic, Fill::kExtremeScales, Fill::kAllOnes}) {
            const std::vector<uint8_t> b = random_blocks(t, 5, fill, rng);
            std::vector<float> full(5 * 256);
            dequantize_row(t, b.data(), full.data(), 5 * 256);
            qtypes::visit(t, [&](auto traits) {
                using T = decltype(traits);
                int vmin = 0, vmax = 0;
                switch (t) {
                    case GgmlType::Q2_K: vmin = 0, vmax = 3; break;
                    case GgmlType::Q3_K: vmin = -4, vmax = 3; break;
                    case GgmlType::Q4_K: vmin = 0, vmax = 15; break;
                    case GgmlType::Q5_K: vmin = 0, vmax = 31; break;
                    case GgmlType::Q6_K: vmin = -32, vmax = 31; break;
                    default: vmin = -43, vmax = 43; break;
                }
                for (int64_t c = 0; c < 5 * 8; ++c) {
                    int8_t v[32];
                    float d[2], m[2];
                    T::unpack(b.data(), c, v, d, m);
                    if (T::kSubK == 32) {
                        ASSERT_TRUE(same_float(d[0], d[1]) && same_float(m[0], m[1])) << type_name(t);
                    }
                    if (!T::kHasMin) {
                        ASSERT_TRUE(m[0] == 0.0f && m[1] == 0.0f) << type_name(t);
                    }
                    for (int i = 0; i < 32; ++i) {
                        ASSERT_GE(v[i], vmin) << type_name(t);
                        ASSERT_LE(v[i], vmax) << type_name(t);
                        if (t == GgmlType::IQ2_XXS) {
                            const int a = std::abs(v[i]);
                            ASSERT_TRUE(a == 8 || a == 25 || a == 43) << int(v[i]);
                        }
                        const float w = d[i / 16] * static_cast<float>(v[i]) - m[i / 16];
                        ASSERT_TRUE(same_float(w, full[static_cast<size_t>(c * 32 + i)]))
                            << type_name(t) << " chunk " << c << " weight " << i << ": " << w << " against "
                            << full[static_cast<size_t>(c * 32 + i)];
                    }
                }
            });
        }
    }
}

TEST(KQuants, Int8ViewOfAnyMxfp4OrQ8_0BlockRebuildsTheWeights) {
    // The 32-weight types under the same contract, on any bytes: MXFP4's scale byte 255 (2^127
    // in ggml's decoding, its products overflowing to inf) and Q8_0's FP16 inf and NaN included.
    auto rng = bgtest::fresh_rng();
    std::uniform_int_distribution<int> byte(0, 255);
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0}) {
        for (int fill = 0; fill < 2; ++fill) {
            std::vector<uint8_t> b(static_cast<size_t>(64 * block_bytes(t)));
            for (auto& v : b) v = static_cast<uint8_t>(fill ? 0xFF : byte(rng));
            std::vector<float> full(64 * 32);
            dequantize_row(t, b.data(), full.data(), 64 * 32);
            qtypes::visit(t, [&](auto traits) {
                using T = decltype(traits);
                for (int64_t c = 0; c < 64; ++c) {
                    int8_t v[32];
                    float d[2], m[2];
                    T::unpack(b.data(), c, v, d, m);
                    ASSERT_TRUE(same_float(d[0], d[1]) && m[0] == 0.0f && m[1] == 0.0f);
                    for (int i = 0; i < 32; ++i)
                        ASSERT_TRUE(same_float(d[0] * static_cast<float>(v[i]), full[static_cast<size_t>(c * 32 + i)]))
                            << type_name(t) << " chunk " << c << " weight " << i;
                }
            });
        }
    }
}

TEST(KQuants, HostPrmtFollowsPtxGenericMode) {
    // The host form of prmt against hand cases: byte selection from {b, a}, and bit 3 of a
    // selector nibble replicating the selected byte's sign.
    EXPECT_EQ(qtypes::prmt(0x03020100u, 0x07060504u, 0x7531u), 0x07050301u);
    EXPECT_EQ(qtypes::prmt(0x03020100u, 0x07060504u, 0x0246u), 0x00020406u);
    EXPECT_EQ(qtypes::prmt(0x80017F00u, 0u, 0x8888u), 0u);           // byte 0 (0x00) sign-replicated
    EXPECT_EQ(qtypes::prmt(0x80017F00u, 0u, 0xB9A8u), 0xFF000000u);  // bytes 0, 2, 1, 3 -> 0, 0, 0, 0xFF
    EXPECT_EQ(qtypes::prmt(0x11223344u, 0x55667788u, 0x00007654u), 0x55667788u);
}

TEST(KQuants, Mxfp4SplitDecodeGivesEveryCodesValueAndTheExactDot) {
    // The GEMV's MXFP4 decoder (split8 over interleave_act's activations): every code in every
    // nibble position gives pos - neg = its value, and the dot product of a code word with its
    // activations equals the values' one, on fresh random words.
    using T = qtypes::Mxfp4;
    auto check = [](uint32_t cw, const int8_t xl[4], const int8_t xh[4]) {
        uint32_t pos[2], neg[2];
        T::split8(cw, pos, neg);
        uint32_t lo = 0, hi = 0;
        for (int k = 0; k < 4; ++k) {
            lo |= static_cast<uint32_t>(static_cast<uint8_t>(xl[k])) << (8 * k);
            hi |= static_cast<uint32_t>(static_cast<uint8_t>(xh[k])) << (8 * k);
        }
        uint32_t xw[2];
        T::interleave_act(lo, hi, xw[0], xw[1]);
        int64_t want = 0, got = 0;
        for (int k = 0; k < 4; ++k)
            want += T::value_of(static_cast<int>(cw >> (8 * k)) & 15) * xl[k] + T::value_of(static_cast<int>(cw >> (8 * k + 4)) & 15) * xh[k];
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 4; ++i) {
                const int q = 4 * h + i, k = q / 2, upper = q % 2;  // nibble q: byte k's low or high code
                const int p = static_cast<int8_t>(pos[h] >> (8 * i)), n = static_cast<int8_t>(neg[h] >> (8 * i));
                const int x = static_cast<int8_t>(xw[h] >> (8 * i));
                EXPECT_GE(p, 0);
                EXPECT_GE(n, 0);
                EXPECT_TRUE(p == 0 || n == 0);
                EXPECT_EQ(p - n, T::value_of(static_cast<int>(cw >> (4 * q)) & 15)) << std::hex << cw << " nibble " << q;
                EXPECT_EQ(x, upper ? xh[k] : xl[k]) << "activation of nibble " << q;
                got += static_cast<int64_t>(p - n) * x;
            }
        EXPECT_EQ(got, want) << std::hex << cw;
    };
    auto rng = bgtest::fresh_rng();
    std::uniform_int_distribution<int> act(-127, 127);
    std::uniform_int_distribution<uint32_t> word;
    int8_t xl[4], xh[4];
    for (int pos = 0; pos < 8; ++pos)
        for (uint32_t code = 0; code < 16; ++code) {
            for (int k = 0; k < 4; ++k) xl[k] = static_cast<int8_t>(act(rng)), xh[k] = static_cast<int8_t>(act(rng));
            check((word(rng) & ~(15u << (4 * pos))) | (code << (4 * pos)), xl, xh);
        }
    for (int rep = 0; rep < 20000; ++rep) {
        for (int k = 0; k < 4; ++k) xl[k] = static_cast<int8_t>(act(rng)), xh[k] = static_cast<int8_t>(act(rng));
        check(word(rng), xl, xh);
    }
}

// ---------------------------------------------------------------------------------------------
// Quantisers

namespace {

// Relative RMS error of quantize -> dequantize on n values.
double round_trip_error(GgmlType t, const std::vector<float>& x, std::vector<float>* back = nullptr) {
    std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
    quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
    std::vector<float> y(x.size());
    dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        e2 += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
        r2 += static_cast<double>(x[i]) * x[i];
    }
    if (back) *back = y;
    return std::sqrt(e2 / r2);
}

// Bounds on the relative RMS error for Gaussian weights, about 1.3x what these quantisers reach
// (printed; about 0.28, 0.145, 0.073, 0.037, 0.019, 0.35): each type's bits per weight set its
// error, from Q6_K's 6.56 to IQ2_XXS's 2.06.
double error_bound(GgmlType t) {
    switch (t) {
        case GgmlType::Q2_K: return 0.36;
        case GgmlType::Q3_K: return 0.19;
        case GgmlType::Q4_K: return 0.095;
        case GgmlType::Q5_K: return 0.048;
        case GgmlType::Q6_K: return 0.025;
        case GgmlType::IQ2_XXS: return 0.45;
        default: return 0;
    }
}

}  // namespace

TEST(KQuants, QuantiseRoundTripErrorIsBounded) {
    auto rng = bgtest::fresh_rng();
    for (GgmlType t : kTypes) {
        for (float sigma : {1e-3f, 0.05f, 3.0f}) {
            std::normal_distribution<float> nd(0.0f, sigma);
            std::vector<float> x(256 * 24);
            for (float& v : x) v = nd(rng);
            const double e = round_trip_error(t, x);
            std::printf("  %s sigma %g: relative RMS error %.4f (bound %.3f)\n", type_name(t), sigma, e, error_bound(t));
            EXPECT_LE(e, error_bound(t)) << type_name(t) << " sigma " << sigma;
            EXPECT_GT(e, 0.0) << type_name(t);
        }
    }
}

TEST(KQuants, QuantiseOneSidedAndConstantRows) {
    // All-positive rows (the min term at 0) and all-negative ones (the min term at work), a
    // constant row, and zeros (exactly zero back).
    auto rng = bgtest::fresh_rng();
    std::uniform_real_distribution<float> pos(0.5f, 1.5f);
    for (GgmlType t : kTypes) {
        std::vector<float> x(512);
        for (float& v : x) v = pos(rng);
        EXPECT_LE(round_trip_error(t, x), 1.2 * error_bound(t)) << type_name(t) << " positive";
        for (float& v : x) v = -v;
        EXPECT_LE(round_trip_error(t, x), 1.2 * error_bound(t)) << type_name(t) << " negative";
        std::fill(x.begin(), x.end(), 0.75f);
        EXPECT_LE(round_trip_error(t, x), error_bound(t)) << type_name(t) << " constant";
        std::fill(x.begin(), x.end(), 0.0f);
        std::vector<uint8_t> q(row_bytes(t, 512));
        std::vector<float> y(512, 1.0f);
        quantize_row(t, x.data(), q.data(), 512);
        dequantize_row(t, q.data(), y.data(), 512);
        for (float v : y) ASSERT_EQ(v, 0.0f) << type_name(t);
    }
}

TEST(KQuants, QuantiseNonFiniteInputGivesFiniteBlocks) {
    auto rng = bgtest::fresh_rng();
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const float specials[] = {NAN, INFINITY, -INFINITY, 1e30f, -3e38f, 1e-40f};
    for (GgmlType t : kTypes) {
        std::vector<float> x(256);
        for (float& v : x) v = nd(rng);
        for (size_t k = 0; k < std::size(specials); ++k) x[17 * k + 3] = specials[k];
        std::vector<uint8_t> q(row_bytes(t, 256));
        std::vector<float> y(256);
        quantize_row(t, x.data(), q.data(), 256);
        dequantize_row(t, q.data(), y.data(), 256);
        for (float v : y) ASSERT_TRUE(std::isfinite(v)) << type_name(t);
    }
}

// ---------------------------------------------------------------------------------------------
// Matmuls

namespace {

struct Case {
    GgmlType type;
    int64_t rows, cols, M;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    const Case& c = info.param;
    return std::string(type_name(c.type)) + "_r" + std::to_string(c.rows) + "_c" + std::to_string(c.cols) + "_M" +
           std::to_string(c.M);
}

std::vector<Case> cases() {
    std::vector<Case> v;
    const int64_t shapes[][3] = {{64, 256, 1}, {37, 512, 3}, {33, 768, 8}, {48, 256, 16}, {7, 512, 64}, {65, 256, 5}};
    for (GgmlType t : kTypes)
        for (const auto& s : shapes) v.push_back({t, s[0], s[1], s[2]});
    return v;
}

// The float64 weights of a matrix from the reference decoder: [rows][cols].
std::vector<double> ref_weights(const bgtest::HostMat& W) {
    std::vector<double> w(static_cast<size_t>(W.rows * W.cols));
    for (int64_t r = 0; r < W.rows; ++r)
        for (int64_t b = 0; b < W.cols / QK_K; ++b) {
            const std::vector<RefValue> v = ref_block(W.type, W.bytes.data() + r * W.stride + b * block_bytes(W.type));
            for (int i = 0; i < QK_K; ++i) w[static_cast<size_t>(r * W.cols + b * QK_K + i)] = v[static_cast<size_t>(i)].exact;
        }
    return w;
}

// y[t][r] = sum_i w[r][i] * a[t][i] in double, a the activations as the kernel sees them.
std::vector<double> ref_product(const std::vector<double>& w, int64_t rows, int64_t cols, const std::vector<double>& a,
                                int64_t M) {
    std::vector<double> y(static_cast<size_t>(M * rows));
    for (int64_t t = 0; t < M; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            double s = 0;
            for (int64_t i = 0; i < cols; ++i) s += w[static_cast<size_t>(r * cols + i)] * a[static_cast<size_t>(t * cols + i)];
            y[static_cast<size_t>(t * rows + r)] = s;
        }
    return y;
}

class KQuantMatmul : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(KQuantMatmul, Int8PathMatchesFloat64ReferenceOfItsArithmetic) {
    const Case c = GetParam();
    auto rng = bgtest::fresh_rng();
    const bgtest::Int8Run run = bgtest::run_int8(c.type, c.rows, c.cols, c.M, rng);
    const std::vector<float>& out = run.out;
    // The activations as the kernel quantises them (int8_act.h), then the products in double.
    const std::vector<double> aq = run.dequantised_activations();
    std::vector<double> ax(aq.size());
    for (int64_t t = 0; t < c.M; ++t)
        for (int64_t i = 0; i < c.cols; ++i)
            ax[static_cast<size_t>(t * c.cols + i)] = run.x[static_cast<size_t>(t * run.ldx + i)];
    const std::vector<double> w = ref_weights(run.W);
    const bgtest::Cmp same = bgtest::compare(out, ref_product(w, c.rows, c.cols, aq, c.M));
    ASSERT_LT(same.bad, 0) << "output " << same.bad << " not written";
    EXPECT_LE(same.rel, 1e-5);
    const bgtest::Cmp exact = bgtest::compare(out, ref_product(w, c.rows, c.cols, ax, c.M));
    // The activations' int8 rounding, about 4e-3 relative (1e-3..1.3e-2 over 5400 draws; a
    // row set of M = 1 varies most): far above float rounding, far below a wrong product.
    EXPECT_GE(exact.rel, 1e-4) << "the activations were not rounded to int8";
    EXPECT_LE(exact.rel, 3e-2);
    // Rows the call does not own stay as they were.
    for (int64_t t = 0; t < c.M; ++t)
        for (int64_t r = c.rows; r < run.ldy; ++r) ASSERT_TRUE(std::isnan(run.y[static_cast<size_t>(t * run.ldy + r)]));
    std::printf("  %s r%lld c%lld M%lld: rel err %.3g against its arithmetic, %.3g against the exact product\n",
                type_name(c.type), (long long)c.rows, (long long)c.cols, (long long)c.M, same.rel, exact.rel);
}

TEST_P(KQuantMatmul, PreciseCpuMatmulMatchesFloat64Dequant) {
    const Case c = GetParam();
    auto rng = bgtest::fresh_rng();
    const bgtest::HostMat W = bgtest::random_mat(c.type, c.rows, c.cols, 3, rng);
    const int64_t ldx = c.cols + 1, ldy = c.rows + 4;
    const std::vector<float> x = bgtest::uniform(rng, c.M * ldx, -1.0f, 1.0f);
    cpu::ThreadPool pool(2);
    const MatView v{W.bytes.data(), c.type, c.cols, c.rows, W.stride};
    std::vector<float> y(static_cast<size_t>(c.M * ldy), NAN);
    cpu::matmul(pool, v, x.data(), ldx, c.M, y.data(), ldy);
    std::vector<double> ax(static_cast<size_t>(c.M * c.cols));
    for (int64_t t = 0; t < c.M; ++t)
        for (int64_t i = 0; i < c.cols; ++i) ax[static_cast<size_t>(t * c.cols + i)] = x[static_cast<size_t>(t * ldx + i)];
    std::vector<float> out(static_cast<size_t>(c.M * c.rows));
    for (int64_t t = 0; t < c.M; ++t)
        for (int64_t r = 0; r < c.rows; ++r) out[static_cast<size_t>(t * c.rows + r)] = y[static_cast<size_t>(t * ldy + r)];
    const bgtest::Cmp cmp = bgtest::compare(out, ref_product(ref_weights(W), c.rows, c.cols, ax, c.M));
    ASSERT_LT(cmp.bad, 0) << "output " << cmp.bad << " not written";
    EXPECT_LE(cmp.rel, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Cases, KQuantMatmul, ::testing::ValuesIn(cases()), case_name);
