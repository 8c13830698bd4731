#include "cpu/int8_matmul.h"

#include <algorithm>

#include "cpu/int8_rows.h"
#include "tensor/qtypes/all.h"
#include "tensor/qtypes/int8_act.h"
#include "util/check.h"

namespace bg::cpu {

namespace {

// One 16-weight half's exact integer dot product (GCC vectorises this with widening multiplies).
inline int32_t dot16(const int8_t* a, const int8_t* b) {
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
    return s;
}

// The portable kernel: each row unpacked once to int8 with its half scales and mins, then one
// exact integer dot product a 16-weight half and token.
template <class T>
void rows_int8(const Int8RowsArgs& a, int64_t r0, int64_t r1) {
    const MatView& W = *a.W;
    const int64_t nb = W.cols / 32;
    thread_local std::vector<int8_t> wq;  // [cols] this row as int8
    thread_local std::vector<float> wd;   // [nb][2] its half scales
    thread_local std::vector<float> wm;   // [nb][2] its half mins
    if (static_cast<int64_t>(wq.size()) < W.cols) wq.resize(static_cast<size_t>(W.cols));
    if (static_cast<int64_t>(wd.size()) < 2 * nb) wd.resize(static_cast<size_t>(2 * nb));
    if (static_cast<int64_t>(wm.size()) < 2 * nb) wm.resize(static_cast<size_t>(2 * nb));
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W.data + static_cast<uint64_t>(r) * W.row_stride;
        for (int64_t b = 0; b < nb; ++b) T::unpack(row, b, wq.data() + b * 32, wd.data() + 2 * b, wm.data() + 2 * b);
        for (int64_t t = 0; t < a.n_tok; ++t) {
            const int8_t* q = a.xq + t * W.cols;
            const float* d = a.xd + t * nb;
            const int32_t* s = T::kHasMin ? a.xs + t * 2 * nb : nullptr;
            const int32_t no_sums[2] = {0, 0};
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const int8_t* w = wq.data() + b * 32;
                const int32_t isum[2] = {dot16(w, q + b * 32), dot16(w + 16, q + b * 32 + 16)};
                acc += qtypes::chunk_partial<T>(wd.data() + 2 * b, wm.data() + 2 * b, d[b], isum,
                                                T::kHasMin ? s + 2 * b : no_sums);
            }
            a.y[t * a.ldy + r] = acc;
        }
    }
}

// The sum of 16 int8 values: a 16-weight half's activation sum (the min term's factor).
int32_t half_sum(const int8_t* q) {
    int32_t v = 0;
    for (int i = 0; i < 16; ++i) v += q[i];
    return v;
}

// One call's work, as the work split's function sees it.
struct Split {
    Int8RowsArgs args;
    CpuIsa isa;
    int64_t group;  // int8_rows_together
};

}  // namespace

void quantize_int8_rows(const float* x, int64_t ldx, int64_t n_tok, int64_t cols, int8_t* q, float* d) {
    quantize_int8_blocks(x, ldx, cols, 0, n_tok * (cols / qtypes::kActBlock), q, d, nullptr);
}

void int8_half_sums(const int8_t* q, int64_t n_tok, int64_t cols, int32_t* s) {
    BG_CHECK(cols % 16 == 0);
    for (int64_t h = 0; h < n_tok * cols / 16; ++h) s[h] = half_sum(q + h * 16);
}

void quantize_int8_blocks(const float* x, int64_t ldx, int64_t cols, int64_t i0, int64_t i1, int8_t* q, float* d,
                          int32_t* s) {
    BG_CHECK(cols % qtypes::kActBlock == 0);
    const int64_t nb = cols / qtypes::kActBlock;
    for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = i / nb, b = i % nb;
        int8_t* qb = q + t * cols + b * 32;
        int32_t sum = 0;
        d[t * nb + b] = qtypes::quantize_act_block(x + t * ldx + b * 32, qb, &sum);
        if (s) {
            s[t * 2 * nb + 2 * b] = half_sum(qb);
            s[t * 2 * nb + 2 * b + 1] = half_sum(qb + 16);
        }
    }
}

int64_t int8_rows_together(CpuIsa isa, GgmlType type, int64_t n_tok) {
    switch (isa) {
        case CpuIsa::kAvx512: return int8_avx512_rows(type, n_tok);
        case CpuIsa::kAvx2: return kAvx2Rows;
        default: return 1;
    }
}

void int8_rows(CpuIsa isa, const Int8RowsArgs& a, int64_t r0, int64_t r1) {
    switch (isa) {
        case CpuIsa::kAvx512: int8_rows_avx512(a, r0, r1); break;
        case CpuIsa::kAvx2: int8_rows_avx2(a, r0, r1); break;
        default: int8_rows_portable(a, r0, r1); break;
    }
}

void int8_rows_portable(const Int8RowsArgs& a, int64_t r0, int64_t r1) {
    qtypes::visit(a.W->type, [&](auto traits) { rows_int8<decltype(traits)>(a, r0, r1); });
}

const char* cpu_isa_name(CpuIsa isa) {
    switch (isa) {
        case CpuIsa::kAvx2: return "avx2";
        case CpuIsa::kAvx512: return "avx512vnni";
        default: return "portable";
    }
}

bool cpu_isa_usable(CpuIsa isa) {
    if (isa == CpuIsa::kPortable) return true;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const bool avx2 = int8_avx2_built() && __builtin_cpu_supports("avx2");
    if (isa == CpuIsa::kAvx2) return avx2;
    // The AVX-512 kernel hands every case but its own to the AVX2 one, so it needs AVX2 too (every
    // CPU with AVX-512 has it). The checks include the OS's saving of the zmm and mask registers.
    return avx2 && int8_avx512_built() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

CpuIsa best_cpu_isa() {
    for (const CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2})
        if (cpu_isa_usable(isa)) return isa;
    return CpuIsa::kPortable;
}

void matmul_int8(ThreadPool& pool, Int8MatmulScratch& s, const MatView& W, const float* x, int64_t ldx, int64_t n_tok,
                 float* y, int64_t ldy, CpuIsa isa) {
    BG_CHECK_MSG(qtypes::int8_path_takes(W.type), "matmul_int8: a weight type without int8 traits");
    if (!cpu_isa_usable(isa)) fail("matmul_int8: the %s kernel is not usable on this machine", cpu_isa_name(isa));
    BG_CHECK(W.cols > 0 && W.cols % 32 == 0);
    BG_CHECK(W.data != nullptr || W.rows == 0);
    BG_CHECK(W.row_stride >= row_bytes(W.type, W.cols));
    BG_CHECK(n_tok <= 1 || (ldx >= W.cols && ldy >= W.rows));
    if (W.rows == 0 || n_tok <= 0) return;
    const int64_t nb = W.cols / 32;
    if (static_cast<int64_t>(s.xq.size()) < n_tok * W.cols) s.xq.resize(static_cast<size_t>(n_tok * W.cols));
    if (static_cast<int64_t>(s.xd.size()) < n_tok * nb) s.xd.resize(static_cast<size_t>(n_tok * nb));
    quantize_int8_rows(x, ldx, n_tok, W.cols, s.xq.data(), s.xd.data());
    // The half sums: for the min term of the types that have one, and for the AVX2 and AVX-512
    // kernels' one-token products (their weights go in offset; see int8_matmul_avx2.cpp and
    // int8_matmul_avx512.cpp).
    const bool has_min = qtypes::visit(W.type, [](auto traits) { return decltype(traits)::kHasMin; });
    if (has_min || isa != CpuIsa::kPortable) {
        if (static_cast<int64_t>(s.xs.size()) < n_tok * 2 * nb) s.xs.resize(static_cast<size_t>(n_tok * 2 * nb));
        int8_half_sums(s.xq.data(), n_tok, W.cols, s.xs.data());
    }
    const Int8RowsArgs args{&W, s.xq.data(), s.xd.data(), s.xs.data(), n_tok, y, ldy};
    // The work goes out in groups of the rows the kernel takes together (the last may be short).
    const Split split{args, isa, int8_rows_together(isa, W.type, n_tok)};
    const int64_t group = split.group;
    const Split* sp = &split;
    const auto fn = [sp](int64_t g0, int64_t g1) {
        int8_rows(sp->isa, sp->args, g0 * sp->group, std::min(g1 * sp->group, sp->args.W->rows));
    };
    const int64_t work_per_group = std::max<int64_t>(1, W.cols * n_tok * group);
    const int64_t min_chunk = std::max<int64_t>(1, (int64_t{1} << 16) / work_per_group);
    pool.parallel_for((W.rows + group - 1) / group, fn, min_chunk);
}

}  // namespace bg::cpu
