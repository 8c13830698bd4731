// One engine run: the model, the backend, the disk readers, the residency plan, the tiered
// expert store, the Engram store, the forward pass and the runner, owned together (no globals).
// run() does the passes and the decode and returns every metric of SPEC §2.1 as JSON.
// The session is where the architecture is chosen: it opens the dsv41 model and builds its
// forward pass; everything it hands them to (the stores, providers, residency plan, prompt and
// runner) sees only model/moe_model.h and model/layer_forward.h. The memory plan
// (runtime/memory_plan.h) sizes the dsv41 forward's buffers and is the other place that names it.
#pragma once

#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/backend.h"
#include "backend/device.h"
#include "cpu/thread_pool.h"
#include "io/reader.h"
#include "model/dsv41_forward.h"
#include "runtime/engram_store.h"
#include "runtime/expert_store.h"
#include "runtime/memory_plan.h"
#include "runtime/residency.h"
#include "runtime/prompt.h"
#include "runtime/run_config.h"
#include "runtime/runner.h"

namespace bg {


class Session {
public:
    // Opens everything and checks the budgets; throws bg::Error with the reason. `device` is
    // the CPU when null.
    explicit Session(const RunConfig& cfg, DeviceFactory* device = nullptr);
    ~Session();

    // The passes, then decoding; the metrics object (config echoed). Prints a line per pass to
    // stderr when `verbose`; `on_token` sees each generated token as it is chosen.
    nlohmann::json run(bool verbose, const std::function<void(int32_t)>& on_token = {});

    const std::vector<int32_t>& prompt() const { return prompt_; }
    const std::vector<int32_t>& generated() const { return generated_; }
    const tok::Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null: the model has none
    // The tokens decoding stops at (unless RunConfig::ignore_eos); empty without a vocabulary.
    const tok::EndOfGeneration& end_of_generation() const { return eog_; }
    // Whether the last run() ended at one of them (false with ignore_eos).
    bool stopped_at_eog() const { return stopped_at_eog_; }
    // The run's configuration as resolved: S and H as the run uses them.
    const RunConfig& config() const { return cfg_; }
    const dsv41::Model& model() const { return *model_; }
    TieredExpertStore& store() { return *store_; }
    EngramStore& engram() { return *engram_; }
    dsv41::Forward& forward() { return *fwd_; }
    Runner& runner() { return *runner_; }
    const ResidencyPlan& plan() const { return plan_; }
    // What this run allocated, by tier: `betelgeuse plan`'s table for the same flags (checked
    // against the live allocations at start-up).
    const MemoryPlan& memory() const { return memory_; }
    PrefillOrder order() const { return order_; }

    // Logits of every prompt position under the given routing (for fidelity and tests).
    std::vector<float> all_logits(RoutingPolicy policy);
    // End-of-pass promotion (TieredExpertStore::promote); the hot set hot-pool routes among
    // follows the experts it moved into VRAM.
    void promote();

private:
    // The start-up measurement --decode-experts hybrid balances by (HostPathRates per layer).
    void measure_host_paths();

    RunConfig cfg_;
    uint64_t vram_reserve_bytes_ = 0;    // of the budget, for the GPU runtime (0 on the CPU)
    uint64_t runtime_device_bytes_ = 0;  // what the GPU runtime was measured to hold at start-up
    MemoryPlan memory_;
    PrefillOrder order_;
    RoutingPolicy routing_;
    std::unique_ptr<dsv41::Model> model_;
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<cpu::ThreadPool> pool_;
    std::unique_ptr<io::Reader> expert_reader_, engram_reader_;
    ResidencyPlan plan_;
    std::vector<std::vector<uint8_t>> hot_mask_;  // [layer][n_expert]: 1 where in VRAM now (ForwardConfig::hot)
    std::unique_ptr<EngramStore> engram_;
    std::unique_ptr<TieredExpertStore> store_;
    std::unique_ptr<dsv41::Forward> fwd_;
    std::unique_ptr<Runner> runner_;
    std::unique_ptr<tok::Tokenizer> tokenizer_;
    std::unique_ptr<Sampler> sampler_;
    tok::EndOfGeneration eog_;
    std::vector<int32_t> prompt_, generated_;
    bool stopped_at_eog_ = false;
};

// Top-1 agreement and mean KL(exact || policy) of next-token distributions over positions.
struct Fidelity {
    double top1_agreement = 0;
    double mean_kl = 0;
    int64_t positions = 0;
};
Fidelity compare_logits(const std::vector<float>& exact, const std::vector<float>& policy, int64_t n_vocab);

double host_peak_rss_mib();
double cgroup_memory_peak_mib();

}  // namespace bg
