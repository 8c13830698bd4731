// The integer tensor-core kernels (engine/cuda/int8_matmul.cuh, `--matmul fast`) on fresh random
// inputs, at full width and odd sizes, for every weight type with int8 traits (tensor/qtypes):
//  - the activations the kernels see are bit-identical to the CPU's quantisation
//    (tensor/qtypes/int8_act.h), so both backends start from the same int8 values;
//  - int8_matmul against a float64 reference of the same arithmetic (weights by the exact
//    dequantize_row, activations q * d, double sums): every block sum is exact, so only FP32
//    summation differs: ||y - ref|| / ||ref|| <= 1e-5 (expected ~1e-7); and against the CPU's
//    matmul_int8 (another summation order) likewise;
//  - int8_expert_ffn against the float64 reference of its arithmetic: x quantised, gate and up
//    in double, h = SwiGLU of their FP32 values quantised by the CPU function, down in double.
//    The GPU's h comes from FP32 sums in another order, and now and then one of its values lands
//    on the other side of an int8 rounding boundary: one step of one block, which moves that
//    token's output by about 1e-4 relative (seen on the H200 in 2 of 4 runs of the 70-token case).
//    So per token: ||y_t - ref_t|| / ||ref_t|| <= 1e-5 (expected ~1e-7) for all but at most
//    max(2, M/16) tokens, and <= 5e-3 for every token: a wrong tile, pass or block would spoil
//    many tokens or spoil them by more;
//  - outputs are poisoned (NaN) first: every output written, nothing else touched; each case runs
//    twice and must give the same bits (split-K partials added in a fixed order);
//  - passes of 1-2 tokens go through the GEMV kernel (int8_gemv_kernel.cuh): those cases run on
//    it and on the MMA kernel, each held to the same reference.
// Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/int8_matmul.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "cuda/check.cuh"
#include "cuda/dequant.cuh"
#include "cuda/int8_matmul.cuh"
#include "device_buffer.h"
#include "device_mat.h"
#include "random_inputs.h"
#include "random_weights.h"
#include "tensor/qtypes/int8_act.h"

using namespace bg;

namespace {

using bgtest::Cmp;
using bgtest::compare;
using bgtest::Dev;
using bgtest::DevMat;
using bgtest::fresh_rng;
using bgtest::HostMat;
using bgtest::random_mat;

constexpr double kTolMatmul = 1e-5;
constexpr double kTolFfnToken = 1e-5;    // a token's output, no h value stepped
constexpr double kTolFfnStepped = 5e-3;  // a token's output with an h value one step off
// Tokens allowed an h value one step off: a token steps with a probability of about 1 %, and 2 of
// 70 did in one H200 run (engine 31a51fb); a wrong n-tile or pass would spoil 8 or more.
int64_t max_stepped(int64_t M) { return std::max<int64_t>(2, M / 16); }

// y[t][r] = sum_i deq(W)[r][i] * q[t][i] * d[t][i/32] in double; q, d: [M][cols], [M][cols/32].
std::vector<double> ref_int8(const HostMat& W, const int8_t* q, const float* d, int64_t M) {
    const int64_t nb = W.cols / 32;
    std::vector<double> y(static_cast<size_t>(M * W.rows));
    for (int64_t t = 0; t < M; ++t)
        for (int64_t r = 0; r < W.rows; ++r) {
            const float* w = W.deq.data() + r * W.cols;
            double s = 0;
            for (int64_t b = 0; b < nb; ++b) {
                double sb = 0;
                for (int i = 0; i < 32; ++i) sb += static_cast<double>(w[b * 32 + i]) * q[t * W.cols + b * 32 + i];
                s += sb * d[t * nb + b];
            }
            y[t * W.rows + r] = s;
        }
    return y;
}

TEST(Int8Quantize, KernelsSeeTheCpuQuantisation) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: int8 quantisation not tested";
    auto rng = fresh_rng();
    for (int64_t M : {1, 7, 8, 13, 64}) {
        const int64_t cols = 5120, ldx = cols + 3;
        std::vector<float> x = bgtest::uniform(rng, M * ldx, -3.0f, 3.0f);
        for (int64_t i = 0; i < 32; ++i) x[i] = 0.0f;  // one all-zero block: scale 0
        Dev<float> dx(x);
        cuda::Int8Workspace ws(cols, 0);
        std::vector<int8_t> q(static_cast<size_t>(M * cols)), qc(q.size());
        std::vector<float> d(static_cast<size_t>(M * cols / 32)), dc(d.size());
        cuda::int8_quantize_for_test(ws, dx.get(), ldx, M, cols, q.data(), d.data(), nullptr);
        cpu::quantize_int8_rows(x.data(), ldx, M, cols, qc.data(), dc.data());
        ASSERT_EQ(std::memcmp(q.data(), qc.data(), q.size()), 0) << "M " << M << ": int8 values differ from the CPU's";
        ASSERT_EQ(std::memcmp(d.data(), dc.data(), d.size() * sizeof(float)), 0) << "M " << M << ": scales differ";
    }
}

struct MatCase {
    GgmlType type;
    int64_t rows, cols, M;
    uint64_t pad = 0;
    int offset = 0;  // byte offset of W.data from a 16-byte boundary
    int split = 0;   // 0: heuristic
};

std::string mat_name(const MatCase& c) {
    std::ostringstream s;
    s << type_name(c.type) << "_r" << c.rows << "_c" << c.cols << "_M" << c.M;
    if (c.pad) s << "_pad" << c.pad;
    if (c.offset) s << "_off" << c.offset;
    if (c.split) s << "_split" << c.split;
    return s.str();
}

class Int8MatmulGpu : public ::testing::TestWithParam<MatCase> {};

TEST_P(Int8MatmulGpu, MatchesFloat64ReferenceAndTheCpu) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: int8_matmul not tested";
    const MatCase c = GetParam();
    auto rng = fresh_rng();
    const HostMat W = random_mat(c.type, c.rows, c.cols, c.pad, rng);
    const int64_t ldx = c.cols + 3, ldy = c.rows + 5;
    const std::vector<float> x = bgtest::uniform(rng, c.M * ldx, -1.0f, 1.0f);
    std::vector<int8_t> q(static_cast<size_t>(c.M * c.cols));
    std::vector<float> d(static_cast<size_t>(c.M * c.cols / 32));
    cpu::quantize_int8_rows(x.data(), ldx, c.M, c.cols, q.data(), d.data());
    const std::vector<double> ref = ref_int8(W, q.data(), d.data(), c.M);

    cpu::ThreadPool pool(2);
    cpu::Int8MatmulScratch scratch;
    std::vector<float> ycpu(static_cast<size_t>(c.M * c.rows));
    cpu::matmul_int8(pool, scratch, MatView{W.bytes.data(), c.type, c.cols, c.rows, W.stride}, x.data(), ldx, c.M,
                     ycpu.data(), c.rows);

    DevMat dW(W, c.offset);
    Dev<float> dx(x);
    Dev<float> dy(static_cast<size_t>(c.M * ldy));
    // Passes the GEMV kernel takes (set_gemv_tokens) run on it and on the MMA kernel: both are
    // held to the same reference.
    for (bool gemv : {true, false}) {
        if (gemv && c.M > cuda::Int8Workspace::kGemvMaxTokens) continue;
        cuda::Int8Workspace ws(c.cols, 0);
        ws.force_split(c.split);
        ws.set_gemv_tokens(gemv ? cuda::Int8Workspace::kGemvMaxTokens : 0);
        std::vector<float> first;
        for (int run = 0; run < 2; ++run) {
            BG_CUDA_CHECK(cudaMemset(dy.get(), 0xff, c.M * ldy * sizeof(float)));
            cuda::int8_matmul(ws, dW.view, dx.get(), ldx, c.M, dy.get(), ldy, nullptr);
            BG_CUDA_CHECK(cudaGetLastError());
            BG_CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> yall = dy.download();
            if (run == 0) first = yall;
            else ASSERT_EQ(std::memcmp(first.data(), yall.data(), yall.size() * sizeof(float)), 0) << "not deterministic";
            std::vector<float> out(static_cast<size_t>(c.M * c.rows));
            for (int64_t t = 0; t < c.M; ++t) {
                for (int64_t r = 0; r < c.rows; ++r) out[t * c.rows + r] = yall[t * ldy + r];
                for (int64_t r = c.rows; r < ldy; ++r) {
                    uint32_t bits;
                    std::memcpy(&bits, &yall[t * ldy + r], 4);
                    ASSERT_EQ(bits, 0xffffffffu) << "wrote y[" << t << "][" << r << "], past the row's outputs";
                }
            }
            const Cmp cmp = compare(out, ref);
            ASSERT_LT(cmp.bad, 0) << "output [token " << cmp.bad / c.rows << "][row " << cmp.bad % c.rows << "] not written";
            EXPECT_LE(cmp.rel, kTolMatmul) << "||y-ref||/||ref|| = " << cmp.rel;
            std::vector<double> cpu_as_ref(ycpu.begin(), ycpu.end());
            const Cmp vs_cpu = compare(out, cpu_as_ref);
            EXPECT_LE(vs_cpu.rel, kTolMatmul) << "against the CPU's matmul_int8: " << vs_cpu.rel;
            if (run == 0)
                std::printf("  %s%s: rel err %.3g (float64), %.3g (CPU)\n", mat_name(c).c_str(),
                            c.M <= cuda::Int8Workspace::kGemvMaxTokens ? (gemv ? " gemv" : " mma") : "", cmp.rel, vs_cpu.rel);
        }
    }
}

std::vector<MatCase> mat_cases() {
    std::vector<MatCase> v;
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0}) {
        // The expert's shapes at full width, every token count class.
        for (int64_t M : {1, 3, 8, 9, 16, 33, 64, 65, 130}) v.push_back({t, 2304, 5120, M});
        for (int64_t M : {1, 8, 64}) v.push_back({t, 5120, 2304, M});
        // Odd row counts, narrow and padded rows, unaligned data, forced splits.
        v.push_back({t, 37, 96, 5, 0, 3});
        v.push_back({t, 100, 160, 17, 7, 1});
        v.push_back({t, 1, 32, 1});
        v.push_back({t, 300, 1280, 16, 0, 0, 1});
        v.push_back({t, 300, 1280, 16, 0, 0, 3});
        v.push_back({t, 129, 4096, 40, 1, 2, 7});
        // Few rows of a wide K: the GEMV shares a row between up to 8 warps (the mHC mix's
        // 24 x 20480), with rows left over in the last CTA.
        v.push_back({t, 24, 20480, 1});
        v.push_back({t, 13, 8192, 3, 3, 1});
        // The GEMV's 1-2 tokens where its 16-chunk spans meet odd rows: fewer chunks than a span,
        // a last span cut short, rows at any byte (padded strides, unaligned data), and two
        // tokens of 20,480 columns (over 48 KiB of shared memory, the opt-in launch).
        v.push_back({t, 37, 96, 2, 0, 3});
        v.push_back({t, 100, 160, 1, 7, 1});
        v.push_back({t, 300, 1280, 2, 5, 9});
        v.push_back({t, 129, 4096, 1, 1, 2});
        v.push_back({t, 24, 20480, 2, 0, 5});
    }
    // The 256-weight types (rows of whole super-blocks): one super-block a pipeline step, two
    // m16n8k16 MMAs a chunk where scales cover 16 weights, the min term from the half sums;
    // passes of fewer than 64 tokens where a super-block leaves shared memory for fewer n-tiles.
    for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                       GgmlType::IQ2_XXS}) {
        for (int64_t M : {1, 8, 16, 64, 65}) v.push_back({t, 2304, 5120, M});
        v.push_back({t, 5120, 2304, 8});
        v.push_back({t, 37, 256, 5, 0, 3});
        v.push_back({t, 100, 512, 17, 7, 1});
        v.push_back({t, 300, 1280, 16, 0, 0, 3});
        v.push_back({t, 129, 4096, 40, 1, 2, 7});
        v.push_back({t, 13, 8192, 3, 3, 1});
        v.push_back({t, 37, 256, 1, 0, 3});
        v.push_back({t, 100, 512, 2, 7, 1});
        v.push_back({t, 129, 4352, 2, 1, 2});  // 17 super-blocks: a last span of one
    }
    return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, Int8MatmulGpu, ::testing::ValuesIn(mat_cases()),
                         [](const auto& info) { return mat_name(info.param); });

// The grouped GEMV (int8_matmul_grouped, the attention's grouped output projection at decode):
// every group's y is int8_matmul's on its rows and its columns of x, in one launch, up to the
// order of the FP32 sums across a row's warps (the launch's row count sets its warps a row:
// y[0][0] of the o_a case differed by 4 ulp on an H200) and the same bits run to run; passes the
// GEMV does not take run a matmul a group. Outputs outside the groups' columns stay poisoned.
TEST(Int8MatmulGroupedGpu, EachGroupEqualsItsOwnMatmul) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: int8_matmul_grouped not tested";
    struct Case {
        GgmlType type;
        int64_t groups, group_rows, cols, M;
    };
    // The full-scale o_a (8 groups of 1024 rows of 4096), small groups with the GEMV's several
    // warps a row, and a K-quant; 3 tokens go through the MMA kernel a group.
    const Case cases[] = {{GgmlType::Q8_0, 8, 1024, 4096, 1}, {GgmlType::Q8_0, 8, 1024, 4096, 2},
                          {GgmlType::MXFP4, 4, 64, 512, 1},   {GgmlType::Q4_K, 3, 16, 2048, 2},
                          {GgmlType::Q8_0, 2, 40, 256, 3}};
    auto rng = fresh_rng();
    for (const Case& c : cases) {
        const int64_t rows = c.groups * c.group_rows, xcols = c.groups * c.cols;
        const HostMat W = random_mat(c.type, rows, c.cols, 0, rng);
        const int64_t ldx = xcols + 3, ldy = rows + 5;
        const std::vector<float> x = bgtest::uniform(rng, c.M * ldx, -1.0f, 1.0f);
        DevMat dW(W, 0);
        Dev<float> dx(x);
        Dev<float> dy(static_cast<size_t>(c.M * ldy)), dyg(static_cast<size_t>(c.M * ldy));
        cuda::Int8Workspace ws(c.cols, 0);
        BG_CUDA_CHECK(cudaMemset(dy.get(), 0xff, c.M * ldy * sizeof(float)));
        BG_CUDA_CHECK(cudaMemset(dyg.get(), 0xff, c.M * ldy * sizeof(float)));
        cuda::int8_matmul_grouped(ws, dW.view, c.groups, dx.get(), ldx, c.M, dy.get(), ldy, nullptr);
        BG_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> first = dy.download();
        cuda::int8_matmul_grouped(ws, dW.view, c.groups, dx.get(), ldx, c.M, dy.get(), ldy, nullptr);
        for (int64_t g = 0; g < c.groups; ++g) {
            cuda::DeviceMat Wg = dW.view;
            Wg.data += static_cast<uint64_t>(g * c.group_rows) * Wg.row_stride;
            Wg.rows = c.group_rows;
            cuda::int8_matmul(ws, Wg, dx.get() + g * c.cols, ldx, c.M, dyg.get() + g * c.group_rows, ldy, nullptr);
        }
        BG_CUDA_CHECK(cudaGetLastError());
        BG_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = dy.download(), want = dyg.download();
        ASSERT_EQ(std::memcmp(first.data(), got.data(), got.size() * sizeof(float)), 0) << "not deterministic";
        std::vector<float> g_rows, w_rows;
        for (int64_t t = 0; t < c.M; ++t)
            for (int64_t r = 0; r < ldy; ++r) {
                if (r >= rows) {
                    uint32_t a;
                    std::memcpy(&a, &got[t * ldy + r], 4);
                    ASSERT_EQ(a, 0xffffffffu) << "wrote past the groups' rows";
                    continue;
                }
                g_rows.push_back(got[t * ldy + r]);
                w_rows.push_back(want[t * ldy + r]);
            }
        const Cmp cmp = compare(g_rows, std::vector<double>(w_rows.begin(), w_rows.end()));
        ASSERT_LT(cmp.bad, 0) << "output " << cmp.bad << " not written";
        EXPECT_LE(cmp.rel, kTolMatmul) << type_name(c.type) << " groups " << c.groups << " M " << c.M;
        // And the values are a matmul's at all: group 0's first row against float64.
        std::vector<int8_t> q(static_cast<size_t>(c.M * xcols));
        std::vector<float> d(static_cast<size_t>(c.M * xcols / 32));
        cpu::quantize_int8_rows(x.data(), ldx, c.M, xcols, q.data(), d.data());
        double s = 0, mag = 0;
        for (int64_t i = 0; i < c.cols; ++i) {
            const double v = static_cast<double>(W.deq[i]) * q[i] * d[i / 32];
            s += v;
            mag += std::fabs(v);
        }
        EXPECT_NEAR(got[0], s, 1e-5 * mag) << type_name(c.type);
    }
}

// Several matrices of one input (int8_matmul_many, the attention's projections of x at decode):
// each y is int8_matmul's (up to the order of the sums across a row's warps, as above), whether
// its matrix shared a launch with others of its type (runs of up to eight), ran alone (rows not
// whole CTAs, a type of its own), or went through the MMA kernel (3 tokens: there bit for bit);
// nothing written past a matrix's rows.
TEST(Int8MatmulManyGpu, EachMatrixEqualsItsOwnMatmul) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: int8_matmul_many not tested";
    struct Mat {
        GgmlType type;
        int64_t rows;
    };
    const int64_t cols = 5120;
    // The slice's compressed layer (q_a, kv, compressor kv and gate, indexer weights), then mixed
    // types and odd rows, then ten matrices (two runs).
    const std::vector<std::vector<Mat>> sets = {
        {{GgmlType::Q8_0, 1280}, {GgmlType::Q8_0, 512}, {GgmlType::Q8_0, 512}, {GgmlType::Q8_0, 512}, {GgmlType::Q8_0, 32}},
        {{GgmlType::Q8_0, 64}, {GgmlType::MXFP4, 96}, {GgmlType::MXFP4, 37}, {GgmlType::Q8_0, 24}, {GgmlType::Q6_K, 40}},
        std::vector<Mat>(10, Mat{GgmlType::Q8_0, 16}),
    };
    auto rng = fresh_rng();
    for (int64_t M : {1, 2, 3}) {
        for (const auto& set : sets) {
            const int n = static_cast<int>(set.size());
            std::vector<HostMat> hw;
            std::vector<std::unique_ptr<DevMat>> dw;
            std::vector<cuda::DeviceMat> views;
            for (const Mat& m : set) {
                hw.push_back(random_mat(m.type, m.rows, cols, 0, rng));
                dw.push_back(std::make_unique<DevMat>(hw.back(), 0));
                views.push_back(dw.back()->view);
            }
            const int64_t ldx = cols + 3;
            const std::vector<float> x = bgtest::uniform(rng, M * ldx, -1.0f, 1.0f);
            Dev<float> dx(x);
            std::vector<std::unique_ptr<Dev<float>>> got, want;
            std::vector<float*> yg;
            std::vector<int64_t> ld;
            for (const Mat& m : set) {
                ld.push_back(m.rows + 5);
                got.push_back(std::make_unique<Dev<float>>(static_cast<size_t>(M * ld.back())));
                want.push_back(std::make_unique<Dev<float>>(static_cast<size_t>(M * ld.back())));
                BG_CUDA_CHECK(cudaMemset(got.back()->get(), 0xff, M * ld.back() * sizeof(float)));
                BG_CUDA_CHECK(cudaMemset(want.back()->get(), 0xff, M * ld.back() * sizeof(float)));
                yg.push_back(got.back()->get());
            }
            cuda::Int8Workspace ws(cols, 0);
            cuda::int8_matmul_many(ws, views.data(), n, dx.get(), ldx, M, yg.data(), ld.data(), nullptr);
            for (int i = 0; i < n; ++i) cuda::int8_matmul(ws, views[i], dx.get(), ldx, M, want[i]->get(), ld[i], nullptr);
            BG_CUDA_CHECK(cudaGetLastError());
            BG_CUDA_CHECK(cudaDeviceSynchronize());
            for (int i = 0; i < n; ++i) {
                const std::vector<float> a = got[i]->download(), b = want[i]->download();
                if (M > cuda::Int8Workspace::kGemvMaxTokens) {
                    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "M " << M << " matrix " << i;
                }
                std::vector<float> ga;
                std::vector<double> gb;
                for (int64_t t = 0; t < M; ++t) {
                    uint32_t bits;
                    std::memcpy(&bits, &a[t * ld[i] + set[i].rows], 4);
                    ASSERT_EQ(bits, 0xffffffffu) << "wrote past matrix " << i << "'s rows";
                    for (int64_t r = 0; r < set[i].rows; ++r) {
                        ga.push_back(a[t * ld[i] + r]);
                        gb.push_back(b[t * ld[i] + r]);
                    }
                }
                const Cmp cmp = compare(ga, gb);
                ASSERT_LT(cmp.bad, 0) << "M " << M << " matrix " << i << ": output " << cmp.bad << " not written";
                EXPECT_LE(cmp.rel, kTolMatmul) << "M " << M << " matrix " << i << " (" << type_name(set[i].type) << ", "
                                               << set[i].rows << " rows)";
            }
        }
    }
}

struct FfnCase {
    GgmlType gate_up, down;
    int64_t n_embd, n_ff, M;
    bool gathered = true;
    float limit = 10.0f;
    SwigluClamp form = SwigluClamp::kDeepSeek;
};

std::string ffn_name(const FfnCase& c) {
    std::ostringstream s;
    s << type_name(c.gate_up) << "_" << type_name(c.down) << "_E" << c.n_embd << "_F" << c.n_ff << "_M" << c.M;
    if (!c.gathered) s << "_plain";
    if (c.form == SwigluClamp::kLlamaCpp) s << "_llama";
    if (c.limit < 1.0f) s << "_clamped";
    return s.str();
}

class Int8ExpertFfnGpu : public ::testing::TestWithParam<FfnCase> {};

TEST_P(Int8ExpertFfnGpu, MatchesFloat64ReferenceOfItsArithmetic) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: int8_expert_ffn not tested";
    const FfnCase c = GetParam();
    auto rng = fresh_rng();
    const int64_t E = c.n_embd, F = c.n_ff;
    const HostMat gate = random_mat(c.gate_up, F, E, 0, rng);
    const HostMat up = random_mat(c.gate_up, F, E, 0, rng);
    const HostMat down = random_mat(c.down, E, F, 0, rng);
    const bgtest::ExpertTokens tk = bgtest::expert_tokens(E, c.M, c.gathered, rng);
    const int64_t T = tk.T, ldx = tk.ldx, ldy = tk.ldy;
    const std::vector<float>& x = tk.x;
    const std::vector<float>& y0 = tk.y0;
    const std::vector<int32_t>& rows = tk.rows;
    const std::vector<int32_t>& out_rows = tk.out_rows;

    // The reference: per token, x quantised, gate/up in double, h in FP32 through cpu::swiglu,
    // h quantised, down in double.
    std::vector<double> want_row(static_cast<size_t>(T * E), 0.0);
    std::vector<int8_t> xq(static_cast<size_t>(E)), hq(static_cast<size_t>(F));
    std::vector<float> xd(static_cast<size_t>(E / 32)), hd(static_cast<size_t>(F / 32));
    std::vector<float> g(static_cast<size_t>(F)), u(static_cast<size_t>(F)), h(static_cast<size_t>(F));
    for (int64_t j = 0; j < c.M; ++j) {
        cpu::quantize_int8_rows(x.data() + rows[j] * ldx, ldx, 1, E, xq.data(), xd.data());
        const std::vector<double> gj = ref_int8(gate, xq.data(), xd.data(), 1);
        const std::vector<double> uj = ref_int8(up, xq.data(), xd.data(), 1);
        for (int64_t f = 0; f < F; ++f) g[f] = static_cast<float>(gj[f]), u[f] = static_cast<float>(uj[f]);
        cpu::swiglu(g.data(), u.data(), F, c.limit, c.form, h.data());
        cpu::quantize_int8_rows(h.data(), F, 1, F, hq.data(), hd.data());
        const std::vector<double> yj = ref_int8(down, hq.data(), hd.data(), 1);
        for (int64_t e = 0; e < E; ++e) want_row[out_rows[j] * E + e] = yj[e];
    }

    DevMat dg(gate, 0), du(up, 0), dd(down, 0);
    Dev<float> dx(x), dy(y0.size());
    Dev<int32_t> drows(rows), dout(out_rows);
    const ExpertMats mats{dg.view, du.view, dd.view};
    for (bool gemv : {true, false}) {
        if (gemv && c.M > cuda::Int8Workspace::kGemvMaxTokens) continue;
        cuda::Int8Workspace ws(std::max(E, F), F);
        ws.set_gemv_tokens(gemv ? cuda::Int8Workspace::kGemvMaxTokens : 0);
        std::vector<float> first;
        for (int run = 0; run < 2; ++run) {
            dy.upload(y0);
            cuda::int8_expert_ffn(ws, mats, dx.get(), ldx, c.gathered ? drows.get() : nullptr, c.M, c.limit, c.form,
                                  dy.get(), ldy, c.gathered ? dout.get() : nullptr, nullptr);
            BG_CUDA_CHECK(cudaGetLastError());
            BG_CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> y = dy.download();
            if (run == 0) first = y;
            else ASSERT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0) << "not deterministic";
            std::vector<bool> written(static_cast<size_t>(T), false);
            for (int32_t r : out_rows) written[r] = true;
            std::vector<float> got;
            std::vector<double> want;
            int64_t stepped = 0;  // tokens over kTolFfnToken: an h value across a rounding boundary
            double worst = 0;
            for (int64_t t = 0; t < T; ++t) {
                std::vector<float> got_t;
                std::vector<double> want_t;
                for (int64_t e = 0; e < ldy; ++e) {
                    const float v = y[t * ldy + e], v0 = y0[t * ldy + e];
                    if (!written[t] || e >= E) {
                        ASSERT_EQ(std::memcmp(&v, &v0, 4), 0) << "y[" << t << "][" << e << "] changed";
                        continue;
                    }
                    got_t.push_back(v);
                    want_t.push_back(want_row[t * E + e]);
                }
                if (got_t.empty()) continue;
                const Cmp ct = compare(got_t, want_t);
                ASSERT_LT(ct.bad, 0) << "token row " << t << ": a routed output is not finite";
                worst = std::max(worst, ct.rel);
                stepped += ct.rel > kTolFfnToken;
                EXPECT_LE(ct.rel, kTolFfnStepped) << "token row " << t;
                got.insert(got.end(), got_t.begin(), got_t.end());
                want.insert(want.end(), want_t.begin(), want_t.end());
            }
            EXPECT_LE(stepped, max_stepped(c.M)) << "tokens over " << kTolFfnToken << " (worst " << worst << ")";
            const Cmp cmp = compare(got, want);
            if (run == 0)
                std::printf("  %s%s: rel err %.3g overall, worst token %.3g, tokens over %.0e: %lld\n", ffn_name(c).c_str(),
                            c.M <= cuda::Int8Workspace::kGemvMaxTokens ? (gemv ? " gemv" : " mma") : "", cmp.rel, worst, kTolFfnToken,
                            static_cast<long long>(stepped));
        }
    }
}

// int8_expert_ffn_batch: every expert's output rows bit for bit what int8_expert_ffn writes for it
// alone, and nothing else of y touched, whichever experts share its launches: the slice's decode
// layer (six full-width MXFP4 experts, one token each, the same row), ten of them (two launches:
// eight, then two), one and two tokens mixed (a launch each count), another type and another
// width among them (alone), and an expert of three tokens (the MMA kernel).
TEST(Int8ExpertFfnBatchGpu, EachExpertEqualsItsOwnFfnBitForBit) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: int8_expert_ffn_batch not tested";
    struct Ex {
        GgmlType gate_up, down;
        int64_t F, M;
    };
    const int64_t E = 5120;
    const std::vector<std::vector<Ex>> sets = {
        std::vector<Ex>(6, Ex{GgmlType::MXFP4, GgmlType::MXFP4, 2304, 1}),
        std::vector<Ex>(10, Ex{GgmlType::MXFP4, GgmlType::MXFP4, 2304, 1}),
        {{GgmlType::MXFP4, GgmlType::MXFP4, 2304, 2},
         {GgmlType::MXFP4, GgmlType::MXFP4, 2304, 1},
         {GgmlType::Q8_0, GgmlType::Q8_0, 2304, 1},
         {GgmlType::MXFP4, GgmlType::MXFP4, 2304, 2},
         {GgmlType::MXFP4, GgmlType::Q8_0, 2304, 1},
         {GgmlType::MXFP4, GgmlType::MXFP4, 2304, 3},
         {GgmlType::MXFP4, GgmlType::MXFP4, 2304, 1},
         {GgmlType::MXFP4, GgmlType::MXFP4, 1056, 1},
         {GgmlType::Q4_K, GgmlType::Q6_K, 2304, 1},
         {GgmlType::Q4_K, GgmlType::Q6_K, 2304, 1}},
    };
    auto rng = fresh_rng();
    for (size_t si = 0; si < sets.size(); ++si) {
        const std::vector<Ex>& set = sets[si];
        const int64_t n = static_cast<int64_t>(set.size());
        int64_t slots = 0, max_f = 0;
        for (const Ex& e : set) slots += e.M, max_f = std::max(max_f, e.F);
        // x: a few rows more than the tokens; every (expert, token) its own output row.
        const int64_t T = slots + 5, ldx = E + 4, ldy = E + 2;
        const std::vector<float> x = bgtest::uniform(rng, T * ldx, -1.0f, 1.0f);
        const std::vector<float> y0 = bgtest::uniform(rng, (slots + 3) * ldy, -0.5f, 0.5f);
        std::vector<int32_t> rows, out_rows(static_cast<size_t>(slots));
        std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(T - 1));
        for (const Ex& e : set) {
            // The decode sets route one token to every expert: the same row for all of them.
            const int32_t same = pick(rng);
            for (int64_t j = 0; j < e.M; ++j) rows.push_back(si < 2 ? same : pick(rng));
        }
        std::iota(out_rows.begin(), out_rows.end(), 0);
        std::shuffle(out_rows.begin(), out_rows.end(), rng);
        std::vector<HostMat> hw;
        std::vector<std::unique_ptr<DevMat>> dw;
        for (const Ex& e : set) {
            hw.push_back(random_mat(e.gate_up, e.F, E, 0, rng));
            dw.push_back(std::make_unique<DevMat>(hw.back(), 0));
            hw.push_back(random_mat(e.gate_up, e.F, E, 0, rng));
            dw.push_back(std::make_unique<DevMat>(hw.back(), 0));
            hw.push_back(random_mat(e.down, E, e.F, 0, rng));
            dw.push_back(std::make_unique<DevMat>(hw.back(), 0));
        }
        Dev<float> dx(x), got(y0.size()), want(y0.size());
        Dev<int32_t> drows(rows), dout(out_rows);
        std::vector<ExpertCall> calls;
        int64_t at = 0;
        for (int64_t i = 0; i < n; ++i) {
            const ExpertMats mats{dw[3 * i]->view, dw[3 * i + 1]->view, dw[3 * i + 2]->view};
            calls.push_back({mats, drows.get() + at, set[i].M, dout.get() + at});
            at += set[i].M;
        }
        cuda::Int8Workspace ws(E, max_f);
        got.upload(y0);
        want.upload(y0);
        cuda::int8_expert_ffn_batch(ws, calls.data(), n, dx.get(), ldx, 6.0f, SwigluClamp::kDeepSeek, got.get(), ldy,
                                    nullptr);
        for (const ExpertCall& c : calls)
            cuda::int8_expert_ffn(ws, c.mats, dx.get(), ldx, c.rows, c.m, 6.0f, SwigluClamp::kDeepSeek, want.get(), ldy,
                                  c.out_rows, nullptr);
        BG_CUDA_CHECK(cudaGetLastError());
        BG_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> a = got.download(), b = want.download();
        // Every expert's rows written (the sequential calls changed them), and the same bits.
        int64_t changed = 0;
        for (int64_t r = 0; r < slots; ++r)
            changed += std::memcmp(&b[r * ldy], &y0[r * ldy], E * sizeof(float)) != 0;
        EXPECT_EQ(changed, slots) << "set " << si;
        for (int64_t r = 0; r < slots + 3; ++r)
            ASSERT_EQ(std::memcmp(&a[r * ldy], &b[r * ldy], ldy * sizeof(float)), 0)
                << "set " << si << ": output row " << r << " differs from the experts computed one at a time";
    }
}

std::vector<FfnCase> ffn_cases() {
    std::vector<FfnCase> v;
    for (int64_t M : {1, 5, 8, 16, 64, 70}) v.push_back({GgmlType::MXFP4, GgmlType::MXFP4, 5120, 2304, M});
    for (int64_t M : {1, 2, 16}) v.push_back({GgmlType::Q8_0, GgmlType::Q8_0, 5120, 2304, M});
    v.push_back({GgmlType::MXFP4, GgmlType::MXFP4, 5120, 2304, 2});
    v.push_back({GgmlType::MXFP4, GgmlType::MXFP4, 1056, 288, 1, false});  // spans cut short in both
    v.push_back({GgmlType::MXFP4, GgmlType::Q8_0, 5120, 2304, 9});  // down a step above, as llama-quantize does
    v.push_back({GgmlType::MXFP4, GgmlType::MXFP4, 256, 96, 3, false});
    v.push_back({GgmlType::Q8_0, GgmlType::Q8_0, 128, 64, 12, true, 0.05f});
    v.push_back({GgmlType::MXFP4, GgmlType::MXFP4, 128, 64, 12, true, 0.05f, SwigluClamp::kLlamaCpp});
    // The mixes llama-quantize makes (ffn_down_exps a step above the preset).
    for (int64_t M : {1, 16, 64}) v.push_back({GgmlType::Q4_K, GgmlType::Q6_K, 5120, 2304, M});  // Q4_K_M
    for (int64_t M : {1, 16, 64}) v.push_back({GgmlType::Q2_K, GgmlType::Q3_K, 5120, 2304, M});  // Q2_K
    v.push_back({GgmlType::IQ2_XXS, GgmlType::Q2_K, 5120, 2304, 16});
    v.push_back({GgmlType::Q5_K, GgmlType::Q5_K, 5120, 2304, 9});
    v.push_back({GgmlType::Q6_K, GgmlType::Q6_K, 512, 256, 70});
    v.push_back({GgmlType::Q3_K, GgmlType::Q8_0, 256, 512, 12, true, 0.05f});
    return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, Int8ExpertFfnGpu, ::testing::ValuesIn(ffn_cases()),
                         [](const auto& info) { return ffn_name(info.param); });

}  // namespace
