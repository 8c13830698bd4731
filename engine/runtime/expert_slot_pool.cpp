#include "runtime/expert_slot_pool.h"

#include <algorithm>
#include <string>

#include "util/check.h"

namespace bg {

namespace {

std::string mib(uint64_t b) { return strf("%.1f MiB", b / 1048576.0); }

}  // namespace

ExpertSlotPool::ExpertSlotPool(Backend& backend, const ExpertSlots& slots, const SlotPoolConfig& cfg)
    : backend_(backend), sizes_(slots), T_(cfg.transient_slots) {
    const int64_t L = cfg.n_layer, S = cfg.slots, H = cfg.hot;
    BG_CHECK(sizes_.n_layer() == L);
    if (T_ < 1) fail("store: --transient-slots must be >= 1");
    if (cfg.lru_slots < 0) fail("store: --lru-slots must be >= 0");
    const uint64_t shared = sizes_.largest, every_layer = sizes_.layer_sum;
    const std::string layer_slot =
        sizes_.uniform() ? mib(shared)
                         : strf("%s-%s by layer", mib(*std::min_element(sizes_.layer.begin(), sizes_.layer.end())).c_str(),
                                mib(shared).c_str());

    // Budgets, checked before anything is allocated, with what would fit.
    device_bytes_ = sizes_.device_pool_bytes(H, T_);
    host_bytes_ = sizes_.host_pool_bytes(S, H, T_, cfg.lru_slots);
    const uint64_t dev_need = device_bytes_ + cfg.device_fixed_bytes;
    if (dev_need > cfg.vram_budget_bytes && cfg.vram_budget_bytes < cfg.device_fixed_bytes + shared) {
        // Not even one transient slot fits beside the fixed part: no --hot or --transient-slots helps.
        fail("store: VRAM budget %s cannot hold even the %s of Engram buffer, weights, caches and work buffers "
             "plus one transient slot of %s; it would need --vram-budget %llu at least (with --hot 0 "
             "--transient-slots 1)",
             mib(cfg.vram_budget_bytes).c_str(), mib(cfg.device_fixed_bytes).c_str(), mib(shared).c_str(),
             static_cast<unsigned long long>((cfg.device_fixed_bytes + shared + 1048575) / 1048576));
    }
    if (dev_need > cfg.vram_budget_bytes && cfg.vram_budget_bytes < cfg.device_fixed_bytes + T_ * shared) {
        // Below the fixed part and the transient area: fewer transient slots is the only way.
        const uint64_t fit_t = (cfg.vram_budget_bytes - cfg.device_fixed_bytes) / shared;
        fail("store: VRAM budget %s cannot hold %lld transient slots x %s + %s of Engram buffer, weights, caches "
             "and work buffers even with --hot 0; it would fit --hot 0 --transient-slots %llu",
             mib(cfg.vram_budget_bytes).c_str(), (long long)T_, mib(shared).c_str(),
             mib(cfg.device_fixed_bytes).c_str(), static_cast<unsigned long long>(fit_t));
    }
    if (dev_need > cfg.vram_budget_bytes) {
        const uint64_t room = cfg.vram_budget_bytes > cfg.device_fixed_bytes + T_ * shared
                                  ? cfg.vram_budget_bytes - cfg.device_fixed_bytes - T_ * shared : 0;
        fail("store: VRAM budget %s cannot hold %lld layers x %lld hot slots x %s + %lld transient slots + %s of "
             "Engram buffer, weights, caches and work buffers (%s in all); it would fit --hot %llu",
             mib(cfg.vram_budget_bytes).c_str(), (long long)L, (long long)H, layer_slot.c_str(), (long long)T_,
             mib(cfg.device_fixed_bytes).c_str(), mib(dev_need).c_str(),
             static_cast<unsigned long long>(room / every_layer));
    }
    const uint64_t host_need = host_bytes_ + cfg.host_fixed_bytes;
    if (host_need > cfg.host_budget_bytes) {
        const uint64_t other = cfg.host_fixed_bytes + (T_ + cfg.lru_slots) * shared;
        const uint64_t room = cfg.host_budget_bytes > other ? cfg.host_budget_bytes - other : 0;
        fail("store: host budget %s cannot hold %lld layers x %lld host slots x %s + %lld staging and %lld LRU slots + %s "
             "of dense weights, caches and work buffers (%s in all); it would fit --slots %llu with --hot %lld",
             mib(cfg.host_budget_bytes).c_str(), (long long)L, (long long)(S - H), layer_slot.c_str(),
             (long long)T_, (long long)cfg.lru_slots, mib(cfg.host_fixed_bytes).c_str(), mib(host_need).c_str(),
             static_cast<unsigned long long>(room / every_layer + H), (long long)H);
    }
    device_ = backend.alloc_device(device_bytes_);
    host_ = backend.alloc_host(host_bytes_);
    for (int64_t l = 0; l < L; ++l) {
        hot_base_.push_back(sizes_.layer_base(l, H));
        host_base_.push_back(sizes_.layer_base(l, S - H));
    }
    transient_base_ = static_cast<uint64_t>(H) * every_layer;
    staging_base_ = static_cast<uint64_t>(S - H) * every_layer;
    lru_base_ = staging_base_ + static_cast<uint64_t>(T_) * shared;
    free_staging_ = SlotFreeList(T_);
    free_transient_ = SlotFreeList(T_);
}

ExpertSlotPool::~ExpertSlotPool() {
    backend_.free_device(device_);
    backend_.free_host(host_);
}

uint8_t* ExpertSlotPool::slot_of(int64_t layer, const Home& h) const {
    const uint64_t own = sizes_.layer[static_cast<size_t>(layer)];
    switch (h.tier) {
        case Tier::kHot: return device_ + hot_base_[static_cast<size_t>(layer)] + static_cast<uint64_t>(h.slot) * own;
        case Tier::kHost: return host_ + host_base_[static_cast<size_t>(layer)] + static_cast<uint64_t>(h.slot) * own;
        case Tier::kLru: return host_ + lru_base_ + static_cast<uint64_t>(h.slot) * sizes_.largest;
        case Tier::kNone: break;
    }
    BG_CHECK_MSG(false, "store: an expert without a slot has no slot address");
    return nullptr;
}

}  // namespace bg
