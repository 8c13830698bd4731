// The MoE router (bg::route, cpu/routing.h) under every RoutingPolicy: p = sqrt(softplus(logit)),
// the k experts of highest p + bias that the policy allows, in its rank order, and their weights;
// one warp per token.
#include <climits>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "cuda/check.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

// Which experts a rank may take: any, the resident ones, or the hot ones (hot-pool).
enum Eligible : int { kAny = 0, kResident = 1, kHot = 2 };

// Which experts rank j may take under the policy (hot_left: hot-pool has a hot expert untaken).
__device__ __forceinline__ int rank_need(int policy, int j, bool hot_left) {
    if (policy == static_cast<int>(RoutingPolicy::kHotPool)) return j > 0 && hot_left ? kHot : kResident;
    if (policy == static_cast<int>(RoutingPolicy::kResidentOnly) ||
        (policy == static_cast<int>(RoutingPolicy::kPinnedTop1) && j > 0))
        return kResident;
    return kAny;
}

// The warp's best (key bk, expert be; be < 0: none) under the total order (key descending, id
// ascending). The butterfly leaves every lane with the same winner, so the warp decides alike.
__device__ __forceinline__ void warp_best(float& bk, int& be) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ok = __shfl_xor_sync(0xffffffffu, bk, o);
        const int oe = __shfl_xor_sync(0xffffffffu, be, o);
        if (oe >= 0 && (be < 0 || ok > bk || (ok == bk && oe < be))) {
            bk = ok;
            be = oe;
        }
    }
}

// One warp per token. Each rank is one arg-max over the experts still eligible under the total
// order (p + bias descending, id ascending); taking ranks one by one in that order is what
// bg::route's walk down the exact ranking does, for every policy. Hot-pool's ranks 2.. take hot
// experts until none is left, then resident ones (cpu/routing.h).
__global__ void route_kernel(int policy, const float* logits, const float* bias, const uint8_t* resident,
                             const uint8_t* hot, int64_t n_expert, int k, int norm, float scale, int32_t* ids,
                             float* weights) {
    grid_dependency_begin();
    extern __shared__ float route_smem[];
    float* p = route_smem;                                             // [n_expert]
    float* key = p + n_expert;                                         // [n_expert] p + bias
    int32_t* chosen = reinterpret_cast<int32_t*>(key + n_expert);      // [k]
    uint8_t* taken = reinterpret_cast<uint8_t*>(chosen + k);           // [n_expert] 1: taken
    uint8_t* allowed = taken + n_expert;                               // [n_expert] kResident | kHot bits
    const int64_t t = blockIdx.x;
    const int lane = threadIdx.x;
    const float* lg = logits + t * n_expert;
    // Everything a rank's scan reads is copied to shared memory first: with the resident and hot
    // bytes read from global memory inside the scans, each of the k ranks waited on n_expert / 32
    // dependent loads (23 us a decode token at 384 experts on an H200, a layer's critical path).
#pragma unroll 4
    for (int64_t e = lane; e < n_expert; e += 32) {
        const float x = __ldg(lg + e);
        const float pe = sqrtf(fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))));  // sqrt(softplus)
        p[e] = pe;
        key[e] = pe + (bias ? __ldg(bias + e) : 0.0f);
        taken[e] = 0;
        allowed[e] = static_cast<uint8_t>((resident && resident[e] ? kResident : 0) | (hot && hot[e] ? kHot : 0));
    }
    __syncwarp();
    int n_found = 0;
    float sum = 0.0f;
    bool hot_left = true;  // hot-pool: some hot expert may still be untaken
    for (int j = 0; j < k; ++j) {
        int need = rank_need(policy, j, hot_left);
        float bk = 0.0f;
        int be = -1;  // -1: none yet
        for (;;) {
            for (int64_t e = lane; e < n_expert; e += 32) {
                if (taken[e] || (need != kAny && !(allowed[e] & need))) continue;
                if (be < 0 || key[e] > bk) {  // ids rise along a lane, so ">" keeps the lower id on ties
                    bk = key[e];
                    be = static_cast<int>(e);
                }
            }
            warp_best(bk, be);
            if (be >= 0 || need != kHot) break;
            hot_left = false;  // every hot expert is taken: this rank and the rest among the resident ones
            need = kResident;
        }
        if (be < 0) break;  // fewer eligible experts than k
        if (lane == 0) {
            chosen[j] = be;
            taken[be] = 1;
        }
        __syncwarp();
        sum += p[be];
        ++n_found;
    }
    const float f = norm ? scale / fmaxf(sum, 6.1035e-5f) : scale;  // RouteWeighting::factor
    for (int j = lane; j < k; j += 32) {
        ids[t * k + j] = j < n_found ? chosen[j] : -1;
        weights[t * k + j] = j < n_found ? p[chosen[j]] * f : 0.0f;
    }
}

// The same walk with each lane's experts (lane + 32 i, i < PL) in registers: keys, p and the
// eligibility and taken bits, so a rank's scan is PL register compares and the butterfly (with
// them in shared memory each rank waited on PL dependent loads: 18 us a decode layer at 384
// experts on an H200). Experts past n_expert are marked taken. The block has a thread an expert
// (32 PL), which compute p, the key and the eligibility bits side by side into shared memory;
// the first warp takes its registers from there and walks. With that warp alone computing them,
// a lane's PL logits, biases and eligibility bytes were read one after another, each behind the
// branch of the one before: 15 us a decode layer in a98fd0d's H100 trace, where the layer's
// weights streaming through L2 had evicted the bias and the eligibility bytes. Dynamic shared
// memory: the chosen ids [k].
template <int PL>
__global__ void route_reg_kernel(int policy, const float* logits, const float* bias, const uint8_t* resident,
                                 const uint8_t* hot, int64_t n_expert, int k, int norm, float scale, int32_t* ids,
                                 float* weights) {
    grid_dependency_begin();
    static_assert(PL >= 1 && PL <= 32, "a bit an expert of a lane");
    extern __shared__ int32_t route_chosen[];  // [k]
    __shared__ float chosen_p[32];             // p of the first 32 ranks (more read p again below)
    __shared__ float s_p[32 * PL], s_key[32 * PL];
    __shared__ uint8_t s_bits[32 * PL];  // kResident | kHot; kAbsent past n_expert
    constexpr uint8_t kAbsent = 4;
    const int64_t t = blockIdx.x;
    const float* lg = logits + t * n_expert;
    for (int e = threadIdx.x; e < 32 * PL; e += blockDim.x) {
        if (e < n_expert) {
            const float x = __ldg(lg + e);
            const float pe = sqrtf(fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))));  // sqrt(softplus)
            s_p[e] = pe;
            s_key[e] = pe + (bias ? __ldg(bias + e) : 0.0f);
            s_bits[e] = static_cast<uint8_t>((resident && resident[e] ? kResident : 0) | (hot && hot[e] ? kHot : 0));
        } else {
            s_p[e] = 0.0f;
            s_key[e] = -INFINITY;
            s_bits[e] = kAbsent;
        }
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    float p[PL], key[PL];
    uint32_t res_bits = 0, hot_bits = 0, taken = 0;
#pragma unroll
    for (int i = 0; i < PL; ++i) {
        const int e = lane + 32 * i;
        p[i] = s_p[e];
        key[i] = s_key[e];
        const uint32_t b = s_bits[e];
        if (b & kResident) res_bits |= 1u << i;
        if (b & kHot) hot_bits |= 1u << i;
        if (b & kAbsent) taken |= 1u << i;
    }
    int n_found = 0;
    float sum = 0.0f;
    bool hot_left = true;
    for (int j = 0; j < k; ++j) {
        int need = rank_need(policy, j, hot_left);
        float bk = 0.0f;
        int be = -1;
        for (;;) {
            const uint32_t ok = ~taken & (need == kAny ? 0xFFFFFFFFu : need == kResident ? res_bits : hot_bits);
            bk = 0.0f;
            be = -1;
#pragma unroll
            for (int i = 0; i < PL; ++i)
                if (((ok >> i) & 1u) && (be < 0 || key[i] > bk)) {  // ids rise with i: ">" keeps the lower id
                    bk = key[i];
                    be = lane + 32 * i;
                }
            warp_best(bk, be);
            if (be >= 0 || need != kHot) break;
            hot_left = false;
            need = kResident;
        }
        if (be < 0) break;
        // The winner's owner marks it taken and hands its p to the warp.
        float pv = 0.0f;
#pragma unroll
        for (int i = 0; i < PL; ++i)
            if ((be & 31) == lane && (be >> 5) == i) {
                pv = p[i];
                taken |= 1u << i;
            }
        pv = __shfl_sync(0xffffffffu, pv, be & 31);
        if (lane == 0) {
            route_chosen[j] = be;
            if (j < 32) chosen_p[j] = pv;
        }
        sum += pv;
        ++n_found;
    }
    __syncwarp();
    const float f = norm ? scale / fmaxf(sum, 6.1035e-5f) : scale;  // RouteWeighting::factor
    for (int j = lane; j < k; j += 32) {
        const bool found = j < n_found;
        float pj = 0.0f;
        if (found) {
            const int e = route_chosen[j];
            const float x = lg[e];
            pj = j < 32 ? chosen_p[j] : sqrtf(fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))));
        }
        ids[t * k + j] = found ? route_chosen[j] : -1;
        weights[t * k + j] = found ? pj * f : 0.0f;
    }
}

template <int PL>
void launch_route_reg(int policy, const float* logits, const float* bias, const uint8_t* resident, const uint8_t* hot,
                      int64_t n_tok, int64_t n_expert, int k, RouteWeighting wt, int32_t* ids, float* weights,
                      cudaStream_t stream) {
    BG_CUDA_CHECK(launch_kernel(route_reg_kernel<PL>, static_cast<unsigned>(n_tok), 32 * PL,
                                static_cast<size_t>(k) * sizeof(int32_t), stream, policy, logits, bias, resident, hot,
                                n_expert, k, wt.norm ? 1 : 0, wt.scale, ids, weights));
}

}  // namespace

void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident, const uint8_t* hot,
           int64_t n_tok, int64_t n_expert, int k, RouteWeighting wt, int32_t* ids, float* weights, cudaStream_t stream) {
    BG_CHECK(k >= 1 && k <= n_expert);
    BG_CHECK(policy == RoutingPolicy::kExact || resident != nullptr);
    BG_CHECK(policy != RoutingPolicy::kHotPool || hot != nullptr);
    if (n_tok <= 0) return;
    BG_CHECK(n_tok <= INT_MAX);
    // Up to 512 experts (32 a lane at most 16): the register walk.
    const int pol = static_cast<int>(policy);
    if (n_expert <= 512 && static_cast<size_t>(k) * sizeof(int32_t) <= 48 * 1024) {
        const int64_t per_lane = (n_expert + 31) / 32;
        auto launch = [&](auto pl) {
            launch_route_reg<decltype(pl)::value>(pol, logits, bias, resident, hot, n_tok, n_expert, k, wt, ids,
                                                  weights, stream);
        };
        if (per_lane <= 2) launch(std::integral_constant<int, 2>{});
        else if (per_lane <= 4) launch(std::integral_constant<int, 4>{});
        else if (per_lane <= 8) launch(std::integral_constant<int, 8>{});
        else if (per_lane <= 12) launch(std::integral_constant<int, 12>{});
        else launch(std::integral_constant<int, 16>{});
        BG_CUDA_CHECK_LAUNCH();
        return;
    }
    const size_t smem =
        (2 * static_cast<size_t>(n_expert) + static_cast<size_t>(k)) * 4 + 2 * static_cast<size_t>(n_expert);
    BG_CHECK_MSG(smem <= 48 * 1024, "router: too many experts for one block's shared memory");
    BG_CUDA_CHECK(launch_kernel(route_kernel, static_cast<unsigned>(n_tok), 32, smem, stream, static_cast<int>(policy),
                                logits, bias, resident, hot, n_expert, k, wt.norm ? 1 : 0, wt.scale, ids, weights));
}

}  // namespace bg::cuda
