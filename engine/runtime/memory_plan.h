// Every allocation a run makes, by tier, from the model's shape and the run's flags: what
// `betelgeuse plan` prints and checks against the budgets before a run (a model file or only a
// scale), and what a Session reports it allocated. Both are built from the sizing functions the
// allocators themselves use (dense_layout, the forward sizes, the store's pool sizes), so a plan
// that fits is a run that fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/dsv41.h"
#include "model/dsv41_model.h"
#include "runtime/run_config.h"
#include "tensor/ggml_types.h"

namespace bg {

struct ModelScale;

// The model as the sizing functions see it: hyper-parameters, roles, and each tensor's class,
// type and size. From an opened file, or from a scale without one.
struct ModelShape {
    dsv41::HParams hp;
    std::vector<dsv41::LayerRoles> roles;
    struct Tensor {
        std::string name;
        dsv41::TensorClass cls = dsv41::TensorClass::kMatrix;
        GgmlType type = GgmlType::F32;
        uint64_t n_elems = 0, n_bytes = 0;
    };
    std::vector<Tensor> tensors;  // the architecture's tensors (skipped ones left out)
    // One routed expert of each layer: its slices of the layer's three merged tensors, which
    // may differ in type from layer to layer (llama-quantize's ffn_down rules).
    struct ExpertLayer {
        uint64_t bytes = 0;  // gate + up + down
        GgmlType gate = GgmlType::F32, up = GgmlType::F32, down = GgmlType::F32;
    };
    std::vector<ExpertLayer> expert_layers() const;  // [n_layer]
    std::vector<uint64_t> expert_bytes_by_layer() const;
};
ModelShape shape_of(const dsv41::Model& m);
ModelShape shape_of(const ModelScale& s);  // Engram layout from seed 1, as make-model would draw it
// From a file's header alone: no weight is read (a plan for a 500 GB model reads kilobytes).
ModelShape shape_of_file(const std::string& path);

enum class MemoryTier { kVram, kHost };

struct MemoryItem {
    MemoryTier tier;
    std::string what;
    uint64_t bytes = 0;
    bool counted = true;  // false: shown for information (a breakdown, or held only at start-up)
};

struct MemoryPlan {
    std::string backend;  // cpu | cuda
    std::vector<MemoryItem> items;
    uint64_t vram_budget_bytes = 0, host_budget_bytes = 0;
    uint64_t cgroup_limit_bytes = 0;  // 0: none given
    // Of the items, what the forward pass holds (its dense image on a device, caches, work
    // buffers, matmul memory): the session sizes the expert store's budgets with these before the
    // forward exists, then checks the forward holds exactly this.
    uint64_t forward_device_bytes = 0, forward_host_bytes = 0;
    // Host room a cgroup needs beyond the engine's allocations: the io bounce buffers, the
    // runtime's heap and the page cache that loading the dense weights goes through.
    static constexpr uint64_t kCgroupHeadroomBytes = uint64_t{512} << 20;

    uint64_t total(MemoryTier t) const;
    // Empty when everything fits; else one line per budget exceeded, saying by how much.
    std::string problems() const;
    std::string table() const;
    nlohmann::json to_json() const;
};

// How many experts the budgets hold with the other flags as given: the most hot slots per layer
// VRAM holds beside everything else on it, and the most resident slots per layer (S) the host
// tier holds beside its other allocations with `hot` of them in VRAM (within the cgroup limit
// less its headroom, when given). Each slot of a layer holds that layer's expert; -1: not even
// none fits (what else the tier holds is over the budget already). Capped at n_expert.
struct ExpertCapacity {
    int64_t max_hot = -1;
    int64_t max_slots = -1;
    int64_t hot = 0;  // the --hot max_slots was found with
};
// A line per run of layers with equal experts ("layers 0-1, 3: 11.6 MB per expert (q2_K, q2_K,
// q3_K), slots of 11.1 MiB"), and what the budgets hold, for `plan`.
std::string expert_summary(const ModelShape& shape, const ExpertCapacity& cap, int64_t n_layer);

// n_prompt: prompt tokens (with cfg.gen they set the context when cfg.n_ctx is 0); cuda: plan
// for the CUDA backend (dense image in VRAM), else the CPU backend (its device arena is the VRAM
// tier). slots and hot as the run would resolve them.
MemoryPlan plan_memory(const ModelShape& shape, const RunConfig& cfg, bool cuda, int64_t n_prompt, int64_t slots,
                       int64_t hot, uint64_t cgroup_limit_bytes = 0);
ExpertCapacity expert_capacity(const ModelShape& shape, const RunConfig& cfg, bool cuda, int64_t n_prompt,
                               int64_t slots, int64_t hot, uint64_t cgroup_limit_bytes = 0);

// --slots max and --hot max (RunConfig::kMostThatFit): replaces them in cfg by the most the
// budgets hold (expert_capacity), the other flags as given, and says what it chose in
// cfg.residency_defaults. --hot max first, capped at S where S is given (or follows the model);
// then --slots max with that H (the seed's default H where --hot is not given). Throws bg::Error
// naming the budget when not even the fewest experts routing needs fit. Nothing to do when neither
// is max.
void resolve_most_that_fit(RunConfig& cfg, const ModelShape& shape, bool cuda, int64_t n_prompt,
                           uint64_t cgroup_limit_bytes = 0);

}  // namespace bg
