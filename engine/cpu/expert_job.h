// Routed experts' FFNs on the CPU as one pool job, whatever the row kernels: y = down(swiglu(
// gate x, up x)), for one expert or several of a layer. The team starts once and its members take
// runs of groups of gate and up rows (a group of gate rows with the same group of up rows, so a
// member's SwiGLU needs only its own rows; claim_groups), wait for each other once, then take
// runs of groups of down rows. A path may prepare the activations before each phase (the integer
// path quantises x, then h), with barriers of its own.
//
// Why one job: on 16 cores the pool's start and join took about 35 us each (since cut to a few
// us), against about 250 us for an 18.8 MB expert at the memory's speed; and rows taken a run of
// groups at a time, shrinking to one group as they run out, rather than in fixed shares, keep one
// member slowed down (a core shared with the copy thread, a virtual CPU descheduled) from holding
// up the rest for its whole share. A BF16 expert through two fixed-share matmuls read 0.47-0.60
// of the read probe on the H200's host, with 1.2-1.7x its main thread's CPU time in wall time
// (bench_cpu of dafe09f).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backend/types.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "util/check.h"

namespace bg::cpu {

// What the job needs of an expert whatever its weights: E model columns, F hidden rows, m tokens,
// the kernels' row groups, and the caller's gu [m][2F] (token t's gate then up) and h [m][F].
struct ExpertJobShape {
    int64_t E = 0, F = 0, m = 0;
    int64_t up_group = 1, down_group = 1;  // rows a kernel takes together, per phase
    float limit = 0.0f;
    SwigluClamp form = SwigluClamp::kDeepSeek;
    float* gu = nullptr;
    float* h = nullptr;
};

// Claims the next run of a phase's n groups from `next`: about 1 / (2 members) of those left, at
// least one (guided self-scheduling). A member's first runs are several groups long, so it claims
// a few times a phase rather than once a group (464 claims of one counter for a full-width expert
// at one token, which 16 cores contend for), and its row kernel prefetches from one group into the
// next of the same run (int8_matmul_avx512.cpp); the last runs are one group each, so members still
// end within about a group of each other. Returns false when none is left.
inline bool claim_groups(std::atomic<int64_t>& next, int64_t n, int members, int64_t* g0, int64_t* g1) {
    int64_t g = next.load(std::memory_order_relaxed);
    for (;;) {
        if (g >= n) return false;
        const int64_t take = std::max<int64_t>(1, (n - g) / (2 * members));
        if (next.compare_exchange_weak(g, g + take, std::memory_order_relaxed)) {
            *g0 = g;
            *g1 = g + take;
            return true;
        }
    }
}

// At most this many experts in one job: a decode layer's CPU experts (k = 6 at most) go together.
constexpr int64_t kMaxJobExperts = 16;

// Path: before_up(team) and before_down(team) run on every member (before_down after every
// member's h rows are written); up_rows(i, r0, r1) writes rows [r0, r1) of expert i's gate_up (2F
// rows) into its gu, for each of its tokens; down_rows(i, r0, r1) rows [r0, r1) of its down into
// its y. The n experts' groups form one run per phase (expert 0's, then expert 1's, ...), so the
// team starts, meets at its barriers and runs out of rows once for all of them: apart, each
// expert paid the start, the barriers and the last groups' uneven end (BM_CpuExpertJobWithoutRows,
// 48 us with 16 members on an H100 machine's host, against about 180 us of rows). members:
// 1..pool.size().
template <class Path>
void run_experts_job(ThreadPool& pool, int members, const ExpertJobShape* shapes, int64_t n, const Path& path) {
    BG_CHECK(n >= 1 && n <= kMaxJobExperts);
    struct Shared {
        const ExpertJobShape* s;
        const Path* path;
        int64_t n;
        // Groups of experts 0..i together, per phase.
        int64_t up_end[kMaxJobExperts], down_end[kMaxJobExperts];
        // The next group of rows to take, per phase.
        std::atomic<int64_t> next_up{0}, next_down{0};
    } sh;
    sh.s = shapes, sh.path = &path, sh.n = n;
    for (int64_t i = 0; i < n; ++i) {
        const ExpertJobShape& s = shapes[i];
        BG_CHECK(s.F > 0 && s.E > 0 && s.m >= 1 && s.up_group >= 1 && s.down_group >= 1);
        sh.up_end[i] = (i ? sh.up_end[i - 1] : 0) + (s.F + s.up_group - 1) / s.up_group;
        sh.down_end[i] = (i ? sh.down_end[i - 1] : 0) + (s.E + s.down_group - 1) / s.down_group;
    }
    Shared* j = &sh;
    // Calls rows(i, first group of expert i, end group) for each expert the run [g0, g1) covers.
    const auto each_expert = [](const int64_t* end, int64_t g0, int64_t g1, auto&& rows) {
        int64_t i = 0;
        while (end[i] <= g0) ++i;
        for (int64_t g = g0; g < g1; ++i) {
            const int64_t base = i ? end[i - 1] : 0, e1 = std::min(g1, end[i]);
            rows(i, g - base, e1 - base);
            g = e1;
        }
    };
    const auto job = [j, each_expert](const Team& team) {
        const int64_t n_up = j->up_end[j->n - 1], n_down = j->down_end[j->n - 1];
        j->path->before_up(team);
        for (int64_t g0, g1; claim_groups(j->next_up, n_up, team.size(), &g0, &g1);)
            each_expert(j->up_end, g0, g1, [j](int64_t i, int64_t a, int64_t b) {
                const ExpertJobShape& s = j->s[i];
                const int64_t r0 = a * s.up_group, r1 = std::min(b * s.up_group, s.F);
                j->path->up_rows(i, r0, r1);
                j->path->up_rows(i, s.F + r0, s.F + r1);
                for (int64_t t = 0; t < s.m; ++t)
                    swiglu(s.gu + t * 2 * s.F + r0, s.gu + t * 2 * s.F + s.F + r0, r1 - r0, s.limit, s.form,
                           s.h + t * s.F + r0);
            });
        team.barrier();  // every member has written its rows of h
        j->path->before_down(team);
        for (int64_t g0, g1; claim_groups(j->next_down, n_down, team.size(), &g0, &g1);)
            each_expert(j->down_end, g0, g1, [j](int64_t i, int64_t a, int64_t b) {
                const ExpertJobShape& s = j->s[i];
                j->path->down_rows(i, a * s.down_group, std::min(b * s.down_group, s.E));
            });
    };
    pool.run(members, job);
}

// One expert: run_experts_job of one.
template <class Path>
void run_expert_job(ThreadPool& pool, int members, const ExpertJobShape& shape, const Path& path) {
    run_experts_job(pool, members, &shape, 1, path);
}

// Members for n experts (E x F at m tokens each): at most one per group of either phase, and
// about 64K weight-token products each at least (the test models' experts take fewer).
inline int experts_job_members(const ThreadPool& pool, const ExpertJobShape* shapes, int64_t n) {
    int64_t n_up = 0, n_down = 0, work = 0;
    for (int64_t i = 0; i < n; ++i) {
        const ExpertJobShape& s = shapes[i];
        n_up += (s.F + s.up_group - 1) / s.up_group;
        n_down += (s.E + s.down_group - 1) / s.down_group;
        work += 3 * s.E * s.F * s.m;
    }
    const int64_t by_work = std::max<int64_t>(1, work / (int64_t{1} << 16));
    return static_cast<int>(std::min<int64_t>({pool.size(), n_up, n_down, by_work}));
}
inline int expert_job_members(const ThreadPool& pool, const ExpertJobShape& s) { return experts_job_members(pool, &s, 1); }

}  // namespace bg::cpu
