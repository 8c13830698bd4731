// Per-layer figures of a run on a model with few layers (the `slice` profile: full width, every
// layer role, a handful of layers), and the figures of a model with more layers derived from
// them. Derived figures are arithmetic, not measurements, and every view labels them so.
//
// The engine reports whole-pass times only, so the whole pass counts as layer time: the token
// embedding, the output head and the Engram reads (which do not grow with the layer count) are
// multiplied with the layers. That overstates the derived time, so a derived speed is a lower
// bound of what the same per-layer work would give on the deeper model.
#pragma once

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
// For an ablation: each row's derived cold and warm prefill speed (speed-ups are unchanged by
// the derivation: every row's time is scaled alike).
std::string derived_ablation_markdown(const nlohmann::json& result);

}  // namespace bgh
