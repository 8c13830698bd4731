// Micro-benchmarks of the CPU expert path (issue 24: host-resident experts computed where they lie):
//  - a host-memory read probe, measured first in the same run: every thread of the pool sums its
//    share of a buffer as large as the experts' rotation below (64-bit words, four chains), best
//    of 7; single-threaded too. Its
//    GB/s is the floor every "of_probe" counter below is measured against (recorded in the
//    output's context as "host_read_gbs");
//  - one routed expert at full width (5120 x 2304: gate and up projections, SwiGLU, down
//    projection) as the engine computes it, one pool job (cpu::expert_ffn_int8;
//    BM_CpuExpertInt8), per weight type and row kernel (portable, avx2, avx512vnni), for M = 1,
//    4, 16 tokens. Every call reads another copy of the expert, cycling through copies of at
//    least 768 MiB and ten times the L3 (rotate_mib in the context), so the weights come from
//    memory, not a cache. Counters: GB/s of weight bytes
//    read, of_probe = GB/s / host_read_gbs (issue 24's target: >= 0.8 at M = 1), us per call
//    (wall time, the calling thread included);
//  - beside it, for what separates that from the probe: the same expert as three matmul_int8
//    calls (BM_CpuExpertInt8Steps, the engine's way before), whole experts one a thread with no
//    split (BM_CpuExpertInt8PerThread: what the memory gives sixteen row kernels at once), and
//    one empty parallel_for (BM_PoolRoundTrip: a start and join of the pool), and the expert's
//    job with its rows left out (BM_CpuExpertJobWithoutRows: what an expert costs beyond them);
//  - one row kernel alone on one thread (BM_CpuRowsInt8), with W in the caches and from memory:
//    the kernel's compute rate, and what memory leaves of it;
//  - a BF16 expert (no integer path: the BF16 row kernels) at one token, per row kernel, with the
//    same counters: as one job (BM_CpuExpertFloat, the engine's way) and as its steps
//    (BM_CpuExpertFloatSteps: two float matmuls, the engine's way before);
//  - the host's pick of the next token between two decode steps (BM_Sample): greedy (argmax) and
//    temperature 0.8 with top-k 40 (llama.cpp's defaults) over DeepSeek-V4.1's 129,280 logits.
// --threads N (ours, taken out before Google Benchmark reads the rest): the pool's threads
// (default: every hardware thread). A row kernel this CPU or build lacks is skipped, with the
// reason printed.
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "cpu/bf16_expert.h"
#include "cpu/expert_job.h"
#include "cpu/int8_expert.h"
#include "cpu/int8_matmul.h"
#include "cpu/int8_rows.h"
#include "cpu/ops.h"
#include "cpu/read_probe.h"
#include "cpu/thread_pool.h"
#include "random_weights.h"
#include "runtime/sampler.h"
#include "tensor/ggml_types.h"
#include "util/build_info.h"

namespace {

using namespace bg;

// The copies of an expert the benchmarks cycle through: at least 768 MiB, and ten times the last
// level cache. The H200's host reports a 300 MB L3; with 768 MiB of copies its experts read 1.11
// (MXFP4) and 1.54 (Q8_0) times the read probe (bench_cpu of 5d16402): part of the rotation
// stayed in the cache, which a cyclic walk only three times its size does not defeat.
uint64_t rotate_bytes() {
    long l3 = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return std::max<uint64_t>(768ull << 20, 10 * static_cast<uint64_t>(std::max(0L, l3)));
}

// Copies of an image of `bytes` that cover rotate_bytes() (two at least): cycling through them
// reads each from memory.
int rotation_sets(uint64_t bytes) {
    return static_cast<int>(std::max<uint64_t>(2, (rotate_bytes() + bytes - 1) / bytes));
}

struct ExpertCopies;
struct RowCopies;

struct Bench {
    std::unique_ptr<cpu::ThreadPool> pool;
    double host_read_gbs = 0;  // every thread of the pool
    double one_thread_read_gbs = 0;
    // The last type's copies, kept for its next benchmark (the benchmarks run type by type).
    std::unique_ptr<ExpertCopies> copies;
    std::unique_ptr<RowCopies> row_copies;  // BM_CpuRowsInt8's, the same way
};
Bench g_bench;

// The expert's three matrices, copied end to end enough times to cover rotate_bytes().
struct ExpertCopies {
    GgmlType type;
    int64_t E, F;
    uint64_t gate_up_bytes, down_bytes, expert_bytes;
    int n_sets = 0;
    std::vector<uint8_t> bytes;

    ExpertCopies(GgmlType t, int64_t e, int64_t f) : type(t), E(e), F(f) {
        std::mt19937 rng(17);
        // random_mat's realistic blocks (finite scales, no subnormal products), padding 0.
        const bgtest::HostMat gu = bgtest::random_mat(t, 2 * F, E, 0, rng);
        const bgtest::HostMat dn = bgtest::random_mat(t, E, F, 0, rng);
        gate_up_bytes = gu.bytes.size();
        down_bytes = dn.bytes.size();
        expert_bytes = gate_up_bytes + down_bytes;
        n_sets = rotation_sets(expert_bytes);
        bytes.resize(expert_bytes * n_sets);
        for (int s = 0; s < n_sets; ++s) {
            std::memcpy(bytes.data() + s * expert_bytes, gu.bytes.data(), gate_up_bytes);
            std::memcpy(bytes.data() + s * expert_bytes + gate_up_bytes, dn.bytes.data(), down_bytes);
        }
    }
    MatView gate(int s) const { return {bytes.data() + s * expert_bytes, type, E, F, row_bytes(type, E)}; }
    MatView up(int s) const {
        return {bytes.data() + s * expert_bytes + gate_up_bytes / 2, type, E, F, row_bytes(type, E)};
    }
    MatView down(int s) const {
        return {bytes.data() + s * expert_bytes + gate_up_bytes, type, F, E, row_bytes(type, F)};
    }
};

const ExpertCopies& copies_of(GgmlType t, int64_t E, int64_t F) {
    auto& c = g_bench.copies;
    if (!c || c->type != t || c->E != E || c->F != F) {
        c.reset();
        c = std::make_unique<ExpertCopies>(t, E, F);
    }
    return *c;
}

// Whether the benchmark was skipped, with the reason, because the row kernel of `isa` is not
// usable here.
bool skipped_unless_usable(benchmark::State& state, cpu::CpuIsa isa) {
    if (cpu::cpu_isa_usable(isa)) return false;
    state.SkipWithError((std::string("the ") + cpu::cpu_isa_name(isa) + " kernel is not usable here").c_str());
    return true;
}

// One expert benchmark's arguments (see expert_args) and its copies of the expert, or nothing
// (the benchmark skipped, with the reason) where the row kernel is not usable here.
struct ExpertCase {
    struct Args {
        GgmlType type;
        int64_t E, F, M;
        cpu::CpuIsa isa;
    } args;
    const ExpertCopies* ex;
};
std::optional<ExpertCase> expert_case(benchmark::State& state) {
    const ExpertCase::Args a{static_cast<GgmlType>(state.range(0)), state.range(1), state.range(2), state.range(3),
                             static_cast<cpu::CpuIsa>(state.range(4))};
    if (skipped_unless_usable(state, a.isa)) return std::nullopt;
    return ExpertCase{a, &copies_of(a.type, a.E, a.F)};
}

// n activations uniform in [-1, 1].
std::vector<float> random_activations(int64_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = u(rng);
    return x;
}

// One expert call's activations and outputs for M tokens: x [M][E], gate and up [M][2F], the
// SwiGLU's h [M][F], y [M][E].
struct ExpertIo {
    std::vector<float> x, gu, h, y;
    ExpertIo(int64_t E, int64_t F, int64_t M)
        : x(random_activations(M * E, 23)),
          gu(static_cast<size_t>(M * 2 * F)),
          h(static_cast<size_t>(M * F)),
          y(static_cast<size_t>(M * E)) {}
};

// The counters of one expert benchmark (see the top of the file).
// experts_per_call: experts one iteration reads (BM_CpuExpertInt8PerThread: one a thread).
void expert_counters(benchmark::State& state, const ExpertCopies& ex, GgmlType type, cpu::CpuIsa isa,
                     int experts_per_call = 1) {
    cpu::ThreadPool& pool = *g_bench.pool;
    const double calls = static_cast<double>(state.iterations());
    const double bytes = static_cast<double>(ex.expert_bytes) * experts_per_call * calls;
    state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
    state.counters["us"] = benchmark::Counter(calls * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["expert_mb"] = static_cast<double>(ex.expert_bytes) / 1e6;
    state.counters["sets"] = ex.n_sets;
    state.counters["threads"] = pool.size();
    // of_probe needs the rate: Google Benchmark divides kIsRate counters by the time itself, so
    // this one is a rate too, scaled by the probe.
    state.counters["of_probe"] = benchmark::Counter(bytes / 1e9 / g_bench.host_read_gbs, benchmark::Counter::kIsRate);
    state.SetLabel(std::string(type_name(type)) + " " + cpu::cpu_isa_name(isa));
}

void BM_CpuExpertInt8(benchmark::State& state) {
    const auto c = expert_case(state);
    if (!c) return;
    const auto [type, E, F, M, isa] = c->args;
    const ExpertCopies& ex = *c->ex;
    ExpertIo io(E, F, M);
    cpu::Int8MatmulScratch scratch;
    cpu::ThreadPool& pool = *g_bench.pool;
    int s = 0;
    for (auto _ : state) {
        cpu::expert_ffn_int8(pool, scratch, {ex.gate(s), ex.up(s), ex.down(s), M}, io.x.data(), E, 10.0f,
                             SwigluClamp::kDeepSeek, io.gu.data(), io.h.data(), io.y.data(), isa);
        benchmark::DoNotOptimize(io.y.data());
        s = (s + 1) % ex.n_sets;
    }
    expert_counters(state, ex, type, isa);
}

// The same expert as the three steps the engine took before (cpu/int8_expert.h): matmul_int8
// over gate, then up, the SwiGLU, matmul_int8 over down, the pool started and joined for each.
void BM_CpuExpertInt8Steps(benchmark::State& state) {
    const auto c = expert_case(state);
    if (!c) return;
    const auto [type, E, F, M, isa] = c->args;
    const ExpertCopies& ex = *c->ex;
    const std::vector<float> x = random_activations(M * E, 23);
    std::vector<float> g(static_cast<size_t>(M * F)), up(g.size()), h(g.size()), y(x.size());
    cpu::Int8MatmulScratch scratch;
    cpu::ThreadPool& pool = *g_bench.pool;
    int s = 0;
    for (auto _ : state) {
        cpu::matmul_int8(pool, scratch, ex.gate(s), x.data(), E, M, g.data(), F, isa);
        cpu::matmul_int8(pool, scratch, ex.up(s), x.data(), E, M, up.data(), F, isa);
        cpu::swiglu(g.data(), up.data(), M * F, 10.0f, SwigluClamp::kDeepSeek, h.data());
        cpu::matmul_int8(pool, scratch, ex.down(s), h.data(), F, M, y.data(), E, isa);
        benchmark::DoNotOptimize(y.data());
        s = (s + 1) % ex.n_sets;
    }
    expert_counters(state, ex, type, isa);
}

// An expert whose weights have no integer path (BF16), with the BF16 row kernel of `isa`
// (cpu/bf16_rows.h): as CpuOps's expert_ffn takes it, one job of the pool (cpu/bf16_expert.h,
// BM_CpuExpertFloat), or as its steps, the way CpuOps took BF16 experts before 2026-12-05
// (BM_CpuExpertFloatSteps): the float matmul over gate and up's 2F rows, the SwiGLU, the float
// matmul over down, each matmul a start and join of the pool with fixed shares of the rows. The
// same y either way.
void time_bf16_expert(benchmark::State& state, bool one_job) {
    const auto c = expert_case(state);
    if (!c) return;
    const auto [type, E, F, M, isa] = c->args;
    const ExpertCopies& ex = *c->ex;
    ExpertIo io(E, F, M);
    cpu::ThreadPool& pool = *g_bench.pool;
    int s = 0;
    for (auto _ : state) {
        MatView gate_up = ex.gate(s);
        gate_up.rows = 2 * F;
        if (one_job) {
            cpu::expert_ffn_bf16(pool, gate_up, ex.down(s), io.x.data(), E, M, 10.0f, SwigluClamp::kDeepSeek,
                                 io.gu.data(), io.h.data(), io.y.data(), isa);
        } else {
            cpu::matmul(pool, gate_up, io.x.data(), E, M, io.gu.data(), 2 * F, isa);
            for (int64_t t = 0; t < M; ++t)
                cpu::swiglu(io.gu.data() + t * 2 * F, io.gu.data() + t * 2 * F + F, F, 10.0f, SwigluClamp::kDeepSeek,
                            io.h.data() + t * F);
            cpu::matmul(pool, ex.down(s), io.h.data(), F, M, io.y.data(), E, isa);
        }
        benchmark::DoNotOptimize(io.y.data());
        s = (s + 1) % ex.n_sets;
    }
    expert_counters(state, ex, type, isa);
}
void BM_CpuExpertFloat(benchmark::State& state) { time_bf16_expert(state, true); }
void BM_CpuExpertFloatSteps(benchmark::State& state) { time_bf16_expert(state, false); }
void bf16_expert_args(benchmark::internal::Benchmark* b) {
    for (const cpu::CpuIsa isa : {cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512})
        b->Args({static_cast<int64_t>(GgmlType::BF16), 5120, 2304, 1, static_cast<int64_t>(isa)});
    b->ArgNames({"type", "E", "F", "M", "isa"});
}
BENCHMARK(BM_CpuExpertFloat)->Apply(bf16_expert_args)->UseRealTime();
BENCHMARK(BM_CpuExpertFloatSteps)->Apply(bf16_expert_args)->UseRealTime();

// The pool's cost of one parallel_for with nothing to do: waking every worker and waiting for
// them all, the price each matmul_int8 call pays on top of its rows.
void BM_PoolRoundTrip(benchmark::State& state) {
    cpu::ThreadPool& pool = *g_bench.pool;
    std::vector<int64_t> seen(static_cast<size_t>(pool.size()) * 8, 0);
    for (auto _ : state) {
        pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i) * 8];
        });
    }
    benchmark::DoNotOptimize(seen.data());
    state.counters["threads"] = pool.size();
}
BENCHMARK(BM_PoolRoundTrip)->UseRealTime();

// A full-width expert's job at one token (cpu/expert_job.h) with every row left out: the team's
// start and join, its three barriers (the integer path's two quantisations each end with one, and
// the one between the phases), the 464 groups claimed one at a time and the SwiGLU. Beside the
// fit of an expert's time over two types (about 51 us fixed on the H200's host), what the job's
// skeleton costs; an upper bound for the claims, which members with no rows to compute contend
// for back to back (the development machine: 9.7 us on one thread, 30 us on two).
void BM_CpuExpertJobWithoutRows(benchmark::State& state) {
    struct NoRows {
        void before_up(const cpu::Team& team) const { team.barrier(); }
        void up_rows(int64_t, int64_t, int64_t) const {}
        void before_down(const cpu::Team& team) const { team.barrier(); }
        void down_rows(int64_t, int64_t, int64_t) const {}
    };
    constexpr int64_t E = 5120, F = 2304;
    ExpertIo io(E, F, 1);
    cpu::ExpertJobShape shape;
    shape.E = E, shape.F = F, shape.m = 1;
    shape.up_group = shape.down_group = cpu::kAvx512Rows;
    shape.limit = 10.0f, shape.gu = io.gu.data(), shape.h = io.h.data();
    cpu::ThreadPool& pool = *g_bench.pool;
    const int members = cpu::expert_job_members(pool, shape);
    for (auto _ : state) {
        cpu::run_expert_job(pool, members, shape, NoRows{});
        benchmark::DoNotOptimize(io.h.data());
    }
    state.counters["members"] = members;
    state.counters["us"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1e-6,
                                              benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CpuExpertJobWithoutRows)->UseRealTime();

// One decode step's sampling on the host (runtime/sampler.h): state.range(0) 0 greedy, 1 temperature
// 0.8 with top-k 40, top-p 0.95 and min-p 0.05; fresh normal logits (sd 3) each of 64 steps, cycled.
void BM_Sample(benchmark::State& state) {
    constexpr int64_t kVocab = 129280;
    std::mt19937 rng(7);
    std::normal_distribution<float> logit(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(64 * kVocab));
    for (float& v : logits) v = logit(rng);
    SamplingConfig cfg;
    cfg.temp = state.range(0) == 0 ? 0.0 : 0.8;
    Sampler sampler(cfg);
    int64_t step = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(sampler.sample(logits.data() + (step % 64) * kVocab, kVocab));
        ++step;
    }
    state.SetLabel(state.range(0) == 0 ? "greedy" : "temp 0.8, top-k 40");
}
BENCHMARK(BM_Sample)->Arg(0)->Arg(1)->ArgNames({"temp"})->Unit(benchmark::kMicrosecond);

// Every thread computes whole experts of its own (each reads another copy), one thread a call:
// the same row kernel and bytes as BM_CpuExpertInt8, without splitting one expert's rows across
// the threads. Set beside it, the two separate what the split costs (wake-ups, joins, the
// serial activation quantisation) from what the memory gives many row kernels at once.
void BM_CpuExpertInt8PerThread(benchmark::State& state) {
    const auto c = expert_case(state);
    if (!c) return;
    const auto [type, E, F, M, isa] = c->args;
    const ExpertCopies& ex = *c->ex;
    cpu::ThreadPool& pool = *g_bench.pool;
    const int n = pool.size();
    struct PerThread {
        std::unique_ptr<cpu::ThreadPool> one;
        cpu::Int8MatmulScratch scratch;
        std::vector<float> x, g, up, h, y;
    };
    std::vector<PerThread> per(static_cast<size_t>(n));
    for (size_t i = 0; i < per.size(); ++i) {
        PerThread& p = per[i];
        p.one = std::make_unique<cpu::ThreadPool>(1);
        p.x = random_activations(M * E, 23 + static_cast<unsigned>(i));
        p.g.resize(static_cast<size_t>(M * F));
        p.up.resize(p.g.size());
        p.h.resize(p.g.size());
        p.y.resize(p.x.size());
    }
    int s = 0;
    for (auto _ : state) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                PerThread& p = per[static_cast<size_t>(i)];
                const int set = static_cast<int>((s + i) % ex.n_sets);
                cpu::matmul_int8(*p.one, p.scratch, ex.gate(set), p.x.data(), E, M, p.g.data(), F, isa);
                cpu::matmul_int8(*p.one, p.scratch, ex.up(set), p.x.data(), E, M, p.up.data(), F, isa);
                cpu::swiglu(p.g.data(), p.up.data(), M * F, 10.0f, SwigluClamp::kDeepSeek, p.h.data());
                cpu::matmul_int8(*p.one, p.scratch, ex.down(set), p.h.data(), F, M, p.y.data(), E, isa);
                benchmark::DoNotOptimize(p.y.data());
            }
        });
        s = (s + n) % ex.n_sets;
    }
    expert_counters(state, ex, type, isa, n);
}

void expert_args(benchmark::internal::Benchmark* b) {
    for (const GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                             GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS})
        // IQ2_XXS (published 2-bit files' experts) at one token only: its portable kernel takes
        // tens of milliseconds an expert, and decode is what its CPU path is for.
        for (const int64_t M : {1, 4, 16})
            for (const cpu::CpuIsa isa : {cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512})
                if (t != GgmlType::IQ2_XXS || M == 1) b->Args({static_cast<int64_t>(t), 5120, 2304, M, static_cast<int64_t>(isa)});
}

BENCHMARK(BM_CpuExpertInt8)->Apply(expert_args)->ArgNames({"type", "E", "F", "M", "isa"})->UseRealTime();
BENCHMARK(BM_CpuExpertInt8Steps)->Apply(expert_args)->ArgNames({"type", "E", "F", "M", "isa"})->UseRealTime();
BENCHMARK(BM_CpuExpertInt8PerThread)->Apply(expert_args)->ArgNames({"type", "E", "F", "M", "isa"})->UseRealTime();

// A decode layer's CPU experts (n full-width experts at one token, each its own weights, cycled
// through the rotation like the others) as the engine computes them: one pool job for all n
// (together:1, cpu::experts_ffn_int8, CpuOps::expert_ffn_batch) or one job each in turn
// (together:0, the engine before). The counters count all n experts' bytes; `us` is the n.
void BM_CpuExpertsInt8Layer(benchmark::State& state) {
    const GgmlType type = static_cast<GgmlType>(state.range(0));
    const int64_t n = state.range(1), E = 5120, F = 2304;
    const bool together = state.range(2) != 0;
    const cpu::CpuIsa isa = cpu::best_cpu_isa();
    const ExpertCopies& ex = copies_of(type, E, F);
    if (ex.n_sets < n) {
        state.SkipWithError("fewer weight copies than experts");
        return;
    }
    ExpertIo io(E, F, n);
    cpu::Int8MatmulScratch scratch;
    cpu::ThreadPool& pool = *g_bench.pool;
    cpu::Int8Expert experts[cpu::kMaxJobExperts];
    int s = 0;
    for (auto _ : state) {
        for (int64_t i = 0; i < n; ++i) {
            const int set = static_cast<int>((s + i) % ex.n_sets);
            experts[i] = {ex.gate(set), ex.up(set), ex.down(set), 1};
        }
        if (together) {
            cpu::experts_ffn_int8(pool, scratch, experts, n, io.x.data(), E, 10.0f, SwigluClamp::kDeepSeek, io.gu.data(),
                                  io.h.data(), io.y.data(), isa);
        } else {
            for (int64_t i = 0; i < n; ++i)
                cpu::expert_ffn_int8(pool, scratch, experts[i], io.x.data() + i * E, E, 10.0f, SwigluClamp::kDeepSeek,
                                     io.gu.data() + i * 2 * F, io.h.data() + i * F, io.y.data() + i * E, isa);
        }
        benchmark::DoNotOptimize(io.y.data());
        s = static_cast<int>((s + n) % ex.n_sets);
    }
    expert_counters(state, ex, type, isa, static_cast<int>(n));
    state.SetLabel(std::string(type_name(type)) + " " + cpu::cpu_isa_name(isa) + (together ? " one job" : " a job each"));
}
BENCHMARK(BM_CpuExpertsInt8Layer)
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::MXFP4), static_cast<int64_t>(GgmlType::Q8_0)}, {1, 3, 6}, {0, 1}})
    ->ArgNames({"type", "n", "together"})
    ->UseRealTime();

// BM_CpuRowsInt8's matrix, kept for the benchmarks of its type: copies of a 2304 x 5120 W cycled
// through, the first 64 rows of the first copy the cached case's W.
struct RowCopies {
    GgmlType type;
    static constexpr int64_t kCols = 5120, kRows = 2304, kCachedRows = 64;
    uint64_t stride = 0, mat_bytes = 0;
    int n_copies = 0;
    std::vector<uint8_t> bytes;

    explicit RowCopies(GgmlType t) : type(t) {
        std::mt19937 rng(29);
        const bgtest::HostMat W = bgtest::random_mat(t, kRows, kCols, 0, rng);
        stride = W.stride;
        mat_bytes = W.bytes.size();
        n_copies = rotation_sets(mat_bytes);
        bytes.resize(mat_bytes * n_copies);
        for (int c = 0; c < n_copies; ++c) std::memcpy(bytes.data() + c * mat_bytes, W.bytes.data(), mat_bytes);
    }
};
const RowCopies& row_copies_of(GgmlType t) {
    auto& c = g_bench.row_copies;
    if (!c || c->type != t) {
        g_bench.copies.reset();  // the expert benchmarks are done: one rotation in memory at a time
        c.reset();
        c = std::make_unique<RowCopies>(t);
    }
    return *c;
}

// One row kernel alone on the calling thread, one token, rows of 5120 weights (BM_CpuRowsInt8):
// state.range(2) 1 keeps W (64 rows) in the core's caches, 0 reads copies of a 2304-row W cycled
// as the expert benchmarks cycle theirs, so they come from memory. The first is the kernel's compute
// rate, the second what memory leaves of it; their gap is what the access pattern costs (the
// K-quants' prefetch, cpu/int8_rows.h). Counters: GB/s of weight bytes, of_probe against the
// one-thread read probe (the from-memory case only).
void BM_CpuRowsInt8(benchmark::State& state) {
    const auto type = static_cast<GgmlType>(state.range(0));
    const auto isa = static_cast<cpu::CpuIsa>(state.range(1));
    const bool cached = state.range(2) != 0;
    if (skipped_unless_usable(state, isa)) return;
    const RowCopies& w = row_copies_of(type);
    const int64_t cols = RowCopies::kCols, rows = cached ? RowCopies::kCachedRows : RowCopies::kRows;
    const int n_copies = cached ? 1 : w.n_copies;
    const std::vector<float> x = random_activations(cols, 31);
    std::vector<int8_t> xq(cols);
    std::vector<float> xd(cols / 32), y(rows);
    std::vector<int32_t> xs(cols / 16);
    cpu::quantize_int8_rows(x.data(), cols, 1, cols, xq.data(), xd.data());
    cpu::int8_half_sums(xq.data(), 1, cols, xs.data());
    int c = 0;
    for (auto _ : state) {
        const MatView v{w.bytes.data() + c * w.mat_bytes, type, cols, rows, w.stride};
        cpu::int8_rows(isa, {&v, xq.data(), xd.data(), xs.data(), 1, y.data(), rows}, 0, rows);
        benchmark::DoNotOptimize(y.data());
        c = (c + 1) % n_copies;
    }
    const double bytes = static_cast<double>(rows * w.stride) * static_cast<double>(state.iterations());
    state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
    if (!cached)
        state.counters["of_probe"] = benchmark::Counter(bytes / 1e9 / g_bench.one_thread_read_gbs, benchmark::Counter::kIsRate);
    state.SetLabel(std::string(type_name(type)) + " " + cpu::cpu_isa_name(isa) + (cached ? " cached" : " from memory"));
}
BENCHMARK(BM_CpuRowsInt8)
    ->Apply([](benchmark::internal::Benchmark* b) {
        for (const GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                 GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS})
            for (const cpu::CpuIsa isa : {cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512})
                for (const int cached : {1, 0}) b->Args({static_cast<int64_t>(t), static_cast<int64_t>(isa), cached});
    })
    ->ArgNames({"type", "isa", "cached"})
    ->UseRealTime();

// --threads N, removed from argv; 0 when absent.
int take_threads(int& argc, char** argv) {
    int n = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        std::string v;
        if (a == "--threads" && i + 1 < argc) {
            v = argv[i + 1];
            std::copy(argv + i + 2, argv + argc, argv + i);
            argc -= 2;
        } else if (a.rfind("--threads=", 0) == 0) {
            v = a.substr(10);
            std::copy(argv + i + 1, argv + argc, argv + i);
            argc -= 1;
        } else {
            continue;
        }
        n = std::atoi(v.c_str());
        if (n < 0) {
            std::fprintf(stderr, "bench_cpu: --threads wants a count >= 0\n");
            std::exit(2);
        }
        break;
    }
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = take_threads(argc, argv);
    g_bench.pool = std::make_unique<cpu::ThreadPool>(threads);
    std::vector<uint64_t> buf(rotate_bytes() / 8);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
    g_bench.host_read_gbs = cpu::host_read_gb_s(g_bench.pool.get(), buf.data(), static_cast<int64_t>(buf.size()), 7);
    g_bench.one_thread_read_gbs = cpu::host_read_gb_s(nullptr, buf.data(), static_cast<int64_t>(buf.size()), 3);
    buf = {};
    std::printf("bench_cpu: host read probe %.1f GB/s with %d threads, %.1f GB/s with one; best row kernel here: %s\n",
                g_bench.host_read_gbs, g_bench.pool->size(), g_bench.one_thread_read_gbs, cpu::cpu_isa_name(cpu::best_cpu_isa()));
    benchmark::AddCustomContext("host_read_gbs", std::to_string(g_bench.host_read_gbs));
    benchmark::AddCustomContext("host_read_gbs_one_thread", std::to_string(g_bench.one_thread_read_gbs));
    benchmark::AddCustomContext("threads", std::to_string(g_bench.pool->size()));
    benchmark::AddCustomContext("rotate_mib", std::to_string(rotate_bytes() >> 20));
    benchmark::AddCustomContext("best_cpu_isa", cpu::cpu_isa_name(cpu::best_cpu_isa()));
    benchmark::AddCustomContext("build", bg::build_info().to_json().dump());
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
