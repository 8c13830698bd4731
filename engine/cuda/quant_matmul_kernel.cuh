// The fused quantized kernel of quant_matmul.cuh (qmm_kernel) and its host-side launch, as
// templates over the weight type (WT: a ggml type id) and the tile. Included by
// quant_matmul_<type>.cu, one file a weight type, each instantiating launch_qmm<WT> (so two
// cores compile them in parallel), and by quant_matmul.cu for the shared helpers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "cuda/check.cuh"
#include "cuda/quant_matmul.cuh"
#include "cuda/swiglu_dev.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda::qmm {
constexpr int kMx = static_cast<int>(GgmlType::MXFP4);
constexpr int kQ8 = static_cast<int>(GgmlType::Q8_0);
constexpr int kBf = static_cast<int>(GgmlType::BF16);

template <int WT>
struct WTraits;
template <>
struct WTraits<kMx> {
    static constexpr int kBlockBytes = 17;
    static constexpr int kChunkDiv = 1;  // K chunk = KBASE / kChunkDiv blocks (~same bytes per row)
    using Act = __half;
};
template <>
struct WTraits<kQ8> {
    static constexpr int kBlockBytes = 34;
    static constexpr int kChunkDiv = 2;
    using Act = __half;
};
template <>
struct WTraits<kBf> {
    static constexpr int kBlockBytes = 64;
    static constexpr int kChunkDiv = 4;
    using Act = __nv_bfloat16;
};

template <int WT, int WARPS, int MT, int NT, int KBASE, int STAGES>
struct Cfg {
    static constexpr int kThreads = WARPS * 32;
    static constexpr int BM = WARPS * MT * 16;                // weight rows per CTA
    static constexpr int BN = NT * 8;                         // token columns per CTA
    static constexpr int KCB = KBASE / WTraits<WT>::kChunkDiv;  // 32-blocks of K per stage
    static constexpr int BB = WTraits<WT>::kBlockBytes;
    // A row slot: the chunk's bytes at offset (address mod 16) <= 15, in whole granules; an odd
    // number of granules so the 8 rows a warp reads at once fall in different banks.
    static constexpr int SLOT0 = (KCB * BB + 15 + 15) / 16 * 16;
    static constexpr int SLOT = (SLOT0 / 16) % 2 == 0 ? SLOT0 + 16 : SLOT0;
    static constexpr int GRAN = SLOT / 16;
    // B row: KCB*32 activations + 16 bytes of padding (row pitch = 4 banks mod 32: ldmatrix
    // reads of 8 rows are conflict-free).
    static constexpr int BROW = KCB * 64 + 16;
    static constexpr int A_STAGE = BM * SLOT;
    static constexpr int B_STAGE = BN * BROW;
    static constexpr int STAGE = A_STAGE + B_STAGE;
    static constexpr int SMEM = STAGES * STAGE;
    static_assert(KCB >= 1, "chunk of at least one block");
    static_assert(NT == 1 || NT % 2 == 0, "n-tiles are loaded in pairs");
    static_assert(STAGES >= 2, "at least double buffering");
};

enum Mode : int { kStore = 0, kGateUp = 2 };

struct KParams {
    const uint8_t* w0 = nullptr;   // the matrix (gate/up mode: gate)
    const uint8_t* w1 = nullptr;   // gate/up mode: up
    uint32_t size0 = 0, size1 = 0; // bytes from w to one past its last row's last byte (aligned mode: under 2^31)
    uint64_t stride0 = 0, stride1 = 0;
    int rows = 0;      // output rows (gate/up mode: n_ff features)
    int nkb = 0;       // K / 32
    int gateup = 0;
    int aligned = 0;   // w0 (and w1) 16-byte aligned: cp.async; else byte copies
    const void* xq = nullptr;  // [m][ldxq] converted activations
    int ldxq = 0;
    int m = 0;         // activation columns (<= BN): m_hi, or lo_off + m_hi with split activations
    int m_hi = 0;      // tokens
    int lo_off = 0;    // split activations: column of the first lo row (BN / 2); 0: none
    int kb_split = 0;  // blocks per split (multiple of KCB)
    int splits = 1;
    int mode = kStore;
    float* y = nullptr;
    int64_t ldy = 0;
    const int32_t* out_rows = nullptr;  // store mode: output row per token (null: token)
    float* part = nullptr;              // split-K partials [splits][m][prow]
    int prow = 0;                       // row tiles x BM
    int* counters = nullptr;            // per row tile, zero
    void* hq = nullptr;                 // gate/up: h [m][ldh]
    int ldh = 0;
    float limit = 0.0f;
    int llama = 0;
    int mx_bits = 0;  // MXFP4: decode by bit placement (needs FP16 subnormals in the MMA)
    int even = 0;     // Q8_0: every row starts at an even address in shared memory (16-bit loads)
    int hperm = 0;    // gate/up: write h in the MXFP4 column order (mx_column), for an MXFP4 down
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(smem_addr(p)));
}

// d += A (16x16, row) * B (16x8, col); FP32 accumulators.
template <typename Act>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = A * B (C = 0: no zeroed accumulator registers to set up per block).
__device__ __forceinline__ void mma16816_zero(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// 2^(e-128) for an E8M0 byte (the CPU's decode multiplies the doubled E2M1 value by this).
__device__ __forceinline__ float e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
}

// The MXFP4 kernels' column order within a 32-block. Lane c of a warp decodes its A fragments
// from one 32-bit word, the block's code bytes 4c..4c+3 (elements 4c..4c+3 in their low
// nibbles, 4c+16..4c+19 in their high ones), as four half2 registers: (4c, 4c+2), (4c+1, 4c+3),
// (4c+16, 4c+18), (4c+17, 4c+19). Those are the m16n8k16 fragment's k = (2c, 2c+1) and
// (2c+8, 2c+9) of the block's first and second k16 step, so element e of a block sits at MMA
// column 16 * (e / 16) + (2c + q/2 for q = e % 4 even, 8 + 2c + q/2 for q odd), c = (e % 16) / 4.
// The activations go into that order when they are converted (and h when the gate/up epilogue
// writes it for an MXFP4 down projection); the dot product is the same sum, reordered.
__host__ __device__ __forceinline__ int mx_column(int k) {
    const int e = k & 31, c = (e & 15) >> 2, q = e & 3;
    return (k & ~31) + (e & 16) + ((q & 1) ? 8 : 0) + 2 * c + (q >> 1);
}

// Two MXFP4 codes at bits 0-3 and 16-19 of t -> half2 of their doubled E2M1 values (exact
// integers 0, +-1, 2, 3, 4, 6, 8, 12). |doubled| from a byte_perm table, 1024 + v via the
// FP16 bit pattern 0x6400 | v, minus 1024, then the sign bit.
__device__ __forceinline__ uint32_t mxfp4_pair(uint32_t t) {
    const uint32_t sel = (t & 0x7u) | ((t >> 8) & 0x700u);  // byte 0 <- |v0|, byte 2 <- |v1|, others <- 0
    const uint32_t mag = __byte_perm(0x03020100u, 0x0C080604u, sel) | 0x64006400u;
    __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&mag), __half2half2(__ushort_as_half(0x6400)));
    return *reinterpret_cast<uint32_t*>(&h) | ((t & 0x00080008u) << 12);
}

// The bit-placement decode: the MXFP4 codes at bits 0-3 and 16-19 of w -> half2 of
// e2m1(code) * 2^-14 exactly: (code & 7) << 9 puts E2M1's two exponent bits at the bottom of
// FP16's exponent and its mantissa bit at the top of FP16's mantissa (code 1, 0.5, lands on the
// FP16 subnormal 2^-15), the sign bit goes to bit 15. Three instructions per pair (the table
// decode takes about eight); the kernel puts back the 2^15 its scale 2^(e-128) leaves out,
// once, after the K loop. Used only where fp16_subnormals_in_mma() holds.
__device__ __forceinline__ uint32_t mxfp4_bits(uint32_t w) {
    return ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
}

// Two int8 (q0 at bits 0-7, q1 at bits 16-23 of w) -> half2 exactly: 0x64 | (q ^ 0x80) is
// 1024 + 128 + q.
__device__ __forceinline__ uint32_t q8_pair(uint32_t w) {
    const uint32_t b = (w ^ 0x00800080u) | 0x64006400u;
    __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&b), __half2half2(__ushort_as_half(0x6480)));
    return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __forceinline__ float act_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float act_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename Act>
__device__ __forceinline__ Act to_act(float v);
template <>
__device__ __forceinline__ __half to_act<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_act<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Byte offset of weight row gr of the CTA's matrix view in its matrix (gate/up mode: 16-row
// tiles of 8 gate rows over the same 8 up rows; *up says the row is up's), or -1 where the row
// does not exist.
__device__ __forceinline__ int64_t row_offset(const KParams& p, int gr, bool* up) {
    *up = false;
    if (p.gateup) {
        const int f = (gr >> 4) * 8 + (gr & 7);
        if (f >= p.rows) return -1;
        *up = (gr & 8) != 0;
        return static_cast<int64_t>(static_cast<uint64_t>(f) * (*up ? p.stride1 : p.stride0));
    }
    return gr < p.rows ? static_cast<int64_t>(static_cast<uint64_t>(gr) * p.stride0) : -1;
}

// Weight row gr of the CTA's matrix view; null when the row does not exist.
__device__ __forceinline__ const uint8_t* row_ptr(const KParams& p, int gr) {
    bool up = false;
    const int64_t off = row_offset(p, gr, &up);
    return off < 0 ? nullptr : (up ? p.w1 : p.w0) + off;
}

// The weight granules a thread copies each stage: idx = threadIdx.x + j * kThreads for j < kSlots
// (row idx / GRAN of the CTA, granule idx % GRAN). The row's byte offset in its matrix stays the
// same from stage to stage, so it is found once: bit 31 set for gate/up mode's up matrix,
// kNoRow where the row does not exist.
template <class C>
struct RowSlots {
    static constexpr int kSlots = (C::BM * C::GRAN + C::kThreads - 1) / C::kThreads;
    static constexpr uint32_t kNoRow = 0xFFFFFFFFu;
    uint32_t off[kSlots];
};

template <class C>
__device__ __forceinline__ void find_rows(const KParams& p, int row0, RowSlots<C>& rs) {
#pragma unroll
    for (int j = 0; j < RowSlots<C>::kSlots; ++j) {
        const int idx = threadIdx.x + j * C::kThreads;
        rs.off[j] = RowSlots<C>::kNoRow;
        if (idx >= C::BM * C::GRAN) continue;
        bool up = false;
        const int64_t off = row_offset(p, row0 + idx / C::GRAN, &up);
        if (off >= 0) rs.off[j] = static_cast<uint32_t>(off) | (up ? 0x80000000u : 0u);
    }
}

// Aligned mode (16-byte aligned matrices under 2^31 bytes): the stage's weight granules from the
// precomputed row offsets, about a dozen instructions per granule.
template <class C>
__device__ __forceinline__ void load_weights_aligned(const KParams& p, const RowSlots<C>& rs, uint8_t* sA, int kb0,
                                                     int nb) {
    const int nbytes = nb * C::BB;
#pragma unroll
    for (int j = 0; j < RowSlots<C>::kSlots; ++j) {
        const uint32_t r = rs.off[j];
        if (r == RowSlots<C>::kNoRow) continue;
        const int idx = threadIdx.x + j * C::kThreads;
        const int lr = idx / C::GRAN, gi = idx - lr * C::GRAN;
        const bool up = (r & 0x80000000u) != 0;
        const uint32_t src = (r & 0x7FFFFFFFu) + static_cast<uint32_t>(kb0) * C::BB;  // chunk start in the matrix
        const int o = static_cast<int>(src & 15u);  // the matrix base is 16-byte aligned
        if (16 * gi >= o + nbytes) continue;         // past this row's chunk
        const uint32_t g = src - static_cast<uint32_t>(o) + 16u * static_cast<uint32_t>(gi);
        const int64_t avail = static_cast<int64_t>(up ? p.size1 : p.size0) - g;
        cp_async16(sA + lr * C::SLOT + 16 * gi, (up ? p.w1 : p.w0) + g, avail >= 16 ? 16 : static_cast<int>(avail));
    }
}

template <class C>
__device__ __forceinline__ void load_stage(const KParams& p, const RowSlots<C>& rs, uint8_t* stage, int row0, int kb0,
                                           int nb) {
    uint8_t* sA = stage;
    uint8_t* sB = stage + C::A_STAGE;
    const int nbytes = nb * C::BB;
    if (p.aligned) load_weights_aligned<C>(p, rs, sA, kb0, nb);
    for (int idx = threadIdx.x; !p.aligned && idx < C::BM * C::GRAN; idx += C::kThreads) {
        const int lr = idx / C::GRAN, gi = idx - lr * C::GRAN;
        const uint8_t* rp = row_ptr(p, row0 + lr);
        if (rp == nullptr) continue;
        const uint8_t* src = rp + static_cast<uint64_t>(kb0) * C::BB;
        uint8_t* dst = sA + lr * C::SLOT + 16 * gi;
        const int o = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 15u);
        if (16 * gi >= o + nbytes) continue;  // past this row's chunk
        // Unaligned matrix: byte copies (correct, slow; tested).
        for (int b = 0; b < 16; ++b) {
            const int pos = 16 * gi + b - o;
            if (pos >= 0 && pos < nbytes) dst[b] = src[pos];
        }
    }
    // Activations: [m][ldxq] rows, chunk at element kb0*32, nb*64 bytes (whole granules,
    // 16-byte aligned: the workspace is, and ldxq is a multiple of 8).
    constexpr int kGran = C::KCB * 4;
    const int ng = nb * 4;
    const uint8_t* xb = static_cast<const uint8_t*>(p.xq);
    for (int idx = threadIdx.x; idx < p.m * kGran; idx += C::kThreads) {
        const int n = idx / kGran, gi = idx - n * kGran;
        if (gi >= ng || (n >= p.m_hi && n < p.lo_off)) continue;  // the gap between hi and lo rows stays zero
        cp_async16(sB + n * C::BROW + 16 * gi,
                   xb + (static_cast<uint64_t>(n) * p.ldxq + static_cast<uint64_t>(kb0) * 32) * 2 + 16 * gi, 16);
    }
}

template <int WT, int WARPS, int MT, int NT, int KBASE, int STAGES>
__global__ void __launch_bounds__(WARPS * 32) qmm_kernel(const KParams p) {
    grid_dependency_begin();
    using C = Cfg<WT, WARPS, MT, NT, KBASE, STAGES>;
    using Act = typename WTraits<WT>::Act;
    constexpr bool kScaled = WT != kBf;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_last;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int row0 = blockIdx.x * C::BM;
    const int kb_begin = blockIdx.y * p.kb_split;
    const int kb_end = min(p.nkb, kb_begin + p.kb_split);
    const int nchunks = kb_end > kb_begin ? (kb_end - kb_begin + C::KCB - 1) / C::KCB : 0;

    // Columns no activation row is loaded into (past m, and between the hi and lo rows) read
    // zeros in every stage (cp.async never writes them).
    for (int s = 0; s < STAGES; ++s) {
        uint8_t* sB = smem + s * C::STAGE + C::A_STAGE;
        for (int idx = tid; idx < C::BN * (C::BROW / 16); idx += C::kThreads) {
            const int n = idx / (C::BROW / 16);
            if (n >= p.m || (n >= p.m_hi && n < p.lo_off)) reinterpret_cast<uint4*>(sB)[idx] = make_uint4(0, 0, 0, 0);
        }
    }

    // Byte offset (address mod 16) of this thread's rows g and g+8 of each m-tile.
    int ob[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint8_t* rp = row_ptr(p, row0 + warp * MT * 16 + mt * 16 + g + 8 * h);
            ob[mt][h] = rp ? static_cast<int>(reinterpret_cast<uintptr_t>(rp) & 15u) : 0;
        }

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

    RowSlots<C> rs;
    find_rows<C>(p, row0, rs);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nchunks) {
            const int kb0 = kb_begin + s * C::KCB;
            load_stage<C>(p, rs, smem + s * C::STAGE, row0, kb0, min(C::KCB, kb_end - kb0));
        }
        cp_async_commit();
    }

    for (int ch = 0; ch < nchunks; ++ch) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int nx = ch + STAGES - 1;
            if (nx < nchunks) {
                const int kb0 = kb_begin + nx * C::KCB;
                load_stage<C>(p, rs, smem + (nx % STAGES) * C::STAGE, row0, kb0, min(C::KCB, kb_end - kb0));
            }
            cp_async_commit();
        }
        const uint8_t* sA = smem + (ch % STAGES) * C::STAGE;
        const uint8_t* sB = sA + C::A_STAGE;
        const int kb0 = kb_begin + ch * C::KCB;
        const int nb = min(C::KCB, kb_end - kb0);
        const int chunk_off = kb0 * C::BB;

        auto block = [&](int b) {
            // A fragments of both k16 steps of block b, and the block's scales.
            uint32_t a[MT][2][4];
            float sc[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int lr = warp * MT * 16 + mt * 16 + g + 8 * h;
                    const uint8_t* blk = sA + lr * C::SLOT + ((ob[mt][h] + chunk_off) & 15) + b * C::BB;
                    if constexpr (WT == kMx) {
                        // The lane's 4 code bytes (mx_column's order) as one word: two aligned
                        // loads and a funnel shift, whatever the block's alignment.
                        const int off = static_cast<int>(blk - smem) + 1 + 4 * c;
                        const uint32_t* w4 = reinterpret_cast<const uint32_t*>(smem + (off & ~3));
                        const uint32_t w = __funnelshift_r(w4[0], w4[1], (off & 3) * 8);
                        if (p.mx_bits) {
                            a[mt][0][h] = mxfp4_bits(w);
                            a[mt][0][2 + h] = mxfp4_bits(w >> 8);
                            a[mt][1][h] = mxfp4_bits(w >> 4);
                            a[mt][1][2 + h] = mxfp4_bits(w >> 12);
                        } else {
                            a[mt][0][h] = mxfp4_pair(w & 0x000F000Fu);
                            a[mt][0][2 + h] = mxfp4_pair((w >> 8) & 0x000F000Fu);
                            a[mt][1][h] = mxfp4_pair((w >> 4) & 0x000F000Fu);
                            a[mt][1][2 + h] = mxfp4_pair((w >> 12) & 0x000F000Fu);
                        }
                        // 2^(e-128): exact for the table decode's doubled values; the bit
                        // decode's e2m1 * 2^-14 leaves the sums 2^15 short, restored once after
                        // the K loop (a power of two: the same roundings, scaled).
                        sc[mt][h] = e8m0_half(blk[0]);
                    } else if constexpr (WT == kQ8) {
                        const uint8_t* q = blk + 2;
                        if (p.even) {  // a pair of int8 in one 16-bit load, spread to bits 0-7 and 16-23
                            const uint16_t* q16 = reinterpret_cast<const uint16_t*>(q);
                            a[mt][0][h] = q8_pair(__byte_perm(q16[c], 0u, 0x4140u));
                            a[mt][0][2 + h] = q8_pair(__byte_perm(q16[c + 4], 0u, 0x4140u));
                            a[mt][1][h] = q8_pair(__byte_perm(q16[c + 8], 0u, 0x4140u));
                            a[mt][1][2 + h] = q8_pair(__byte_perm(q16[c + 12], 0u, 0x4140u));
                            sc[mt][h] = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(blk)));
                        } else {
                            a[mt][0][h] = q8_pair(q[2 * c] | (static_cast<uint32_t>(q[2 * c + 1]) << 16));
                            a[mt][0][2 + h] = q8_pair(q[2 * c + 8] | (static_cast<uint32_t>(q[2 * c + 9]) << 16));
                            a[mt][1][h] = q8_pair(q[2 * c + 16] | (static_cast<uint32_t>(q[2 * c + 17]) << 16));
                            a[mt][1][2 + h] = q8_pair(q[2 * c + 24] | (static_cast<uint32_t>(q[2 * c + 25]) << 16));
                            sc[mt][h] = __half2float(__ushort_as_half(
                                static_cast<unsigned short>(blk[0] | (static_cast<uint32_t>(blk[1]) << 8))));
                        }
                    } else {
                        const uint16_t* e = reinterpret_cast<const uint16_t*>(blk);  // rows 2-byte aligned
#pragma unroll
                        for (int s = 0; s < 2; ++s) {
                            a[mt][s][h] = e[16 * s + 2 * c] | (static_cast<uint32_t>(e[16 * s + 2 * c + 1]) << 16);
                            a[mt][s][2 + h] =
                                e[16 * s + 2 * c + 8] | (static_cast<uint32_t>(e[16 * s + 2 * c + 9]) << 16);
                        }
                        sc[mt][h] = 1.0f;
                    }
                }

            float part[MT][NT][4];  // the block's sum before its scale; the first k16 step starts it

#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int kk = b * 32 + s * 16;  // element offset in the chunk
#pragma unroll
                for (int np = 0; np < (NT + 1) / 2; ++np) {
                    uint32_t bf[2][2];
                    if constexpr (NT == 1) {
                        const int n = lane & 7, kx = kk + ((lane >> 3) & 1) * 8;
                        ldmatrix_x2(bf[0][0], bf[0][1], sB + n * C::BROW + kx * 2);
                    } else {
                        const int n = (2 * np + (lane >> 4)) * 8 + (lane & 7), kx = kk + ((lane >> 3) & 1) * 8;
                        ldmatrix_x4(bf[0][0], bf[0][1], bf[1][0], bf[1][1], sB + n * C::BROW + kx * 2);
                    }
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int nt = 2 * np + j;
                        if (nt >= NT) break;
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            if constexpr (kScaled) {
                                if (s == 0) {
                                    mma16816_zero(part[mt][nt], a[mt][s], bf[j][0], bf[j][1]);
                                } else {
                                    mma16816<Act>(part[mt][nt], a[mt][s], bf[j][0], bf[j][1]);
                                }
                            } else {
                                mma16816<Act>(acc[mt][nt], a[mt][s], bf[j][0], bf[j][1]);
                            }
                        }
                    }
                }
            }
            if constexpr (kScaled) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        acc[mt][nt][0] = fmaf(sc[mt][0], part[mt][nt][0], acc[mt][nt][0]);
                        acc[mt][nt][1] = fmaf(sc[mt][0], part[mt][nt][1], acc[mt][nt][1]);
                        acc[mt][nt][2] = fmaf(sc[mt][1], part[mt][nt][2], acc[mt][nt][2]);
                        acc[mt][nt][3] = fmaf(sc[mt][1], part[mt][nt][3], acc[mt][nt][3]);
                    }
            }
        };
        // A whole chunk unrolled (shared-memory offsets as immediates, no loop overhead) where
        // the tile is small enough for the code to stay small: the 1-8 token tiles.
        if constexpr (NT <= 2) {
            if (nb == C::KCB) {
#pragma unroll
                for (int b = 0; b < C::KCB; ++b) block(b);
            } else {
                for (int b = 0; b < nb; ++b) block(b);
            }
        } else {
            for (int b = 0; b < nb; ++b) block(b);
        }
    }
    cp_async_wait<0>();
    if constexpr (WT == kMx) {
        if (p.mx_bits) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[mt][nt][i] *= 32768.0f;
        }
    }

    // acc[mt][nt][i]: row g + 8*(i >= 2) of m-tile mt, token nt*8 + 2c + (i & 1).
    if (p.splits > 1) {
        // Deterministic split-K: partials out, the row tile's last CTA sums them in split order.
        float* part = p.part + static_cast<int64_t>(blockIdx.y) * p.m * p.prow;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int gr = row0 + warp * MT * 16 + mt * 16 + g + (i >= 2 ? 8 : 0);
                    const int t = nt * 8 + 2 * c + (i & 1);
                    if (t < p.m) part[static_cast<int64_t>(t) * p.prow + gr] = acc[mt][nt][i];
                }
        __threadfence();
        __syncthreads();
        if (tid == 0) s_last = atomicAdd(p.counters + blockIdx.x, 1) == p.splits - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        // Splits outermost: each split's MT*NT*4 loads are independent and in flight together,
        // so the sum waits for memory once per split, not once per value and split (that
        // serialisation cost about 3 us per token at 64 tokens). Each value still sums its
        // splits in order 0, 1, .. from zero.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
        for (int sp = 0; sp < p.splits; ++sp) {
            const float* ps = p.part + static_cast<int64_t>(sp) * p.m * p.prow;
            float v[MT][NT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int gr = row0 + warp * MT * 16 + mt * 16 + g + (i >= 2 ? 8 : 0);
                        const int t = nt * 8 + 2 * c + (i & 1);
                        v[mt][nt][i] = t < p.m ? __ldcg(ps + static_cast<int64_t>(t) * p.prow + gr) : 0.0f;
                    }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[mt][nt][i] += v[mt][nt][i];
        }
        if (tid == 0) p.counters[blockIdx.x] = 0;  // the next launch on the stream finds it zero
    }

    // Split activations: token t's product is its hi column's plus its lo column's (t + BN/2),
    // added once, in FP32, in that order.
    if (p.lo_off) {
        if constexpr (NT >= 2) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT / 2; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[mt][nt][i] += acc[mt][nt + NT / 2][i];
        } else {
            // BN = 8: column t + 4 sits two lanes on (c + 2); lanes with c < 2 hold the tokens.
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[mt][0][i] += __shfl_down_sync(0xffffffffu, acc[mt][0][i], 2);
        }
    }

    if (p.mode == kStore) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int gr = row0 + warp * MT * 16 + mt * 16 + g + (i >= 2 ? 8 : 0);
                    const int t = nt * 8 + 2 * c + (i & 1);
                    if (gr >= p.rows || t >= p.m_hi) continue;
                    const int64_t orow = p.out_rows ? p.out_rows[t] : t;
                    p.y[orow * p.ldy + gr] = acc[mt][nt][i];
                }
        return;
    }

    // Gate/up: rows g (gate) and g+8 (up) of a tile are feature f = tile*8 + g.
    Act* hq = static_cast<Act*>(p.hq);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int tile = (row0 + warp * MT * 16 + mt * 16) >> 4;
                const int f = tile * 8 + g;
                const int t = nt * 8 + 2 * c + j;
                if (f >= p.rows || t >= p.m_hi) continue;
                const float v = swiglu_dev(acc[mt][nt][j], acc[mt][nt][2 + j], p.limit, p.llama);
                const Act hi = to_act<Act>(v);
                const int col = p.hperm ? mx_column(f) : f;
                hq[static_cast<int64_t>(t) * p.ldh + col] = hi;
                if (p.lo_off) hq[static_cast<int64_t>(p.lo_off + t) * p.ldh + col] = to_act<Act>(v - act_float(hi));
            }
}

// ---------------------------------------------------------------------------------------------
// Host side

template <int WT, int WARPS, int MT, int NT, int KBASE, int STAGES>
struct Launch {
    using C = Cfg<WT, WARPS, MT, NT, KBASE, STAGES>;
    static int blocks_per_sm() {
        static int n = [] {
            auto* k = qmm_kernel<WT, WARPS, MT, NT, KBASE, STAGES>;
            BG_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
            int b = 0;
            BG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, C::kThreads, C::SMEM));
            BG_CHECK_MSG(b >= 1, "quant_matmul: a tile does not fit on this GPU");
            return b;
        }();
        return n;
    }
    // Fills kb_split/splits for mma_rows rows (the caller's view), launches.
    static void run(KParams p, int mma_rows, const QuantMatmulWorkspace& ws, cudaStream_t stream) {
        const int row_tiles = (mma_rows + C::BM - 1) / C::BM;
        const int nchunks = (p.nkb + C::KCB - 1) / C::KCB;
        int split = 1;
        if (ws.forced_split() > 0) {
            split = ws.forced_split();
        } else {
            // At most one wave of CTAs: as many splits as fit beside the row tiles, each split at
            // least two chunks long.
            const int target = ws.sm_count() * blocks_per_sm();
            split = std::max(1, target / row_tiles);
            split = std::min(split, std::max(1, nchunks / 2));
        }
        // The partial sums must fit the workspace, and each row tile needs its counter.
        p.prow = row_tiles * C::BM;
        const int64_t per_split = static_cast<int64_t>(p.m) * p.prow;
        split = static_cast<int>(std::min<int64_t>(split, static_cast<int64_t>(kQuantPartialFloats) / per_split));
        if (row_tiles > kQuantCounters) split = 1;
        split = std::max(1, std::min(split, nchunks));
        const int chunks_per_split = (nchunks + split - 1) / split;
        p.kb_split = chunks_per_split * C::KCB;
        p.splits = (p.nkb + p.kb_split - 1) / p.kb_split;
        p.part = ws.partials();
        p.counters = ws.counters();
        blocks_per_sm();  // sets the shared-memory attribute once
        const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(p.splits));
        BG_CUDA_CHECK(
            launch_kernel(qmm_kernel<WT, WARPS, MT, NT, KBASE, STAGES>, grid, C::kThreads, C::SMEM, stream, p));
    }
};

// Shared memory a block may opt in to on the current device (sm_86: 99 KB, sm_90: 227 KB), or
// sm_86's where the workspace asks for its tiles.
constexpr int kSm86SmemOptin = 99 * 1024;
inline int smem_optin(const QuantMatmulWorkspace& ws) {
    static int n = [] {
        int dev = 0, v = 0;
        BG_CUDA_CHECK(cudaGetDevice(&dev));
        BG_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        return v;
    }();
    return ws.small_shared_memory() ? std::min(n, kSm86SmemOptin) : n;
}

// Tile shapes by tokens in the chunk (see quant_matmul.cuh). The 256-row tiles keep 2 stages
// where shared memory is small (sm_86) and take 4 where it is not (sm_90): one CTA per SM, so
// the stages are all the bytes in flight.
// Tile shapes by activation columns (quant_matmul.cuh; the choice is bench_gpu's, measured on an
// H200 with the alternatives of QuantMatmulWorkspace::set_tile_variant: bench/KERNELS.md):
//  - <= 8 columns: 64 rows, 4 warps, K chunks of 8 blocks, 3 stages (the alternatives measured
//    within 2 % of it at 1-3 tokens);
//  - <= 16: 128 rows, 8 warps of one 16-row tile each (15-20 % faster than 4 warps of two tiles
//    at 8 tokens: twice the warps per SM to hide the shared-memory and MMA latency);
//  - <= 32: 256 rows, 8 warps; 4 stages (one CTA per SM) for matrices under 4096 rows, where
//    split-K fills the GPU, 2 stages (several CTAs per SM) from 4096 rows on (20 % faster on
//    attn_q_b and attn_output_b at 16 tokens); always 2 where shared memory is small (sm_86);
//  - <= 64: 256 x 64, 4 stages where shared memory allows, else 2.
template <int WT>
void launch_qmm(const KParams& p, int mma_rows, const QuantMatmulWorkspace& ws, cudaStream_t stream) {
    const int v = ws.tile_variant();
    const bool big_smem = smem_optin(ws) >= Cfg<WT, 8, 2, 8, 4, 4>::SMEM + 64;
    if (p.m <= 8) {
        switch (v) {
            case 1: Launch<WT, 4, 1, 1, 4, 3>::run(p, mma_rows, ws, stream); break;
            case 2: Launch<WT, 8, 1, 1, 4, 3>::run(p, mma_rows, ws, stream); break;
            case 3: Launch<WT, 4, 1, 1, 4, 2>::run(p, mma_rows, ws, stream); break;
            default: Launch<WT, 4, 1, 1, 8, 3>::run(p, mma_rows, ws, stream);
        }
    } else if (p.m <= 16) {
        switch (v) {
            case 1: Launch<WT, 4, 1, 2, 4, 3>::run(p, mma_rows, ws, stream); break;
            case 3: Launch<WT, 4, 2, 2, 4, 2>::run(p, mma_rows, ws, stream); break;
            case 4: Launch<WT, 4, 2, 2, 4, 3>::run(p, mma_rows, ws, stream); break;
            default: Launch<WT, 8, 1, 2, 4, 3>::run(p, mma_rows, ws, stream);
        }
    } else if (p.m <= 32) {
        const bool four_stages = big_smem && (v == 4 || (v == 0 && mma_rows < 4096));
        switch (v) {
            case 1: Launch<WT, 4, 2, 4, 4, 3>::run(p, mma_rows, ws, stream); break;
            case 2: Launch<WT, 8, 1, 4, 4, 3>::run(p, mma_rows, ws, stream); break;
            default:
                if (four_stages) {
                    Launch<WT, 8, 2, 4, 4, 4>::run(p, mma_rows, ws, stream);
                } else {
                    Launch<WT, 8, 2, 4, 4, 2>::run(p, mma_rows, ws, stream);
                }
        }
    } else {
        if (big_smem) {
            Launch<WT, 8, 2, 8, 4, 4>::run(p, mma_rows, ws, stream);
        } else {
            Launch<WT, 8, 2, 8, 4, 2>::run(p, mma_rows, ws, stream);
        }
    }
}

// Launches the kernel for weight type WT (defined in quant_matmul_<type>.cu).
extern template void launch_qmm<static_cast<int>(GgmlType::MXFP4)>(const KParams&, int, const QuantMatmulWorkspace&,
                                                                     cudaStream_t);
extern template void launch_qmm<static_cast<int>(GgmlType::Q8_0)>(const KParams&, int, const QuantMatmulWorkspace&,
                                                                    cudaStream_t);
extern template void launch_qmm<static_cast<int>(GgmlType::BF16)>(const KParams&, int, const QuantMatmulWorkspace&,
                                                                    cudaStream_t);

}  // namespace bg::cuda::qmm
