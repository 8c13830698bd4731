// The tiered expert store: disk (the model file through io::Reader), host slots and device
// slots, behind the ExpertProvider interface the forward pass uses. Three pieces: the memory
// (runtime/expert_slot_pool.h: the two pools, their budgets and slot addresses), where each expert
// lives (runtime/expert_homes.h: tiers, slots, LRU and promotion choices, bookkeeping only), and
// here the pipeline that moves one layer's experts (disk reads, copies, hand-out and release).
//
// Per layer, the S resident experts of the plan each own a home slot: H in the device ("hot")
// pool, S-H in the host pool. A resident expert is read from disk the first time a pass uses it
// and stays. A non-resident expert goes through a bounded transient area (host staging, then a
// device transient slot) and is not kept. Compute always reads device memory: a hot expert in
// place, any other through a copy into a transient slot, which is what crosses PCIe.
//
// A streamer thread runs the pipeline for the announced experts of a layer: it issues disk reads
// as far ahead as staging allows and copies as far ahead as transient slots allow, so reads and
// copies of later experts overlap the compute of earlier ones. With prefetch off it handles one
// expert only when the compute thread asks for it (the synchronous baseline).
//
// Speculative copies (prefetch on): when prepare_layer says a layer will route many slots, the
// host-slot resident experts already in host memory are copied into transient slots while the
// attention half computes, before routing names the ones used (under resident-only routing
// every used expert is resident, and with several picks per candidate nearly all are used).
// begin_layer keeps the copies of the used ones; an unused one costs its PCIe bytes, counted.
// Host compute (--decode-experts cpu | hybrid, runtime/decode_split.h): when the caller can
// compute on the CPU (begin_layer's host_compute: a decode step), some host-slot experts are not
// copied at all: next_ready hands them out as host views (ExpertView::on_host) at once, after
// the ready device-side ones, so the compute thread works through them while copies land.
// One expert of such a layer may be split (split_host_experts, StoreConfig::split_experts): its
// first hidden rows handed out as a host view for the CPU, the others copied (those rows of gate
// and up, those columns of down) into a transient slot, where they lie as in a whole copy, and
// handed out as a device view: the expert is handed out twice, and released once from each path.
// Copies in flight: where the backend gives an event for a copy (Backend::copy_event), an expert
// whose copy is queued is handed out before it lands, alone and in copy order, when nothing
// present is left, with the event (ExpertView::ready): the compute thread queues its compute
// behind the event and the device starts on it as the bytes land, where the host would learn of
// the landing through the streamer's wake-up and its own (about 80 us an expert in a hybrid
// decode trace on the H100, 2026-12-06).
// All pools are allocated once, at construction; nothing allocates per expert.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <functional>
#include <memory>

#include <nlohmann/json_fwd.hpp>

#include "backend/backend.h"
#include "io/reader.h"
#include "model/moe_model.h"
#include "runtime/decode_split.h"
#include "runtime/expert_homes.h"
#include "runtime/expert_slot_pool.h"
#include "runtime/expert_slots.h"
#include "runtime/providers.h"
#include "runtime/residency.h"
#include "util/timeline.h"

namespace bg {

struct StoreConfig {
    int64_t transient_slots = 32;     // device transient slots (and as many host staging slots)
    bool prefetch = true;             // run reads and copies ahead of compute
    bool speculative = true;          // with prefetch: copy host-slot residents before routing (prepare_layer)
    int64_t lru_slots = 0;            // host slots caching non-resident experts (0: none kept)
    uint64_t vram_budget_bytes = 12ull << 30;
    uint64_t host_budget_bytes = 12ull << 30;
    uint64_t device_fixed_bytes = 0;  // other device memory charged to the budget (Engram buffer)
    uint64_t host_fixed_bytes = 0;    // other host memory charged to the budget (dense, caches)
    bool split_experts = true;        // host compute may split one expert a layer between the paths
    SplitCopy split_copy = SplitCopy::kColumns;  // how a split expert's copied part travels
    nlohmann::json to_json() const;
};

// Counters since construction; a pass's figures are the difference of two snapshots.
struct StoreCounters {
    uint64_t vram_hits = 0, host_hits = 0, disk_fetches = 0;
    uint64_t vram_hit_bytes = 0, host_hit_bytes = 0, disk_bytes = 0;  // expert bytes by source
    uint64_t consumed_bytes = 0;     // once per expert per layer per unit of work
    uint64_t copied_experts = 0;     // host->device copies of whole experts (what pcie_bytes counts)
    uint64_t pcie_bytes = 0;         // host->device copies of expert bytes
    double pcie_ms = 0;              // copy-engine time of those copies (events; host wall time on the CPU arena)
    double pcie_wall_ms = 0;         // host wall time from queueing each batch to its last copy landing
    uint64_t disk_read_bytes = 0;    // bytes the device read (aligned covers)
    double disk_busy_ms = 0;         // wall time with at least one expert read in flight
    double disk_wait_ms = 0;         // compute blocked while an expert it waits for is on disk
    double copy_wait_ms = 0;         // compute blocked on copies only (the host's thread: where copies have
                                     // events the device waits for them instead, and this stays small)
    uint64_t promotions = 0;         // experts moved between tiers by promotion
    uint64_t promotion_bytes = 0;
    uint64_t speculative_copies = 0;  // host-slot experts copied before routing named them
    uint64_t speculative_unused = 0;  // of those, experts routing then did not use (PCIe bytes spent for nothing)
    uint64_t cpu_experts = 0;        // host-resident experts computed by the CPU in place (no copy)
    uint64_t cpu_probes = 0;         // of those, given to it to measure its rate again (kCpuProbeEveryLayers)
    uint64_t cpu_bytes = 0;          // their bytes, and those of the CPU's parts of split experts
    uint64_t split_experts = 0;      // experts split between the CPU and a copy (in neither count above;
                                     // their bytes in cpu_bytes and pcie_bytes, each part's once)
    uint64_t max_reads_one_expert_pass = 0;  // most disk reads of one (layer, expert) in a pass
    uint64_t pool_allocations = 0;   // start-up allocations; never grows afterwards

    StoreCounters operator-(const StoreCounters& o) const;
    nlohmann::json to_json() const;
};

// What preload() read: the experts it filled and their bytes, and how long it took.
struct PreloadStats {
    uint64_t experts = 0;
    uint64_t bytes = 0;
    double seconds = 0;
    nlohmann::json to_json() const;
};

class TieredExpertStore final : public ExpertProvider {
public:
    // Throws bg::Error, naming what would fit, when the budgets cannot hold the pools.
    TieredExpertStore(const MoeModel& m, Backend& backend, io::Reader& reader, const ResidencyPlan& plan,
                      const StoreConfig& cfg);
    ~TieredExpertStore() override;

    // Speculates (see above) when prefetch and speculation are on and n_slots is at least
    // kSpeculativeSlotsPerCandidate per resident expert of the layer.
    void prepare_layer(int64_t layer, int64_t n_slots) override;
    bool speculates(int64_t n_slots) const override {
        return cfg_.prefetch && cfg_.speculative && n_slots >= kSpeculativeSlotsPerCandidate * S_;
    }
    // The streamer spins rather than sleeps until then or until begin_layer, whichever is first
    // (a decode layer's copies start as its routing lands).
    void expect_layer(int64_t us) override;
    int64_t begin_layer(int64_t layer, const int32_t* experts, const int32_t* tokens, int64_t n, bool host_compute) override;
    int32_t next_ready(ExpertView* view) override;
    // Device-side experts first (the GPU starts on them while the CPU takes its own).
    int64_t next_ready_batch(int32_t* experts, ExpertView* views, int64_t max) override;
    int64_t ready_batch_now(int32_t* experts, ExpertView* views, int64_t max) override;
    // A host_compute layer's first copies are the caller's to queue: the streamer queueing them
    // beside the compute thread's launches made its first copy call take 8.3 us, and the copy
    // start 25.8 us after the routing landed, in afea788's H100 trace (the CUDA runtime's calls
    // from two threads contend). The streamer still waits for them and queues the rest.
    void start_copies() override;
    void release(int32_t expert) override;
    void release_computed(int32_t expert, double cpu_ms) override;
    void end_layer() override;
    // A returned expert's transient slot comes back only with its release; the streamer needs
    // one free to move the next expert in, so a caller may hold this many without a stall.
    int64_t max_unreleased() const override { return T_ - 1; }
    // Four picks per candidate: with uniform routing a candidate goes unused with probability
    // about e^-4 (2 %); decode (k slots) never speculates.
    static constexpr int64_t kSpeculativeSlotsPerCandidate = 4;

    // Pass boundaries: a new pass resets the per-pass read counts and usage; evict_all empties
    // every slot (a cold pass); promote moves, per layer, the H most-used resident experts of the
    // pass just ended into the hot slots (ties by expert id), the others to host slots.
    void begin_pass();
    void evict_all();
    void promote();
    // Fills every resident slot (host and hot) whose expert is not in it yet from the file, before
    // a pass, so that no pass waits for the disk for a resident expert (`--preload`, issue 24).
    // Up to kPreloadWindow experts' reads are in flight at once (the reader splits them into its
    // queue of pieces), straight into host slots; hot-slot experts on a GPU go through the
    // staging slots and a copy. progress(done_bytes, total_bytes) after each expert. Throws
    // bg::Error on a read error (reads still in flight land before the store goes).
    PreloadStats preload(const std::function<void(uint64_t, uint64_t)>& progress = {});
    static constexpr int kPreloadWindow = 16;

    // Where host-resident experts of a host_compute layer are computed, and the rates a hybrid
    // split is balanced by (gpu until set). The rates start as measured at start-up and follow
    // what the run measures (kRateWeight of each new figure): the CPU time of each expert it
    // computed for one token (release_computed's figure) and the copy-engine time of each
    // batch of copies per expert. Both paths read the same host memory, so each slows the other
    // in a way no start-up measurement of one path alone sees.
    void set_host_compute(DecodeExperts mode, const std::vector<HostPathRates>& rates_by_layer);
    DecodeExperts host_compute_mode() const { return host_mode_; }
    std::vector<HostPathRates> host_path_rates() const;
    // The rates set_host_compute was given (empty if it never was).
    std::vector<HostPathRates> host_path_rates_at_start() const;
    static constexpr double kRateWeight = 0.25;
    // For the start-up measurement of those rates: reads experts 0, 1, ... of the layer from the
    // file into up to kProbeExperts staging slots (more bytes than a CPU cache holds, so each
    // is read from memory when computed in turn) and times the copy of each into a transient
    // slot (the median); the views of both stay valid until the next layer begins. Only between
    // layers.
    static constexpr int kProbeExperts = 8;
    struct HostPathProbe {
        std::vector<ExpertView> host;  // one per expert read
        ExpertView device;             // the first one's copy
        double copy_ms = 0;
        // The copy of the part a split would copy at about half the rows (the median), and the
        // share of the hidden rows it is for; 0 where the layer's experts cannot be split.
        double copy_part_ms = 0, part_rows_share = 0;
    };
    HostPathProbe probe_host_path(int64_t layer);

    StoreCounters counters() const;
    // The intervals of this pass (since begin_pass) with at least one expert read in flight.
    const Timeline& disk_timeline() const { return disk_timeline_; }
    // The intervals of this pass with at least one host-to-device expert copy pending.
    const Timeline& copy_timeline() const { return copy_timeline_; }
    // Host bytes of both timelines (fixed at construction; counted in the host budget).
    uint64_t timeline_bytes() const { return disk_timeline_.bytes() + copy_timeline_.bytes(); }
    // Slot sizes (runtime/expert_slots.h): each layer's resident slots hold its own experts, the
    // shared transient, staging and LRU slots the largest; `betelgeuse plan` sizes the pools with
    // the same ExpertSlots. The device pool holds the hot slots and the transient area, the host
    // pool the other resident slots, the staging slots and the LRU.
    const ExpertSlots& slot_sizes() const { return pool_->sizes(); }
    uint64_t slot_bytes() const { return pool_->sizes().largest; }  // a shared slot
    uint64_t device_bytes() const { return pool_->device_bytes(); }
    uint64_t host_bytes() const { return pool_->host_bytes(); }
    // Which experts of a layer sit in hot slots now (ascending ids).
    std::vector<int32_t> hot_experts(int64_t layer) const;
    // Checks every loaded slot against the file (debug: every consumed byte was delivered).
    // Returns the number of slots checked; throws bg::Error on a mismatch.
    uint64_t verify_slots() const;

private:
    enum class Stage : uint8_t { kPending, kReading, kInHost, kCopying, kReady, kDelivered, kDone };
    enum class Source : uint8_t { kVram, kHost, kDisk };
    struct Item {
        int32_t expert = -1;
        int32_t tokens = 0;         // tokens it serves in this layer's unit of work
        Source source = Source::kDisk;
        Stage stage = Stage::kPending;
        bool to_hot = false;        // a hot-home expert read from disk: staging -> hot slot
        bool unused = false;        // copied on prepare_layer's hint, and routing did not name it: never delivered
        bool on_cpu = false;        // computed by the caller's CPU from host_src (no copy)
        bool cpu_probe = false;     // on_cpu only because the CPU had none for kCpuProbeEveryLayers layers
        // Part of a split expert: its hidden rows [part_first, part_first + part_rows) alone
        // (part_rows 0: the whole expert).
        int64_t part_first = 0, part_rows = 0;
        int32_t staging = -1, transient = -1;
        uint64_t ticket = 0;                // its copy's (kCopying), in copy order
        DeviceEvent copy_event;             // passes when that copy lands (read only while kCopying)
        const uint8_t* host_src = nullptr;  // host slot or staging holding the bytes
        const uint8_t* compute = nullptr;   // device memory compute reads
        io::ReadOp ops[3];
        int reads_left = 0;
    };
    // next_ready_batch (wait) and ready_batch_now (not).
    int64_t hand_out(int32_t* experts, ExpertView* views, int64_t max, bool wait);

    void streamer();
    // The streamer's wait for pred() (under lk): spinning on events_ without the lock while
    // expect_layer's deadline is ahead, on cv_work_ after it.
    template <class Pred>
    void wait_for_work(std::unique_lock<std::mutex>& lk, Pred pred);
    bool start_reads_locked();
    // A batch of copies moves in two steps: queue_copies (the streamer, or the compute thread
    // through start_copies) queues it, land_copies (the streamer) waits for each copy and hands
    // its expert over. One batch at a time (batch_).
    bool queue_copies(std::unique_lock<std::mutex>& lk);
    void land_copies(std::unique_lock<std::mutex>& lk);
    // The first batch begin_layer left to the caller (caller_copies_), queued on this thread.
    void queue_caller_copies(std::unique_lock<std::mutex>& lk);
    void complete_read(io::ReadOp* op);
    void finish_unused_locked(Item& it);
    // release, and with cpu_ms >= 0 (an on_cpu item) the layer's CPU rate learnt from it.
    void release_item(int32_t expert, double cpu_ms);
    void read_expert_blocking(int64_t layer, int32_t e, uint8_t* dst) const;
    // The views of an item's expert (or its part) in the slot at base.
    void views_of(const Item& it, const uint8_t* base, ExpertView* v) const;
    // Queues the copy of hidden rows [first, n_ff) of a layer's expert from the slot at src to the
    // slot at dst: the whole slot as one copy where first is 0, else those rows of gate and up and
    // those columns of down (a 2D copy) or all of down (StoreConfig::split_copy), at the places a
    // whole copy puts them: one copy, or up to three. Returns the last ticket; *bytes gets the
    // bytes copied.
    uint64_t queue_expert_copy(int64_t layer, uint8_t* dst, const uint8_t* src, int64_t first, uint64_t* bytes);
    // The bytes of hidden rows [first, first + n) of a layer's expert.
    uint64_t part_bytes(int64_t layer, int64_t first, int64_t n) const;
    // A layer's expert matrices as they lie in a slot: views of the slot at layout_base() (any
    // slot holds any layer's expert; this one is only looked at), so data - layout_base() is each
    // matrix's offset in any slot. And how they may be split (split_step_rows of down's type).
    ExpertMats slot_layout(int64_t layer) const;
    const uint8_t* layout_base() const { return pool_->transient(0); }
    SplitRows split_rows_of(int64_t layer) const;

    const MoeModel& m_;
    Backend& backend_;
    io::Reader& reader_;
    const ResidencyPlan& plan_;
    StoreConfig cfg_;
    int64_t L_ = 0, S_ = 0, H_ = 0, T_ = 0;
    std::unique_ptr<ExpertSlotPool> pool_;  // the memory (allocated once, budgets checked)
    std::unique_ptr<ExpertHomes> homes_;     // where each expert lives: tiers, slots, LRU, promotion
    std::vector<Item> items_;                          // [n_expert + 1], the current layer's work (+1: a CPU part)
    std::vector<int32_t> item_of_;                     // [n_expert] -> index in items_
    std::vector<io::ReadOp*> done_ops_;                // [3 * n_expert] poll output
    struct QueuedCopy {
        int64_t item = -1;
        uint8_t* dst = nullptr;
        const uint8_t* src = nullptr;
        int64_t first_row = 0;  // hidden rows [first_row, n_ff) (0: the whole expert)
        uint64_t bytes = 0, ticket = 0;
    };
    std::vector<QueuedCopy> copy_batch_;               // [<= Backend::kMaxQueuedCopies]
    enum class Batch : uint8_t { kNone, kQueueing, kQueued };  // copy_batch_'s state
    Batch batch_ = Batch::kNone;
    bool caller_copies_ = false;  // begin_layer left the first batch to start_copies
    // When the batch began to be queued (steady clock, and now_ms), and the copy engine's busy time then.
    std::chrono::steady_clock::time_point batch_t0_{};
    double batch_t0_ms_ = 0, batch_engine_ms0_ = 0;

    mutable std::mutex mu_;
    std::condition_variable cv_work_, cv_ready_;
    std::thread thread_;
    bool stop_ = false, active_ = false;
    bool prepared_ = false;  // prepare_layer's items are moving; begin_layer not called yet
    int64_t layer_ = -1, n_items_ = 0, delivered_ = 0, done_ = 0, requested_ = 0;
    int64_t n_deliver_ = 0;  // items next_ready hands out (n_items_ less the unused speculative ones)
    int64_t reads_in_flight_ = 0;
    // Copies of this layer queued and not yet seen landed by the streamer: the layer may end only
    // at 0, its items handed out in flight (and released) before their copies landed included.
    int64_t copies_landing_ = 0;
    // Bumped (under mu_) by every compute-thread event the streamer may wait for (a layer begun
    // or ended, a release, a request): a counter, not done_, so a layer boundary cannot hide a
    // wake-up. Atomic: the streamer spins on it without the lock while awake_until_ns_ is ahead.
    std::atomic<uint64_t> events_{0};
    std::atomic<int64_t> awake_until_ns_{0};  // expect_layer's deadline (cpu::now_ns clock)
    double disk_busy_since_ms_ = 0;    // now_ms() when the first read of a busy interval went out
    Timeline disk_timeline_{timeline_capacity(m_.moe_shape().n_layer, m_.moe_shape().n_expert)};  // this pass's disk-busy intervals
    Timeline copy_timeline_{timeline_capacity(m_.moe_shape().n_layer, m_.moe_shape().n_expert)};  // this pass's copy batches
    DecodeExperts host_mode_ = DecodeExperts::kGpu;
    std::vector<HostPathRates> rates_;           // [layer], refined as the run goes
    std::vector<HostPathRates> rates_at_start_;  // [layer], as set_host_compute gave them
    std::vector<int64_t> cpu_idle_layers_;       // [layer] decode layers in a row the split gave the CPU none
    std::vector<int32_t> split_items_, split_tokens_, split_order_;  // [n_expert] begin_layer's host split
    std::vector<uint8_t> split_on_cpu_;                              // [n_expert]
    std::vector<SplitRows> split_rows_;  // [layer] how its experts may be split (set_host_compute)
    int64_t cpu_part_item_ = -1;         // the current layer's CPU part of a split expert, or -1
    StoreCounters c_;
    std::string error_;  // an I/O error seen by the streamer, rethrown to the compute thread
};

}  // namespace bg
