#include "runtime/expert_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include <nlohmann/json.hpp>

#include "cpu/spin_wait.h"
#include "util/check.h"

namespace bg {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

nlohmann::json StoreConfig::to_json() const {
    return {{"transient_slots", transient_slots},      {"prefetch", prefetch},
            {"speculative", speculative},
            {"lru_slots", lru_slots},
            {"vram_budget_bytes", vram_budget_bytes},  {"host_budget_bytes", host_budget_bytes},
            {"device_fixed_bytes", device_fixed_bytes}, {"host_fixed_bytes", host_fixed_bytes},
            {"split_experts", split_experts}, {"split_copy", enum_name(split_copy)}};
}

StoreCounters StoreCounters::operator-(const StoreCounters& o) const {
    StoreCounters d = *this;
    d.vram_hits -= o.vram_hits;
    d.host_hits -= o.host_hits;
    d.disk_fetches -= o.disk_fetches;
    d.vram_hit_bytes -= o.vram_hit_bytes;
    d.host_hit_bytes -= o.host_hit_bytes;
    d.disk_bytes -= o.disk_bytes;
    d.consumed_bytes -= o.consumed_bytes;
    d.copied_experts -= o.copied_experts;
    d.pcie_bytes -= o.pcie_bytes;
    d.pcie_ms -= o.pcie_ms;
    d.pcie_wall_ms -= o.pcie_wall_ms;
    d.disk_read_bytes -= o.disk_read_bytes;
    d.disk_busy_ms -= o.disk_busy_ms;
    d.disk_wait_ms -= o.disk_wait_ms;
    d.copy_wait_ms -= o.copy_wait_ms;
    d.promotions -= o.promotions;
    d.promotion_bytes -= o.promotion_bytes;
    d.speculative_copies -= o.speculative_copies;
    d.speculative_unused -= o.speculative_unused;
    d.pool_allocations -= o.pool_allocations;
    d.cpu_experts -= o.cpu_experts;
    d.cpu_probes -= o.cpu_probes;
    d.cpu_bytes -= o.cpu_bytes;
    d.split_experts -= o.split_experts;
    return d;  // max_reads_one_expert_pass is per pass already
}

nlohmann::json StoreCounters::to_json() const {
    return {{"vram_hits", vram_hits},
            {"host_hits", host_hits},
            {"disk_fetches", disk_fetches},
            {"vram_hit_bytes", vram_hit_bytes},
            {"host_hit_bytes", host_hit_bytes},
            {"disk_bytes", disk_bytes},
            {"consumed_bytes", consumed_bytes},
            {"disk_read_pct", consumed_bytes ? 100.0 * disk_bytes / consumed_bytes : 0.0},
            {"copied_experts", copied_experts},
            {"pcie_bytes", pcie_bytes},
            {"pcie_ms", pcie_ms},
            {"pcie_wall_ms", pcie_wall_ms},
            {"pcie_gb_s", pcie_ms > 0 ? pcie_bytes / (pcie_ms * 1e6) : 0.0},
            {"disk_read_bytes", disk_read_bytes},
            {"disk_busy_ms", disk_busy_ms},
            {"disk_gb_s", disk_busy_ms > 0 ? disk_read_bytes / (disk_busy_ms * 1e6) : 0.0},
            {"disk_wait_ms", disk_wait_ms},
            {"copy_wait_ms", copy_wait_ms},
            {"promotions", promotions},
            {"promotion_bytes", promotion_bytes},
            {"speculative_copies", speculative_copies},
            {"speculative_unused", speculative_unused},
            {"cpu_experts", cpu_experts},
            {"cpu_probes", cpu_probes},
            {"cpu_bytes", cpu_bytes},
            {"split_experts", split_experts},
            {"max_reads_one_expert_pass", max_reads_one_expert_pass}};
}

TieredExpertStore::TieredExpertStore(const MoeModel& m, Backend& backend, io::Reader& reader,
                                     const ResidencyPlan& plan, const StoreConfig& cfg)
    : m_(m), backend_(backend), reader_(reader), plan_(plan), cfg_(cfg) {
    const MoeShape& shape = m.moe_shape();
    L_ = shape.n_layer;
    S_ = plan.slots;
    H_ = plan.hot;
    T_ = cfg.transient_slots;
    if (plan.n_layer() != L_) fail("store: the residency plan has %lld layers, the model %lld", (long long)plan.n_layer(), (long long)L_);
    std::vector<uint64_t> each(static_cast<size_t>(L_));
    for (int64_t l = 0; l < L_; ++l) each[static_cast<size_t>(l)] = m.expert_bytes_each(l);
    SlotPoolConfig pc;
    pc.n_layer = L_;
    pc.slots = S_;
    pc.hot = H_;
    pc.transient_slots = T_;
    pc.lru_slots = cfg.lru_slots;
    pc.vram_budget_bytes = cfg.vram_budget_bytes;
    pc.host_budget_bytes = cfg.host_budget_bytes;
    pc.device_fixed_bytes = cfg.device_fixed_bytes;
    // The store's own fixed part (its disk and copy timelines) counts with the rest of the fixed
    // host memory.
    pc.host_fixed_bytes = cfg.host_fixed_bytes + timeline_bytes();
    pool_ = std::make_unique<ExpertSlotPool>(backend, ExpertSlots::of(each), pc);
    c_.pool_allocations = 2;
    const int64_t ne = shape.n_expert;
    homes_ = std::make_unique<ExpertHomes>(plan, ne, cfg.lru_slots);
    items_.resize(ne + 1);  // + a split expert's CPU part
    item_of_.assign(ne, -1);
    for (auto* v : {&split_items_, &split_tokens_, &split_order_}) v->assign(ne, 0);
    split_on_cpu_.assign(ne, 0);
    done_ops_.assign(3 * ne, nullptr);
    copy_batch_.reserve(Backend::kMaxQueuedCopies);
    thread_ = std::thread([this] {
        backend_.bind_thread();  // the backend's device context (an SM-limited one with --sm-limit)
        streamer();
    });
}

TieredExpertStore::~TieredExpertStore() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
        ++events_;  // a spinning streamer looks at events_ only
    }
    cv_work_.notify_all();
    thread_.join();
    // Reads still in flight (after an error) must land before the buffers go.
    while (reader_.pending() > 0) reader_.poll(done_ops_.data(), done_ops_.size(), true);
}

void TieredExpertStore::begin_pass() {
    std::lock_guard<std::mutex> g(mu_);
    homes_->begin_pass();
    c_.max_reads_one_expert_pass = 0;
    disk_timeline_.clear();
    copy_timeline_.clear();
}

void TieredExpertStore::evict_all() {
    std::lock_guard<std::mutex> g(mu_);
    BG_CHECK(!active_);
    homes_->evict_all();
}

void TieredExpertStore::prepare_layer(int64_t layer, int64_t n_slots) {
    if (!speculates(n_slots)) return;
    std::unique_lock<std::mutex> lk(mu_);
    BG_CHECK(!active_ && !prepared_);
    int64_t n = 0;
    for (int32_t e : homes_->host_owners(layer)) {
        if (e < 0 || !homes_->at(layer, e).loaded) continue;  // a cold slot: its disk read waits for routing
        Item& it = items_[n];
        it = Item{};
        it.expert = e;
        it.source = Source::kHost;
        it.stage = Stage::kInHost;
        it.host_src = pool_->slot_of(layer, homes_->at(layer, e));
        item_of_[e] = static_cast<int32_t>(n++);
    }
    if (n == 0) return;
    layer_ = layer;
    n_items_ = n;
    n_deliver_ = 0;  // nothing is handed out before begin_layer names what routing used
    delivered_ = done_ = requested_ = 0;
    c_.speculative_copies += static_cast<uint64_t>(n);
    prepared_ = active_ = true;
    ++events_;
    lk.unlock();
    cv_work_.notify_all();
}

// An unused speculative item whose copy is no longer in flight: its transient slot goes back.
// Caller holds mu_.
void TieredExpertStore::finish_unused_locked(Item& it) {
    BG_CHECK(it.unused && it.stage != Stage::kCopying);
    if (it.transient >= 0) pool_->give_transient(it.transient);
    it.transient = -1;
    it.stage = Stage::kDone;
    ++done_;
    ++events_;
    cv_ready_.notify_all();  // end_layer may be waiting for it
}

int64_t TieredExpertStore::begin_layer(int64_t layer, const int32_t* experts, const int32_t* tokens, int64_t n,
                                       bool host_compute) {
    std::unique_lock<std::mutex> lk(mu_);
    const bool prepared = prepared_;
    BG_CHECK(prepared ? layer_ == layer : !active_);
    // Items prepare_layer started stay where they are (a copy batch may name them); the
    // experts routing uses beyond them follow.
    const int64_t n_spec = prepared ? n_items_ : 0;
    BG_CHECK(n < static_cast<int64_t>(items_.size()));
    for (int64_t j = 0; j < n_spec; ++j) items_[j].unused = true;
    cpu_part_item_ = -1;
    layer_ = layer;
    if (!prepared) n_items_ = done_ = 0;
    delivered_ = requested_ = 0;
    n_deliver_ = n;
    const uint64_t stamp = homes_->begin_lru_layer(layer, experts, n);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t e = experts[i];
        const uint64_t bytes = m_.expert_bytes_each(layer);
        c_.consumed_bytes += bytes;
        Home& h = homes_->at(layer, e);
        homes_->add_usage(layer, e, tokens[i]);
        const int32_t j = item_of_[e];
        if (j >= 0 && j < n_spec && items_[j].expert == e) {
            items_[j].unused = false;  // copied (or copying) already: a host hit
            ++c_.host_hits;
            c_.host_hit_bytes += bytes;
            continue;
        }
        BG_CHECK(n_items_ < static_cast<int64_t>(items_.size()));  // distinct experts, one item each
        Item& it = items_[n_items_];
        it = Item{};
        it.expert = e;
        it.tokens = tokens[i];
        item_of_[e] = static_cast<int32_t>(n_items_++);
        // Not resident: the least recently used LRU slot this layer is not using, if any.
        if (h.tier == Tier::kNone) homes_->take_lru(layer, e, stamp);
        if (h.tier == Tier::kHot && h.loaded) {
            it.source = Source::kVram;
            it.stage = Stage::kReady;
            it.compute = pool_->slot_of(layer, h);
            ++c_.vram_hits;
            c_.vram_hit_bytes += bytes;
        } else if (h.host_slot() && h.loaded) {
            it.source = Source::kHost;
            it.stage = Stage::kInHost;
            it.host_src = pool_->slot_of(layer, h);
            ++c_.host_hits;
            c_.host_hit_bytes += bytes;
        } else {
            it.source = Source::kDisk;
            it.stage = Stage::kPending;
            it.to_hot = h.tier == Tier::kHot;
            ++c_.disk_fetches;
            c_.disk_bytes += bytes;
        }
    }
    if (host_compute && host_mode_ != DecodeExperts::kGpu) {
        // Of the experts in host memory now (not those prepare_layer started copying), the
        // split's share stays where it is, for the CPU.
        int64_t n_host = 0;
        for (int64_t j = n_spec; j < n_items_; ++j) {
            const Item& it = items_[j];
            if (it.source != Source::kHost || it.stage != Stage::kInHost) continue;
            split_items_[n_host] = static_cast<int32_t>(j);
            split_tokens_[n_host++] = it.tokens;
        }
        int64_t& idle = cpu_idle_layers_[static_cast<size_t>(layer)];
        const bool probe = host_mode_ == DecodeExperts::kHybrid && n_host > 0 && idle + 1 >= kCpuProbeEveryLayers;
        bool probed = false;
        const SplitRows rows = cfg_.split_experts ? split_rows_[static_cast<size_t>(layer)] : SplitRows{};
        const HostSplit hs = split_host_experts(host_mode_, rates_[layer], split_tokens_.data(), n_host,
                                                split_on_cpu_.data(), split_order_.data(), probe, &probed, rows);
        const int64_t by_rates = probed ? 0 : hs.on_cpu + (hs.split >= 0 ? 1 : 0);
        if (n_host > 0) idle = by_rates > 0 || probe ? 0 : idle + 1;
        if (hs.split >= 0) {
            // The split expert's item is copied, its rows from cpu_rows on; its first rows go to
            // the CPU as an item of their own, handed out at once with the CPU's others.
            Item& dev = items_[split_items_[hs.split]];
            dev.part_first = hs.cpu_rows;
            dev.part_rows = rows.n_ff - hs.cpu_rows;
            BG_CHECK(n_items_ < static_cast<int64_t>(items_.size()));
            cpu_part_item_ = n_items_++;
            Item& cpu = items_[cpu_part_item_];
            cpu = Item{};
            cpu.expert = dev.expert;
            cpu.tokens = dev.tokens;
            cpu.source = Source::kHost;
            cpu.stage = Stage::kReady;
            cpu.on_cpu = true;
            cpu.host_src = dev.host_src;
            cpu.part_rows = hs.cpu_rows;
            ++n_deliver_;
            ++c_.split_experts;
            c_.cpu_bytes += part_bytes(layer, 0, hs.cpu_rows);
        }
        for (int64_t i = 0; i < n_host; ++i) {
            if (!split_on_cpu_[i]) continue;
            Item& it = items_[split_items_[i]];
            it.on_cpu = true;
            it.cpu_probe = by_rates == 0;
            c_.cpu_probes += by_rates == 0 ? 1 : 0;
            it.stage = Stage::kReady;
            ++c_.cpu_experts;
            c_.cpu_bytes += m_.expert_bytes_each(layer);
        }
    }
    for (int64_t j = 0; j < n_spec; ++j) {
        Item& it = items_[j];
        if (!it.unused) continue;
        ++c_.speculative_unused;
        if (it.stage != Stage::kCopying) finish_unused_locked(it);  // else when its copy lands
    }
    prepared_ = false;
    active_ = true;
    // A decode layer's first copies: the caller's (start_copies), where the streamer queues them.
    caller_copies_ = host_compute && cfg_.prefetch;
    ++events_;
    awake_until_ns_.store(0, std::memory_order_relaxed);  // expect_layer's spin ends with the wait it covered
    const int64_t hand_outs = n_deliver_;
    lk.unlock();
    cv_work_.notify_all();
    return hand_outs;
}

int32_t TieredExpertStore::next_ready(ExpertView* view) {
    int32_t expert = -1;
    next_ready_batch(&expert, view, 1);
    return expert;
}

int64_t TieredExpertStore::next_ready_batch(int32_t* experts, ExpertView* views, int64_t max) {
    return hand_out(experts, views, max, true);
}

int64_t TieredExpertStore::ready_batch_now(int32_t* experts, ExpertView* views, int64_t max) {
    return hand_out(experts, views, max, false);
}

int64_t TieredExpertStore::hand_out(int32_t* experts, ExpertView* views, int64_t max, bool wait) {
    std::unique_lock<std::mutex> lk(mu_);
    BG_CHECK(active_ && !prepared_ && delivered_ < n_deliver_ && max >= 1);
    // Without prefetch experts are handed out strictly in order, each loaded on demand: only a
    // caller that waits asks for the next.
    if (!wait && !cfg_.prefetch) return 0;
    if (wait) queue_caller_copies(lk);  // the caller did not call start_copies: its wait queues them
    if (!cfg_.prefetch) {
        requested_ = delivered_ + 1;
        ++events_;
        cv_work_.notify_all();
    }
    auto find_ready = [&]() -> int64_t {
        // Without prefetch experts are handed out strictly in order, each loaded on demand.
        if (!cfg_.prefetch) return items_[delivered_].stage == Stage::kReady ? delivered_ : -1;
        // Device-side experts first: the GPU runs them while the CPU works through its own.
        int64_t on_cpu = -1;
        for (int64_t i = 0; i < n_items_; ++i)
            if (items_[i].stage == Stage::kReady && !items_[i].unused) {
                if (!items_[i].on_cpu) return i;
                if (on_cpu < 0) on_cpu = i;
            }
        return on_cpu;
    };
    // With nothing present: the expert whose copy was queued first of those with an event.
    auto find_landing = [&]() -> int64_t {
        int64_t first = -1;
        if (!cfg_.prefetch) return first;
        for (int64_t i = 0; i < n_items_; ++i) {
            const Item& it = items_[i];
            if (it.stage == Stage::kCopying && it.copy_event && !it.unused && (first < 0 || it.ticket < items_[first].ticket))
                first = i;
        }
        return first;
    };
    auto find = [&]() -> int64_t {
        const int64_t i = find_ready();
        return i >= 0 ? i : find_landing();
    };
    // Not waiting: only what is present (an expert on its way goes out alone, to a caller that waits).
    int64_t i = wait ? find() : find_ready();
    if (!wait && (i < 0 || !error_.empty())) return 0;
    if (i < 0 && error_.empty()) {
        // Blocked: on disk if any expert still to come is not in memory yet, else on copies.
        bool on_disk = false;
        for (int64_t j = 0; j < n_items_; ++j)
            if (items_[j].stage == Stage::kPending || items_[j].stage == Stage::kReading) on_disk = true;
        const auto t0 = Clock::now();
        cv_ready_.wait(lk, [&] { return (i = find()) >= 0 || !error_.empty(); });
        (on_disk ? c_.disk_wait_ms : c_.copy_wait_ms) += ms_between(t0, Clock::now());
    }
    if (!error_.empty()) throw Error(error_);
    int64_t n = 0;
    // Without prefetch, one (in order); with it, every ready one, device-side first, or one on
    // its way alone (its compute waits for it on the device, and nothing else should).
    const bool landing = items_[i].stage == Stage::kCopying;
    for (; i >= 0 && n < max; i = cfg_.prefetch && !landing ? find_ready() : -1) {
        Item& it = items_[i];
        it.stage = Stage::kDelivered;
        ++delivered_;
        views_of(it, it.on_cpu ? it.host_src : it.compute, &views[n]);
        views[n].ready = landing ? it.copy_event : DeviceEvent{};
        experts[n++] = it.expert;
    }
    return n;
}

void TieredExpertStore::release(int32_t expert) { release_item(expert, -1); }

void TieredExpertStore::release_computed(int32_t expert, double cpu_ms) {
    BG_CHECK(cpu_ms >= 0);
    release_item(expert, cpu_ms);
}

void TieredExpertStore::release_item(int32_t expert, double cpu_ms) {
    {
        std::lock_guard<std::mutex> g(mu_);
        // A split expert's CPU part is released with its CPU time, the copied part without.
        const bool cpu_part = cpu_ms >= 0 && cpu_part_item_ >= 0 && items_[cpu_part_item_].expert == expert;
        Item& it = items_[cpu_part ? cpu_part_item_ : item_of_[expert]];
        BG_CHECK(it.stage == Stage::kDelivered && (cpu_ms < 0 || it.on_cpu));
        it.stage = Stage::kDone;
        if (cpu_ms >= 0 && it.tokens == 1) {
            // A part's time stands for its share of the rows.
            const double whole_ms =
                it.part_rows > 0 ? cpu_ms * static_cast<double>(split_rows_[static_cast<size_t>(layer_)].n_ff) /
                                       static_cast<double>(it.part_rows)
                                 : cpu_ms;
            // A probe's figure replaces the rate: the rate it corrects was never refined since.
            double& r = rates_[static_cast<size_t>(layer_)].cpu_ms_one;
            r = it.cpu_probe ? whole_ms : r + kRateWeight * (whole_ms - r);
        }
        if (it.transient >= 0) pool_->give_transient(it.transient);
        it.transient = -1;
        ++done_;
        ++events_;
    }
    cv_work_.notify_all();
}

void TieredExpertStore::end_layer() {
    {
        std::unique_lock<std::mutex> lk(mu_);
        BG_CHECK(active_ && !prepared_ && delivered_ == n_deliver_);
        // An unused speculative copy may still be landing; its slot must be back first.
        // And the streamer must have seen every copy land (an expert handed out in flight may be
        // released first): it still writes the layer's items until then.
        cv_ready_.wait(lk, [&] { return (done_ == n_items_ && copies_landing_ == 0) || !error_.empty(); });
        if (!error_.empty()) throw Error(error_);
        BG_CHECK(reads_in_flight_ == 0 && batch_ == Batch::kNone);
        caller_copies_ = false;  // a layer whose every expert was present: nothing was left to copy
        active_ = false;
        layer_ = -1;
        ++events_;
    }
    cv_work_.notify_all();
}

// Issues disk reads in item order while staging allows (host-home experts read straight into
// their slot). Caller holds mu_. Returns whether anything was issued.
bool TieredExpertStore::start_reads_locked() {
    bool any = false;
    const int64_t limit = cfg_.prefetch ? n_items_ : requested_;
    for (int64_t i = 0; i < limit; ++i) {
        Item& it = items_[i];
        if (it.stage != Stage::kPending) continue;
        const Home& h = homes_->at(layer_, it.expert);
        uint8_t* dst;
        if (h.host_slot()) {
            dst = pool_->slot_of(layer_, h);
        } else {
            if (pool_->free_staging() == 0) break;  // keep order: later experts wait for staging
            it.staging = pool_->take_staging();
            dst = pool_->staging(it.staging);
        }
        const ExpertRanges r = m_.expert_ranges(layer_, it.expert);
        const ByteRange parts[3] = {r.gate, r.up, r.down};
        uint64_t at = 0;
        for (int p = 0; p < 3; ++p) {
            io::ReadOp& op = it.ops[p];
            op = io::ReadOp{};
            op.file = parts[p].file;
            op.offset = parts[p].offset;
            op.bytes = parts[p].bytes;
            op.dst = dst + at;
            op.tag = static_cast<uint64_t>(i);
            at += parts[p].bytes;
        }
        it.host_src = dst;
        it.reads_left = 3;
        it.stage = Stage::kReading;
        const uint16_t reads = homes_->count_read(layer_, it.expert);
        c_.max_reads_one_expert_pass = std::max<uint64_t>(c_.max_reads_one_expert_pass, reads);
        if (reads_in_flight_ == 0) disk_busy_since_ms_ = now_ms();
        reads_in_flight_ += 3;
        for (int p = 0; p < 3; ++p) reader_.submit(&it.ops[p]);
        any = true;
    }
    return any;
}

void TieredExpertStore::complete_read(io::ReadOp* op) {
    Item& it = items_[op->tag];
    if (op->error != 0 && error_.empty())
        error_ = strf("store: disk read of layer %lld expert %d at offset %llu of %s failed: %s", (long long)layer_,
                      it.expert, static_cast<unsigned long long>(op->offset), reader_.path(op->file).c_str(),
                      std::strerror(op->error));
    if (--reads_in_flight_ == 0) {
        const double end_ms = now_ms();
        c_.disk_busy_ms += end_ms - disk_busy_since_ms_;
        disk_timeline_.add(disk_busy_since_ms_, end_ms);
    }
    if (--it.reads_left > 0) return;
    c_.disk_read_bytes = reader_.stats().bytes_read;
    if (!error_.empty()) return;
    Home& h = homes_->at(layer_, it.expert);
    if (h.host_slot()) h.loaded = true;
    it.stage = Stage::kInHost;
}

// Moves bytes toward device memory in item order: staging -> hot slot for hot-home experts,
// host -> transient slot for the others. A batch of copies is queued at once (back to back on
// the copy engine, no host round trip between them) and each expert is handed over as its copy
// lands. Copies are queued without the lock held; batch_ keeps the other thread off copy_batch_
// meanwhile.
bool TieredExpertStore::queue_copies(std::unique_lock<std::mutex>& lk) {
    if (batch_ != Batch::kNone) return false;
    const int64_t limit = cfg_.prefetch ? n_items_ : requested_;
    copy_batch_.clear();
    // An item takes one copy, or up to three as a split expert's copied part: its tickets all fit.
    int tickets = 0;
    for (int64_t i = 0; i < limit && tickets + 3 <= Backend::kMaxQueuedCopies; ++i) {
        Item& it = items_[i];
        if (it.stage != Stage::kInHost) continue;
        uint8_t* dst;
        if (it.to_hot) {
            dst = pool_->slot_of(layer_, homes_->at(layer_, it.expert));
        } else {
            if (pool_->free_transient() == 0) break;
            it.transient = pool_->take_transient();
            dst = pool_->transient(it.transient);
        }
        it.stage = Stage::kCopying;
        copy_batch_.push_back({i, dst, it.host_src, it.part_first, 0, 0});
        tickets += it.part_first > 0 ? 3 : 1;
    }
    if (copy_batch_.empty()) return false;
    batch_ = Batch::kQueueing;
    copies_landing_ += static_cast<int64_t>(copy_batch_.size());
    batch_t0_ = Clock::now();
    batch_t0_ms_ = now_ms();
    batch_engine_ms0_ = backend_.copy_busy_ms();
    lk.unlock();
    for (QueuedCopy& q : copy_batch_) q.ticket = queue_expert_copy(layer_, q.dst, q.src, q.first_row, &q.bytes);
    // Each may be handed out now, with the event its compute waits for on the device.
    lk.lock();
    bool any_event = false;
    for (const QueuedCopy& q : copy_batch_) {
        Item& it = items_[q.item];
        it.ticket = q.ticket;
        it.compute = q.dst;
        it.copy_event = backend_.copy_event(q.ticket);
        any_event = any_event || static_cast<bool>(it.copy_event);
    }
    batch_ = Batch::kQueued;
    ++events_;  // the streamer lands it (queued by the compute thread, it waits for this)
    if (any_event) cv_ready_.notify_all();
    cv_work_.notify_all();
    return true;
}

void TieredExpertStore::land_copies(std::unique_lock<std::mutex>& lk) {
    BG_CHECK(batch_ == Batch::kQueued);
    lk.unlock();
    for (const QueuedCopy& q : copy_batch_) {
        backend_.wait_copy(q.ticket);
        lk.lock();
        Item& it = items_[q.item];
        c_.pcie_bytes += q.bytes;
        if (q.first_row == 0) ++c_.copied_experts;
        if (it.staging >= 0) {
            pool_->give_staging(it.staging);
            it.staging = -1;
        }
        if (it.to_hot) homes_->at(layer_, it.expert).loaded = true;
        if (it.stage == Stage::kCopying) it.stage = Stage::kReady;  // else handed out (and maybe released) in flight
        if (it.unused) finish_unused_locked(it);
        // The last copy counts as landed with the batch's end below: end_layer, which waits for
        // none landing, then finds the batch done and its rate learnt for this layer.
        if (&q != &copy_batch_.back()) --copies_landing_;
        cv_ready_.notify_all();
        lk.unlock();
    }
    const double wall_ms = ms_between(batch_t0_, Clock::now());
    const double engine_ms = batch_engine_ms0_ >= 0 ? backend_.copy_busy_ms() - batch_engine_ms0_ : wall_ms;
    lk.lock();
    c_.pcie_wall_ms += wall_ms;
    c_.pcie_ms += engine_ms;
    if (host_mode_ == DecodeExperts::kHybrid && layer_ >= 0) {
        // What one whole expert's copy took in this batch (all of one layer's size; a split
        // expert's part counts as the share of one its start-up fit gives it).
        HostPathRates& r = rates_[static_cast<size_t>(layer_)];
        const double n_ff = static_cast<double>(split_rows_[static_cast<size_t>(layer_)].n_ff);
        double wholes = 0;
        for (const QueuedCopy& q : copy_batch_)
            wholes += q.first_row == 0 ? 1.0
                                       : r.part_copy_fixed + r.part_copy_slope * (n_ff - static_cast<double>(q.first_row)) / n_ff;
        r.copy_ms += kRateWeight * (engine_ms / wholes - r.copy_ms);
    }
    copy_timeline_.add(batch_t0_ms_, now_ms());  // one batch at a time: in order, disjoint
    batch_ = Batch::kNone;
    --copies_landing_;
    cv_ready_.notify_all();
}

void TieredExpertStore::queue_caller_copies(std::unique_lock<std::mutex>& lk) {
    if (!caller_copies_) return;
    caller_copies_ = false;
    if (!queue_copies(lk)) {
        ++events_;  // none to queue now: the streamer queues what comes later
        cv_work_.notify_all();
    }
}

void TieredExpertStore::start_copies() {
    std::unique_lock<std::mutex> lk(mu_);
    queue_caller_copies(lk);
}

void TieredExpertStore::expect_layer(int64_t us) {
    cpu::raise_deadline(awake_until_ns_, cpu::now_ns() + us * 1000);
    // A sleeping streamer wakes now (its wake-up then overlaps what the caller does before
    // begin_layer) and spins from there.
    std::lock_guard<std::mutex> g(mu_);
    ++events_;
    cv_work_.notify_all();
}

template <class Pred>
void TieredExpertStore::wait_for_work(std::unique_lock<std::mutex>& lk, Pred pred) {
    while (!pred()) {
        const uint64_t seen = events_.load(std::memory_order_relaxed);  // under lk
        const int64_t until = awake_until_ns_.load(std::memory_order_relaxed);
        if (cpu::now_ns() < until) {
            lk.unlock();
            cpu::spin_while_equal(events_, seen, until);  // begin_layer ends the spin with its event
            lk.lock();
            continue;
        }
        cv_work_.wait(lk, [&] { return pred() || events_.load(std::memory_order_relaxed) != seen; });
    }
}

void TieredExpertStore::streamer() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        // A batch the compute thread queued is landed even once every item is released (handed
        // out in flight): the layer ends only when it has.
        wait_for_work(lk, [&] {
            return stop_ || (active_ && error_.empty() && (done_ < n_items_ || batch_ == Batch::kQueued));
        });
        if (stop_) return;
        bool progress = start_reads_locked();
        if (!caller_copies_) progress |= queue_copies(lk);
        if (batch_ == Batch::kQueued) {
            land_copies(lk);
            progress = true;
        }
        if (reads_in_flight_ > 0) {
            // Reap completions; block only when nothing else can move.
            lk.unlock();
            const size_t n = reader_.poll(done_ops_.data(), done_ops_.size(), !progress);
            lk.lock();
            for (size_t j = 0; j < n; ++j) complete_read(done_ops_[j]);
            if (!error_.empty()) cv_ready_.notify_all();
            continue;
        }
        if (!progress) {
            // Waiting for the compute thread: a release (transient slot) or a request.
            const uint64_t seen = events_.load(std::memory_order_relaxed);
            wait_for_work(lk, [&] { return stop_ || events_.load(std::memory_order_relaxed) != seen; });
        }
    }
}

void TieredExpertStore::promote() {
    std::lock_guard<std::mutex> g(mu_);
    BG_CHECK(!active_);
    uint8_t* tmp = pool_->staging(0);  // idle now; a shared slot holds any layer's expert
    for (int64_t l = 0; l < L_; ++l) {
        const uint64_t bytes = m_.expert_bytes_each(l);
        for (const ExpertHomes::Swap& sw : homes_->promotion(l, plan_.resident[l])) {
            const Home& out = homes_->at(l, sw.leaving);  // hot -> host
            const Home& in = homes_->at(l, sw.entering);  // host -> hot
            uint8_t* dev = pool_->slot_of(l, out);
            uint8_t* hst = pool_->slot_of(l, in);
            // Swap the two slots' bytes through an idle staging slot.
            if (out.loaded) backend_.copy(tmp, dev, bytes, CopyKind::kDeviceToHost);
            if (in.loaded) backend_.copy(dev, hst, bytes, CopyKind::kHostToDevice);
            if (out.loaded) backend_.copy(hst, tmp, bytes, CopyKind::kHostToHost);
            c_.promotion_bytes += (out.loaded ? bytes : 0) + (in.loaded ? bytes : 0);
            c_.promotions += 2;
            homes_->apply(l, sw);
        }
    }
}

std::vector<int32_t> TieredExpertStore::hot_experts(int64_t layer) const {
    std::lock_guard<std::mutex> g(mu_);
    return homes_->hot_experts(layer);
}

nlohmann::json PreloadStats::to_json() const {
    return {{"experts", experts},
            {"bytes", bytes},
            {"seconds", seconds},
            {"gb_s", seconds > 0 ? bytes / seconds / 1e9 : 0.0}};
}

PreloadStats TieredExpertStore::preload(const std::function<void(uint64_t, uint64_t)>& progress) {
    std::lock_guard<std::mutex> g(mu_);
    BG_CHECK(!active_ && !prepared_ && reader_.pending() == 0);
    const auto t0 = Clock::now();
    struct Job {
        int64_t layer;
        int32_t expert;
    };
    std::vector<Job> jobs;
    uint64_t total = 0;
    for (int64_t l = 0; l < L_; ++l)
        for (int32_t e = 0; e < homes_->n_expert(); ++e) {
            const Home& h = homes_->at(l, e);
            if (h.resident() && !h.loaded) {
                jobs.push_back({l, e});
                total += m_.expert_bytes_each(l);
            }
        }
    const bool hot_in_host_memory = backend_.device_is_host_addressable();
    // One window slot an expert in flight: its three reads and, for a hot expert on a GPU, the
    // staging slot its bytes land in first.
    struct InFlight {
        size_t job = 0;
        int reads_left = 0;
        int32_t staging = -1;
        io::ReadOp ops[3];
    };
    std::vector<InFlight> window(kPreloadWindow);
    std::vector<int32_t> free_window;
    for (int i = kPreloadWindow - 1; i >= 0; --i) free_window.push_back(i);
    PreloadStats st;
    std::string error;  // the first read error: no new reads, the ones in flight land, then it is thrown
    size_t next = 0;
    while ((error.empty() && next < jobs.size()) || free_window.size() < window.size()) {
        while (error.empty() && next < jobs.size() && !free_window.empty()) {
            const Job& j = jobs[next];
            const Home& h = homes_->at(j.layer, j.expert);
            const bool staged = h.tier == Tier::kHot && !hot_in_host_memory;
            if (staged && pool_->free_staging() == 0) break;  // the next hot expert waits for a staging slot
            const int32_t w = free_window.back();
            free_window.pop_back();
            InFlight& f = window[w];
            f.job = next++;
            f.staging = -1;
            if (staged) f.staging = pool_->take_staging();
            uint8_t* dst = staged ? pool_->staging(f.staging) : pool_->slot_of(j.layer, h);
            const ExpertRanges r = m_.expert_ranges(j.layer, j.expert);
            const ByteRange parts[3] = {r.gate, r.up, r.down};
            f.reads_left = 3;
            for (int k = 0; k < 3; ++k) {
                f.ops[k] = io::ReadOp{};
                f.ops[k].file = parts[k].file;
                f.ops[k].offset = parts[k].offset;
                f.ops[k].bytes = parts[k].bytes;
                f.ops[k].dst = dst;
                f.ops[k].tag = static_cast<uint64_t>(w);
                dst += parts[k].bytes;
                reader_.submit(&f.ops[k]);
            }
        }
        const size_t n = reader_.poll(done_ops_.data(), done_ops_.size(), true);
        for (size_t i = 0; i < n; ++i) {
            const io::ReadOp* op = done_ops_[i];
            InFlight& f = window[op->tag];
            const Job& j = jobs[f.job];
            if (op->error != 0 && error.empty())
                error = strf("preload: reading layer %lld expert %d (%llu bytes at offset %llu of %s) failed: %s",
                             (long long)j.layer, j.expert, (unsigned long long)op->bytes,
                             (unsigned long long)op->offset, reader_.path(op->file).c_str(), std::strerror(op->error));
            if (--f.reads_left > 0) continue;
            free_window.push_back(static_cast<int32_t>(op->tag));
            if (f.staging >= 0) pool_->give_staging(f.staging);
            if (!error.empty()) continue;  // this expert's bytes may be incomplete: its slot stays empty
            Home& h = homes_->at(j.layer, j.expert);
            const uint64_t bytes = m_.expert_bytes_each(j.layer);
            if (f.staging >= 0)
                backend_.copy(pool_->slot_of(j.layer, h), pool_->staging(f.staging), bytes, CopyKind::kHostToDevice);
            h.loaded = true;
            st.bytes += bytes;
            ++st.experts;
            if (progress) progress(st.bytes, total);
        }
    }
    if (!error.empty()) fail("%s", error.c_str());
    st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return st;
}

void TieredExpertStore::set_host_compute(DecodeExperts mode, const std::vector<HostPathRates>& rates) {
    BG_CHECK(mode != DecodeExperts::kAuto && static_cast<int64_t>(rates.size()) == L_);
    std::lock_guard<std::mutex> g(mu_);
    BG_CHECK(!active_);
    host_mode_ = mode;
    rates_ = rates;
    rates_at_start_ = rates;
    cpu_idle_layers_.assign(static_cast<size_t>(L_), 0);
    split_rows_.assign(static_cast<size_t>(L_), SplitRows{});
    for (int64_t l = 0; l < L_; ++l) split_rows_[static_cast<size_t>(l)] = split_rows_of(l);
}

TieredExpertStore::HostPathProbe TieredExpertStore::probe_host_path(int64_t layer) {
    std::lock_guard<std::mutex> g(mu_);
    BG_CHECK(!active_ && !prepared_ && layer >= 0 && layer < L_);
    // Between layers every staging and transient slot is free.
    BG_CHECK(pool_->free_staging() == T_ && pool_->free_transient() == T_);
    const int64_t n = std::min<int64_t>({kProbeExperts, T_, m_.moe_shape().n_expert});
    const std::vector<int32_t>& staging = pool_->free_staging_list();
    uint8_t* device = pool_->transient(pool_->free_transient_list().front());
    const uint64_t bytes = m_.expert_bytes_each(layer);
    HostPathProbe p;
    std::vector<double> copy_ms, part_ms;
    // A split's copy at about half the rows: those from the middle step on.
    const SplitRows rows = split_rows_of(layer);
    const int64_t first = rows.step_rows > 0 ? rows.n_ff / rows.step_rows / 2 * rows.step_rows : 0;
    for (int64_t i = 0; i < n; ++i) {
        uint8_t* host = pool_->staging(staging[static_cast<size_t>(i)]);
        read_expert_blocking(layer, static_cast<int32_t>(i), host);
        const auto t0 = Clock::now();
        backend_.copy(device, host, bytes, CopyKind::kHostToDevice);
        copy_ms.push_back(ms_between(t0, Clock::now()));
        if (first > 0) {
            uint64_t part = 0;
            const auto t1 = Clock::now();
            backend_.wait_copy(queue_expert_copy(layer, device, host, first, &part));
            part_ms.push_back(ms_between(t1, Clock::now()));
        }
        ExpertView v;
        m_.expert_views(layer, host, &v.gate, &v.up, &v.down);
        v.on_host = true;
        p.host.push_back(v);
    }
    std::sort(copy_ms.begin(), copy_ms.end());
    p.copy_ms = copy_ms[copy_ms.size() / 2];
    if (!part_ms.empty()) {
        std::sort(part_ms.begin(), part_ms.end());
        p.copy_part_ms = part_ms[part_ms.size() / 2];
        p.part_rows_share = static_cast<double>(rows.n_ff - first) / static_cast<double>(rows.n_ff);
    }
    backend_.copy(device, pool_->staging(staging.front()), bytes, CopyKind::kHostToDevice);
    m_.expert_views(layer, device, &p.device.gate, &p.device.up, &p.device.down);
    return p;
}

std::vector<HostPathRates> TieredExpertStore::host_path_rates() const {
    std::lock_guard<std::mutex> g(mu_);
    return rates_;
}

std::vector<HostPathRates> TieredExpertStore::host_path_rates_at_start() const {
    std::lock_guard<std::mutex> g(mu_);
    return rates_at_start_;
}

StoreCounters TieredExpertStore::counters() const {
    std::lock_guard<std::mutex> g(mu_);
    return c_;
}

void TieredExpertStore::read_expert_blocking(int64_t layer, int32_t e, uint8_t* dst) const {
    const ExpertRanges r = m_.expert_ranges(layer, e);
    io::read_blocking(reader_, r.gate.file, dst, r.gate.bytes, r.gate.offset);
    io::read_blocking(reader_, r.up.file, dst + r.gate.bytes, r.up.bytes, r.up.offset);
    io::read_blocking(reader_, r.down.file, dst + r.gate.bytes + r.up.bytes, r.down.bytes, r.down.offset);
}

void TieredExpertStore::views_of(const Item& it, const uint8_t* base, ExpertView* v) const {
    *v = ExpertView{};
    ExpertMats e;
    m_.expert_views(layer_, base, &e.gate, &e.up, &e.down);
    if (it.part_rows > 0) e = e.hidden_rows(it.part_first, it.part_rows);
    v->gate = e.gate, v->up = e.up, v->down = e.down;
    v->on_host = it.on_cpu;
    v->part = it.part_rows > 0;
}

ExpertMats TieredExpertStore::slot_layout(int64_t layer) const {
    ExpertMats e;
    m_.expert_views(layer, layout_base(), &e.gate, &e.up, &e.down);
    return e;
}

SplitRows TieredExpertStore::split_rows_of(int64_t layer) const {
    const ExpertMats e = slot_layout(layer);
    return {e.gate.rows, split_step_rows(e.gate.rows, type_traits(e.down.type).block_elems)};
}

uint64_t TieredExpertStore::part_bytes(int64_t layer, int64_t first, int64_t n) const {
    const ExpertMats p = slot_layout(layer).hidden_rows(first, n);
    return static_cast<uint64_t>(n) * (p.gate.row_stride + p.up.row_stride) +
           static_cast<uint64_t>(p.down.rows) * row_bytes(p.down.type, n);
}

uint64_t TieredExpertStore::queue_expert_copy(int64_t layer, uint8_t* dst, const uint8_t* src, int64_t first,
                                              uint64_t* bytes) {
    const uint64_t each = m_.expert_bytes_each(layer);
    if (first == 0) {
        *bytes = each;
        return backend_.copy_async(dst, src, each, CopyKind::kHostToDevice);
    }
    // Gate's rows from `first` on; then up's rows from `first` on and, per StoreConfig::split_copy,
    // down's columns from `first` on (a 2D copy) or all of down (it follows up to the slot's end).
    const ExpertMats e = slot_layout(layer);
    const auto at = [&](const MatView& v, int64_t row) {
        return static_cast<uint64_t>(v.data - layout_base()) + static_cast<uint64_t>(row) * v.row_stride;
    };
    BG_CHECK(at(e.gate, e.gate.rows) <= at(e.up, 0) && at(e.up, e.up.rows) <= at(e.down, 0) && at(e.down, e.down.rows) <= each);
    const uint64_t gate0 = at(e.gate, first), gate1 = at(e.gate, e.gate.rows), up0 = at(e.up, first);
    backend_.copy_async(dst + gate0, src + gate0, gate1 - gate0, CopyKind::kHostToDevice);
    if (cfg_.split_copy == SplitCopy::kWholeDown) {
        *bytes = (gate1 - gate0) + (each - up0);
        return backend_.copy_async(dst + up0, src + up0, each - up0, CopyKind::kHostToDevice);
    }
    const uint64_t up1 = at(e.up, e.up.rows);
    backend_.copy_async(dst + up0, src + up0, up1 - up0, CopyKind::kHostToDevice);
    const MatView down = e.down.slice_cols(first, e.down.cols - first);
    const uint64_t down0 = static_cast<uint64_t>(down.data - layout_base()), width = row_bytes(down.type, down.cols);
    *bytes = (gate1 - gate0) + (up1 - up0) + width * static_cast<uint64_t>(down.rows);
    return backend_.copy_rows_async(dst + down0, down.row_stride, src + down0, down.row_stride, width,
                                    static_cast<uint64_t>(down.rows), CopyKind::kHostToDevice);
}

uint64_t TieredExpertStore::verify_slots() const {
    std::lock_guard<std::mutex> g(mu_);
    BG_CHECK(!active_);
    std::vector<uint8_t> want(pool_->sizes().largest), have(pool_->sizes().largest);
    uint64_t checked = 0;
    for (int64_t l = 0; l < L_; ++l)
        for (int32_t e = 0; e < homes_->n_expert(); ++e) {
            const Home& h = homes_->at(l, e);
            if (h.tier == Tier::kNone || !h.loaded) continue;
            read_expert_blocking(l, e, want.data());
            const uint8_t* slot = pool_->slot_of(l, h);
            if (h.tier == Tier::kHot && !backend_.device_is_host_addressable()) {
                backend_.copy(have.data(), slot, m_.expert_bytes_each(l), CopyKind::kDeviceToHost);
                slot = have.data();
            }
            if (std::memcmp(want.data(), slot, m_.expert_bytes_each(l)) != 0)
                fail("store: slot of layer %lld expert %d does not match the file", (long long)l, e);
            ++checked;
        }
    return checked;
}

}  // namespace bg
