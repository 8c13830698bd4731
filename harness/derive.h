// Per-layer figures of a run on a model with few layers (the `slice` profile: full width, every
// layer role, a handful of layers), and the figures of a model with more layers derived from
// them. Derived figures are arithmetic, not measurements, and every view labels them so.
//
// The engine reports whole-pass times only, so the whole pass counts as layer time: the token
// embedding, the output head and the Engram reads (which do not grow with the layer count) are
// multiplied with the layers. That overstates the derived time, so a derived speed is a lower
// bound of what the same per-layer work would give on the deeper model.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

struct LayerFigures {
    int64_t layers_run = 0, layers_derived = 0;
    double tokens = 0;
    double ms_per_layer = 0;
    double disk_bytes_per_layer = 0, pcie_bytes_per_layer = 0, disk_wait_ms_per_layer = 0;
    double derived_ms = 0, derived_tok_s = 0, derived_disk_wait_ms = 0;
};

// From one pass's totals: `ms` for `tokens` tokens over `layers_run` layers. nullopt when the
// inputs cannot give a figure (no time, no layers).
std::optional<LayerFigures> derive_layers(double tokens, double ms, double disk_bytes, double pcie_bytes,
                                          double disk_wait_ms, int64_t layers_run, int64_t layers_derived);

// The model's layer count as the engine reported it in any run of the result; nullopt if none.
std::optional<int64_t> layers_run(const nlohmann::json& result);

// Per pass (1-based) or decode (0) of a configuration, from its medians; nullopt when the
// result has no "derive_layers" or the pass was not measured.
std::optional<LayerFigures> derived_figures(const nlohmann::json& result, const nlohmann::json& config, int64_t pass);

// The Markdown section "per layer, and derived for N layers" for a run result (empty when the
// scenario asks for no derivation), with the seed's published figures beside the derived ones.
std::string derived_markdown(const nlohmann::json& result, const nlohmann::json& config);
// A run whose GPU work was held to fewer SMs (`--sm-limit`, the engine's metrics
// engine.sm_limit): the RTX 3060 projected from it, never a measurement of one. The GPU kernel
// time measured on those SMs is a lower bound for the 3060's issue-bound work (the GPU that ran
// it has faster memory), so beside it stand the 3060's floors for the same bytes: VRAM reads at
// 360 GB/s and PCIe copies at 25 GB/s. A pass's projected time on the 3060 lies between
//   low  = max(GPU kernel time, VRAM floor, PCIe floor)   (copies wholly hidden under compute)
//   high = max(GPU kernel time, VRAM floor) + PCIe floor  (nothing overlapped)
// and, where the scenario derives a deeper model, the same range per layer × its layer count.
constexpr double kRtx3060VramGBs = 360.0, kRtx3060PcieGBs = 25.0;
struct Rtx3060Projection {
    double tokens = 0, gpu_ms = 0;
    double vram_bytes = 0, pcie_bytes = 0;
    double vram_floor_ms = 0, pcie_floor_ms = 0;
    double low_ms = 0, high_ms = 0;  // the range on the model that ran
    bool copy_bound() const { return pcie_floor_ms > std::max(gpu_ms, vram_floor_ms); }
};
// From one pass's totals: expert bytes consumed plus the dense weights held on the GPU make the
// VRAM bytes (dense counted once: a floor, each unit of work re-reads them).
Rtx3060Projection project_rtx3060(double tokens, double gpu_ms, double expert_bytes, double dense_bytes, double pcie_bytes);
// The labelled Markdown block; empty when no run of `config` had an SM limit.
std::string rtx3060_projection_markdown(const nlohmann::json& result, const nlohmann::json& config);

// For an ablation: each row's derived cold and warm prefill speed (speed-ups are unchanged by
// the derivation: every row's time is scaled alike).
std::string derived_ablation_markdown(const nlohmann::json& result);

}  // namespace bgh
