// Ops::group_by_expert on the device: the routing slots of a layer grouped by expert without the
// host, so a layer's only device-to-host copy is the per-expert counts (or none: a decode layer's
// grouping is written to the host copy by the kernel itself).
//
// One block. Slots are staged through shared memory in tiles; each thread owns experts
// e = tid, tid + blockDim, .. and walks every tile in slot order, so each expert's run keeps the
// slots' order (the CPU's stable counting sort, bit for bit) with no atomics. Two walks: counts,
// then (after a scan of the counts) the rows. Work is n_expert * n_slots / blockDim comparisons,
// all of them shared-memory broadcasts: about 3,000 slots (a 500-token layer, k = 6) take a few
// microseconds; decode's k slots next to nothing.
#include <climits>

#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kTile = 2048;        // slots per shared-memory tile
constexpr int kMaxExperts = 4096;  // run starts in shared memory
constexpr int kPerThread = kMaxExperts / kThreads;  // experts one thread owns at most

// host_copy (the device's address of host memory, or null): [counts | gather | scatter] written
// there too, over the bus as the kernel runs.
__global__ void group_by_expert_kernel(const int32_t* ids, int64_t n_slots, int k, int64_t pos0, int n_expert,
                                       int32_t* counts, int32_t* gather, int32_t* scatter, int32_t* host_copy) {
    grid_dependency_begin();
    __shared__ int32_t tile[kTile];
    __shared__ int32_t start[kMaxExperts + 1];
    __shared__ int32_t bad;
    if (threadIdx.x == 0) bad = 0;
    // Walk 1: each owned expert's count; slots outside [0, n_expert) counted once, by anyone.
    int32_t mine[kPerThread] = {};  // unrolled below: registers
    for (int64_t t0 = 0; t0 < n_slots; t0 += kTile) {
        const int n = static_cast<int>(n_slots - t0 < kTile ? n_slots - t0 : kTile);
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += kThreads) {
            const int32_t e = ids[t0 + i];
            tile[i] = e;
            if (e < 0 || e >= n_expert) atomicAdd(&bad, 1);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int e = threadIdx.x + j * kThreads;
            if (e >= n_expert) break;
            int32_t c = 0;
            for (int i = 0; i < n; ++i) c += tile[i] == e;
            mine[j] += c;
        }
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
        if (threadIdx.x + j * kThreads < n_expert) start[threadIdx.x + j * kThreads] = mine[j];
    __syncthreads();
    // The runs' starts: an exclusive scan of the counts, each thread over its own consecutive
    // experts, then across threads by warp shuffles. With thread 0 alone walking the 384 experts
    // the kernel took 8.3 us a decode layer (a98fd0d's H100 trace), with this scan 6.1 (c9ed0e0's),
    // on the layer's path from routing to the first expert copy.
    __shared__ int32_t warp_total[kThreads / 32];
    const int per = (n_expert + kThreads - 1) / kThreads;
    const int e0 = static_cast<int>(threadIdx.x) * per;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t own = 0;
    for (int e = e0; e < e0 + per && e < n_expert; ++e) own += start[e];
    int32_t incl = own;  // inclusive within the warp
    for (int o = 1; o < 32; o <<= 1) {
        const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int32_t w = lane < kThreads / 32 ? warp_total[lane] : 0;
        int32_t wi = w;
        for (int o = 1; o < 32; o <<= 1) {
            const int32_t v = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += v;
        }
        if (lane < kThreads / 32) warp_total[lane] = wi - w;  // exclusive: the warps before
    }
    __syncthreads();
    int32_t run_at = warp_total[warp] + incl - own;
    for (int e = e0; e < e0 + per && e < n_expert; ++e) {
        const int32_t c = start[e];
        counts[e] = c;
        if (host_copy) host_copy[e] = c;
        start[e] = run_at;
        run_at += c;
    }
    if (threadIdx.x == 0) {
        counts[n_expert] = bad;
        if (host_copy) host_copy[n_expert] = bad;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
        if (threadIdx.x + j * kThreads < n_expert) mine[j] = start[threadIdx.x + j * kThreads];
    // Walk 2: each owned expert's slots, in slot order, to the next places of its run.
    for (int64_t t0 = 0; t0 < n_slots; t0 += kTile) {
        const int n = static_cast<int>(n_slots - t0 < kTile ? n_slots - t0 : kTile);
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += kThreads) tile[i] = ids[t0 + i];
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int e = threadIdx.x + j * kThreads;
            if (e >= n_expert) break;
            int32_t at = mine[j];
            for (int i = 0; i < n; ++i) {
                if (tile[i] != e) continue;
                const int64_t s = t0 + i;
                const auto g = static_cast<int32_t>(pos0 + s / k), sc = static_cast<int32_t>(pos0 * k + s);
                gather[at] = g;
                scatter[at] = sc;
                if (host_copy) {
                    host_copy[n_expert + 1 + at] = g;
                    host_copy[n_expert + 1 + n_slots + at] = sc;
                }
                ++at;
            }
            mine[j] = at;
        }
    }
}

}  // namespace

void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert, int32_t* counts,
                     int32_t* gather, int32_t* scatter, int32_t* host_copy, cudaStream_t stream) {
    BG_CHECK(k >= 1 && n_slots >= 0 && n_slots % k == 0);
    BG_CHECK_MSG(n_expert >= 1 && n_expert <= kMaxExperts, "group_by_expert: at most 4096 experts");
    BG_CHECK(pos0 >= 0 && (pos0 + n_slots / k) * k <= INT_MAX);
    BG_CUDA_CHECK(launch_kernel(group_by_expert_kernel, 1, kThreads, 0, stream, ids, n_slots, static_cast<int>(k), pos0,
                                static_cast<int>(n_expert), counts, gather, scatter, host_copy));
}

}  // namespace bg::cuda
