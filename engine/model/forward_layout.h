// Every buffer the dsv41 forward pass allocates, sized from the model's shape and the forward
// configuration alone (no file, no device), so `betelgeuse plan` prints a run's memory before it
// starts. The forward allocates each buffer from these counts and checks at construction that
// the bytes it holds are the layout's, so the plan and the allocations cannot drift apart.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "model/dsv41.h"

namespace bg::dsv41 {

struct ForwardConfig {
    int64_t n_ctx = 4096;       // longest sequence (prompt + generated tokens)
    int64_t max_ubatch = 16;    // most tokens in one unit of work
    // Most tokens in one launch of a layer's dense work: layer-major prefill passes consecutive
    // whole units through a layer's attention half (and the shared expert) together, so each
    // dense matrix is read once per launch instead of once per unit. Below max_ubatch: one unit.
    int64_t max_launch = 0;
    int64_t launch_tokens() const { return max_launch > max_ubatch ? max_launch : max_ubatch; }
    SwigluClamp swiglu_form = SwigluClamp::kDeepSeek;
    RoutingPolicy routing = RoutingPolicy::kExact;
    // [layer][n_expert] 1 where resident: needed by every policy but exact.
    const std::vector<std::vector<uint8_t>>* resident = nullptr;
    // [layer][n_expert] 1 where the expert is in VRAM now (the hot set, a subset of the resident
    // set): needed by hot-pool. Forward::refresh_hot_set reads it again after promotion.
    const std::vector<std::vector<uint8_t>>* hot = nullptr;
    int64_t moe_chunk = 64;     // tokens per expert matmul
    // How quantized weights are multiplied. Precise here, where the float64 reference checks
    // build forwards; `betelgeuse run` defaults to fast (RunConfig::matmul).
    MatmulMode matmul = MatmulMode::kPrecise;
    // MoE calls of at most this many positions (1: decode steps) may compute host-resident
    // experts on the CPU where they lie (--decode-experts cpu | hybrid: the provider decides
    // which); the forward then holds those positions' activations on the host too. 0: never.
    int64_t host_expert_positions = 0;
};

// Memory a forward pass holds, by kind. On a backend whose memory is the host's, the device
// kinds are 0 and everything is host.
struct ForwardBytes {
    uint64_t device_dense = 0;    // the dense image on the device (all but the token embedding)
    uint64_t device_caches = 0;   // KV cache, compressed streams, index keys and selections for n_ctx
    uint64_t device_work = 0;     // activations by position, work buffers, routing masks
    uint64_t device_matmul = 0;   // the backend's own (the CUDA fused-matmul workspace and dequantisation scratch)
    uint64_t host = 0;            // host buffers (and, on the CPU, all of the above but the dense image)
    uint64_t device_total() const { return device_dense + device_caches + device_work + device_matmul; }
};

// Element counts; a buffer of 0 elements is still allocated (1 byte).
struct ForwardLayout {
    // Per layer (0 where the layer has no such role).
    std::vector<int64_t> kv_cache, comp_in, comp_score, comp_latent, comp_rows, idx_keys, sel, sel_n;
    int64_t resident_masks = 0, resident_mask = 0;  // layers with a mask, its bytes (n_expert)
    int64_t hot_masks = 0;                          // layers with a hot mask (resident_mask bytes each)
    // Activations by position [n_ctx][...]
    int64_t H = 0, pre = 0, xf = 0, mixf = 0, ids = 0, wts = 0, eo = 0, iota = 0;
    // Work buffers (floats, then int32)
    int64_t hflat = 0, mixm = 0, mixa = 0, x = 0, y = 0, qa = 0, q = 0, kvb = 0, att = 0, oa = 0, iq = 0, iw = 0,
            iscore = 0, rlogits = 0, pooled = 0, emb = 0, erow = 0, ekv = 0, sg = 0, su = 0, sh = 0, logits = 0;
    // groups: Ops::group_by_expert's output, laid out per call so that the host gets it in one
    // download: [n_expert + 1] counts, then the call's [n_slots] gather rows, then its [n_slots]
    // scatter rows (n_slots up to n_ctx * k).
    int64_t bpos = 0, groups = 0, greedy = 0;
    // Host (int32 unless said). groups_host: groups' counts, and with host-resident experts on the
    // CPU (below) a call's gather and scatter rows after them as on the device.
    int64_t tokens = 0, out_host = 0 /* float */, emb_host = 0 /* float */, onehot = 0 /* float */,
            erows = 0 /* uint64 */, groups_host = 0, by_expert_start = 0, used_experts = 0, used_tokens = 0,
            greedy_host = 0;
    // Host-resident experts computed on the CPU (ForwardConfig::host_expert_positions P > 0; all
    // 0 and not allocated otherwise). Host: the call's activations [P][n_embd] (float), (its
    // gather and scatter rows are in groups_host), packed-row ids and the packed rows' destinations [P*k] (int32),
    // the CPU's expert outputs, packed [P*k][n_embd] (float), which the device reads in place
    // (Ops::host_view) as it scatters them into the expert-output rows. host_done: the word the
    // CPU's thread advances as a layer's experts are done (uint32, Ops::wait_host_word).
    int64_t xf_host = 0, host_pack = 0, host_dest = 0, eo_host = 0, host_done = 0;
    // What the forward asks of its ops at most (they size their own memory from it: the routed
    // experts' scratch, and on CUDA the matmul paths' memory from the weight types).
    OpsLimits ops;
    // What the CPU ops computing host-resident experts are asked at most (zeros when none).
    OpsLimits host_ops;

    // type_of: the type of each tensor of tensor_specs(hp, roles), by name (the file's).
    static ForwardLayout of(const HParams& hp, const std::vector<LayerRoles>& roles, const ForwardConfig& cfg,
                            const std::function<GgmlType(const std::string&)>& type_of);

    // What the forward holds: `memory_is_host` for a backend whose memory is the host's (the
    // dense image is then the model's own, not counted); own_device_bytes and own_host_bytes are
    // the ops' own (matmul workspace and scratch, kernel timeline; the CPU's expert scratch), the
    // host part with the host-expert ops' own (cpu::ops_host_bytes(host_ops)) where there are any.
    ForwardBytes bytes(bool memory_is_host, uint64_t device_image_bytes, uint64_t own_device_bytes,
                       uint64_t own_host_bytes) const;
};

// The CUDA ops' own memory, for plans made without a device: on the device, the fused-matmul
// workspace and dequantisation scratch the layout's limits ask for (bg::cuda_ops_device_bytes);
// on the host, the kernel timeline.
inline uint64_t gpu_ops_device_bytes(const ForwardLayout& f) { return cuda_ops_device_bytes(f.ops); }
uint64_t gpu_ops_host_bytes(const OpsLimits& lim);

}  // namespace bg::dsv41
