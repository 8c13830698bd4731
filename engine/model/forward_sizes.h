// What each dsv41 forward pass allocates, as functions of the model's shape and the forward
// configuration alone (no file, no GPU), so `betelgeuse plan` can print a run's memory before
// it starts. The forward passes check at construction that they allocated exactly this, so the
// plan and the allocators cannot drift apart.
#pragma once

#include <cstdint>
#include <vector>

#include "model/dsv41.h"

namespace bg::dsv41 {

struct ForwardConfig;

// Device memory a forward pass holds, by kind, and its host buffers.
struct ForwardBytes {
    uint64_t device_dense = 0;    // the dense image on the device (all but the token embedding)
    uint64_t device_caches = 0;   // KV cache, compressed streams, index keys and selections for n_ctx
    uint64_t device_work = 0;     // per-unit activations and work buffers, routing masks
    uint64_t device_matmul = 0;   // the matmul context's dequantisation scratch
    uint64_t host = 0;            // host-side caches (CPU) or buffers and timelines (GPU)
    uint64_t device_total() const { return device_dense + device_caches + device_work + device_matmul; }
};

// The CPU forward (dsv41::Forward): everything on the host.
ForwardBytes cpu_forward_bytes(const HParams& hp, const std::vector<LayerRoles>& roles, const ForwardConfig& cfg);

// The CUDA forward: `device_image_bytes` from the model's dense layout; `has_plan` when the
// routing policy reads a residency plan (a resident mask per layer on the device).
ForwardBytes gpu_forward_bytes(const HParams& hp, const std::vector<LayerRoles>& roles, const ForwardConfig& cfg,
                               uint64_t device_image_bytes, bool has_plan);

// The GPU matmul context's dequantisation scratch (cuda::MatmulContext::kDefaultScratchBytes).
constexpr uint64_t kGpuMatmulScratchBytes = uint64_t{128} << 20;

}  // namespace bg::dsv41
