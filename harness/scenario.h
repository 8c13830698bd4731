// A benchmark scenario: what to run, on which model, under which memory limits, how often, and
// how to judge a later run against this one. Scenarios are JSON files (schema in
// harness/README.md); everything is validated before anything runs, and every problem is
// reported with its key path and the reason, so a typo never silently becomes a default.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "json_value.h"

namespace bgh {

// Every problem found in a scenario, one "file: key.path: reason" line each.
struct ScenarioError : std::runtime_error {
    explicit ScenarioError(const std::vector<std::string>& problems);
    std::vector<std::string> problems;
};

// How the partition chooses a token's k experts (SPEC §2.1). The seed's rule picks all k among
// the layer's resident experts, so a warm pass reads nothing from disk; ours keeps the exact
// rank 1 wherever it lies, at the price of disk reads, and is measured beside it. hot-pool is
// ours too, an interpretation of the seed's sentence (rank 1 among the resident experts, ranks
// 2..k among those in VRAM: engine/cpu/routing.h), reported to show which reading the seed's
// decode figure needs.
enum class PartitionRule { kResidentOnly, kPinnedTop1, kHotPool };
const char* partition_rule_name(PartitionRule r);  // the engine's --routing value
std::optional<PartitionRule> parse_partition_rule(const std::string& name);

// The seed's three data-movement changes. Their mapping onto engine flags lives in one place
// (change_flags) so the scenarios, the ablation and the documentation cannot drift apart.
struct Changes {
    bool partition = false;    // change 1: --routing resident-only (off: --routing exact)
    bool layer_major = false;  // change 2: --prefill layer-major --ubatch 16 (off: token-major, ubatch 3)
    bool promotion = false;    // change 3: --promote
    // Only meaningful with partition on; kept at the seed's rule otherwise, so that equal
    // configurations compare equal.
    PartitionRule rule = PartitionRule::kResidentOnly;
    bool operator==(const Changes&) const = default;
    int count() const { return int(partition) + int(layer_major) + int(promotion); }
};

// Engine flags for a set of changes, in a fixed order.
std::vector<std::string> change_flags(const Changes& c);
// "baseline", "partition only", "without promotion", "all three", ...: the name a configuration
// is known by in results, tables and compare; " (pinned-top1)" or " (hot-pool)" follows when the
// partition uses one of our rules instead of the seed's.
std::string changes_name(const Changes& c);
nlohmann::json changes_to_json(const Changes& c);
// The inverse, for results written by any version: before "partition_rule" was recorded every
// partition ran pinned-top1, so that is what its absence means.
Changes changes_from_json(const nlohmann::json& j);

// A published figure: one number, or a range [low, high].
struct Figure {
    double low = 0, high = 0;
    bool is_range() const { return low != high; }
};

struct PublishedPass {
    std::optional<Figure> prefill_tok_s, disk_read_pct, disk_wait_ms;
};

struct Published {
    std::string source;
    std::vector<PublishedPass> passes;  // by pass index; may be shorter than the passes run
    std::optional<Figure> decode_tok_s, vram_peak_mib;
    std::string vram_note;              // e.g. "within 12 GiB"
};

struct EngineOptions {
    // slots and hot: kMost for "max" (the engine's --slots/--hot max: the most the budgets hold).
    static constexpr int64_t kMost = -2;
    int64_t slots = 20, hot = 5, transient_slots = 32, lru_slots = 0;
    std::string io = "uring";
    int64_t queue_depth = 64, read_size_bytes = 1 << 20;
    int64_t threads = 0;             // 0: all cores
    int64_t engram_buffer_kib = 2048;
    int64_t engram_read_ahead_kib = -1;  // --engram-read-ahead; -1 = not passed (the engine's default)
    std::string backend;             // "" = the engine's default (auto)
    std::string decode_experts;      // --decode-experts; "" = the engine's default (auto)
    // --host-expert-positions, always passed: 1 (decode steps alone) unless a scenario says, so the
    // token-major baselines' 3-token units copy every host expert, as every result before the
    // engine's default became 12 (2026-12-07) did.
    int64_t host_expert_positions = 1;
    std::string residency_path;      // resolved; "" = the engine's default plan
    std::vector<std::string> extra_args;
};

struct Scenario {
    std::string file;                // absolute path of the scenario file
    std::string name;                // results/<profile>/<name>/
    std::string description;
    std::string profile;
    std::string mode = "run";        // "run" | "ablation"

    std::string model_path;          // absolute
    std::string model_scale_path;    // absolute; "" = never generate
    uint64_t model_seed = 1;

    int64_t vram_budget_mib = 0, host_budget_mib = 0, cgroup_memory_mib = 0;
    bool swap = false;               // false: the cgroup may not use swap

    Changes changes;
    EngineOptions engine;

    int64_t prompt_tokens = 0;       // random ids, used when neither file below is set
    uint64_t prompt_seed = 1;
    std::string prompt_text_file;    // absolute: a file of text (the model's tokenizer reads it)
    std::string prompt_ids_file;     // absolute: a file of token ids

    int64_t passes = 2;
    std::vector<std::string> pass_labels;  // one per pass, or empty
    int64_t decode_tokens = 16;
    int64_t repetitions = 1;
    bool baseline_reference = true;  // also run the baseline configuration in the same run
    double speed_ratio_tolerance = 0.25;   // allowed relative drop of a speed ratio in compare

    // The slice profile's model has a few of the real model's layers: its per-layer figures are
    // shown with those of a model of this many layers derived from them (harness/derive.h).
    // 0: no derivation.
    int64_t derive_layers = 0;

    std::optional<Published> published;
    std::vector<std::string> warnings;  // legal but probably not meant; printed and recorded
    JsonValue source;                // the file's JSON as read, kept in every result

    // The configurations a run of this scenario measures, in order: for mode "run" the
    // scenario's changes (plus the baseline when baseline_reference), for "ablation" the whole
    // matrix: baseline, each change alone, all three, each left out of all three, then all
    // three with pinned-top1 in place of resident-only (the price of keeping the exact rank 1).
    std::vector<Changes> configurations() const;
    std::string pass_label(int64_t pass) const;  // "4a" when labelled, else the pass number
};

// Reads and validates a scenario file; throws ScenarioError listing every problem.
Scenario load_scenario(const std::string& path);
// The same for text already read; `path` names the file in messages and anchors relative paths.
Scenario parse_scenario(const std::string& json_text, const std::string& path);

// The engine command line (after the engine binary) for one configuration of a scenario.
std::vector<std::string> engine_args(const Scenario& s, const Changes& c, const std::string& metrics_json_path);

}  // namespace bgh
