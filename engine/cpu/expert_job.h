// One routed expert's FFN on the CPU as one pool job, whatever the row kernels: y = down(swiglu(
// gate x, up x)). The team starts once and its members take runs of groups of gate and up rows
// (a group of gate rows with the same group of up rows, so a member's SwiGLU needs only its own
// rows; claim_groups), wait for each other once, then take runs of groups of down rows. A path may prepare the activations
// before each phase (the integer path quantises x, then h), with barriers of its own.
//
// Why one job: on 16 cores the pool's start and join took about 35 us each (since cut to a few
// us), against about 250 us for an 18.8 MB expert at the memory's speed; and rows taken a run of
// groups at a time, shrinking to one group as they run out, rather than in fixed shares, keep one member slowed down (a core shared with the
// copy thread, a virtual CPU descheduled) from holding up the rest for its whole share. A BF16
// expert through two fixed-share matmuls read 0.47-0.60 of the read probe on the H200's host,
// with 1.2-1.7x its main thread's CPU time in wall time (bench_cpu of dafe09f).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backend/types.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"

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

// Path: before_up(team) and before_down(team) run on every member (before_down after every
// member's h rows are written); up_rows(r0, r1) writes rows [r0, r1) of gate_up (2F rows) into
// gu, for every token; down_rows(r0, r1) rows [r0, r1) of down into y. members: 1..pool.size().
template <class Path>
void run_expert_job(ThreadPool& pool, int members, const ExpertJobShape& shape, const Path& path) {
    struct Shared {
        const ExpertJobShape* s;
        const Path* path;
        int64_t n_up, n_down;
        // The next group of rows to take, per phase.
        std::atomic<int64_t> next_up{0}, next_down{0};
    } sh{&shape, &path, (shape.F + shape.up_group - 1) / shape.up_group,
         (shape.E + shape.down_group - 1) / shape.down_group};
    Shared* j = &sh;
    const auto job = [j](const Team& team) {
        const ExpertJobShape& s = *j->s;
        j->path->before_up(team);
        for (int64_t g0, g1; claim_groups(j->next_up, j->n_up, team.size(), &g0, &g1);) {
            const int64_t r0 = g0 * s.up_group, r1 = std::min(g1 * s.up_group, s.F);
            j->path->up_rows(r0, r1);
            j->path->up_rows(s.F + r0, s.F + r1);
            for (int64_t t = 0; t < s.m; ++t)
                swiglu(s.gu + t * 2 * s.F + r0, s.gu + t * 2 * s.F + s.F + r0, r1 - r0, s.limit, s.form,
                       s.h + t * s.F + r0);
        }
        team.barrier();  // every member has written its rows of h
        j->path->before_down(team);
        for (int64_t g0, g1; claim_groups(j->next_down, j->n_down, team.size(), &g0, &g1);)
            j->path->down_rows(g0 * s.down_group, std::min(g1 * s.down_group, s.E));
    };
    pool.run(members, job);
}

// Members for an expert of E x F at m tokens: at most one per group of either phase, and about
// 64K weight-token products each at least (the test models' experts take fewer).
inline int expert_job_members(const ThreadPool& pool, const ExpertJobShape& s) {
    const int64_t n_up = (s.F + s.up_group - 1) / s.up_group, n_down = (s.E + s.down_group - 1) / s.down_group;
    const int64_t by_work = std::max<int64_t>(1, 3 * s.E * s.F * s.m / (int64_t{1} << 16));
    return static_cast<int>(std::min<int64_t>({pool.size(), n_up, n_down, by_work}));
}

}  // namespace bg::cpu
