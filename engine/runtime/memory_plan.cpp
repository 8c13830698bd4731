#include "runtime/memory_plan.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "cpu/cpu_ops.h"
#include "model/dsv41_forward.h"
#include "model/forward_layout.h"
#include "model/make_model.h"
#include "model/scale.h"
#include "runtime/expert_store.h"
#include "util/timeline.h"
#include "util/check.h"

namespace bg {

namespace {

std::string mib(uint64_t b) { return strf("%.1f MiB", b / 1048576.0); }

// Which kind of dense weight a tensor is, for the VRAM breakdown.
const char* dense_kind(const std::string& name) {
    auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    if (name == "output.weight") return "output head";
    if (name == "token_embd.weight") return "token embedding";
    if (has("engram_")) return "Engram projection";
    if (has("indexer.") || has("attn_compressor")) return "compressor and indexer";
    if (has("hc_")) return "mHC mixes";
    if (has("ffn_gate_inp")) return "router";
    if (has("_shexp")) return "shared expert";
    if (has("attn_")) return "attention";
    return "other";
}

}  // namespace

uint64_t ModelShape::largest_expert_bytes() const {
    // An expert is one slice of each of its layer's three merged tensors.
    std::map<std::string, uint64_t> per_layer;
    for (const Tensor& t : tensors)
        if (t.cls == dsv41::TensorClass::kExperts)
            per_layer[t.name.substr(0, t.name.find('.', 4))] += t.n_bytes / static_cast<uint64_t>(hp.n_expert);
    uint64_t m = 0;
    for (const auto& [layer, bytes] : per_layer) m = std::max(m, bytes);
    return m;
}

ModelShape shape_of(const dsv41::Model& m) {
    ModelShape s;
    s.hp = m.hp();
    s.roles = m.roles();
    for (const dsv41::TensorSpec& spec : dsv41::tensor_specs(s.hp, s.roles)) {
        const gguf::TensorInfo* t = m.gguf().tensor(spec.name);
        BG_CHECK(t != nullptr);
        s.tensors.push_back({spec.name, spec.cls, t->type, t->n_elems, t->n_bytes});
    }
    return s;
}

ModelShape shape_of_file(const std::string& path) {
    const gguf::Reader r = gguf::Reader::open(path);
    ModelShape s;
    s.hp = dsv41::read_hparams(r);
    s.roles = dsv41::validate_tensors(s.hp, r);
    for (const dsv41::TensorSpec& spec : dsv41::tensor_specs(s.hp, s.roles)) {
        const gguf::TensorInfo* t = r.tensor(spec.name);
        BG_CHECK(t != nullptr);
        s.tensors.push_back({spec.name, spec.cls, t->type, t->n_elems, t->n_bytes});
    }
    return s;
}

ModelShape shape_of(const ModelScale& scale) {
    ModelScale sc = scale;
    generate_engram_params(sc, 1);  // the tables' lengths follow from the drawn primes
    ModelShape s;
    s.hp = sc.hp;
    s.roles = sc.roles();
    const std::vector<dsv41::TensorSpec> specs = dsv41::tensor_specs(s.hp, s.roles);
    const std::vector<GgmlType> types = tensor_types_for(sc, specs);
    for (size_t i = 0; i < specs.size(); ++i) {
        const dsv41::TensorSpec& spec = specs[i];
        const GgmlType type = types[i];
        uint64_t n = 1;
        for (int64_t d : spec.ne) n *= static_cast<uint64_t>(d);
        const uint64_t rows = n / static_cast<uint64_t>(spec.ne[0]);
        s.tensors.push_back({spec.name, spec.cls, type, n, rows * row_bytes(type, spec.ne[0])});
    }
    return s;
}

MemoryPlan plan_memory(const ModelShape& shape, const RunConfig& cfg, bool cuda, int64_t n_prompt, int64_t slots,
                       int64_t hot, uint64_t cgroup_limit_bytes) {
    const dsv41::HParams& hp = shape.hp;
    MemoryPlan p;
    p.backend = cuda ? "cuda" : "cpu";
    p.vram_budget_bytes = cfg.vram_budget_mib << 20;
    p.host_budget_bytes = cfg.host_budget_mib << 20;
    p.cgroup_limit_bytes = cgroup_limit_bytes;
    auto add = [&](MemoryTier t, std::string what, uint64_t bytes, bool counted = true) {
        p.items.push_back({t, std::move(what), bytes, counted});
    };

    // Dense weights.
    std::vector<dsv41::DenseEntry> entries;
    for (const ModelShape::Tensor& t : shape.tensors)
        if (t.cls == dsv41::TensorClass::kVector || t.cls == dsv41::TensorClass::kMatrix)
            entries.push_back({t.name, t.cls, t.n_elems, t.n_bytes});
    const dsv41::DenseLayout layout = dsv41::dense_layout(entries);
    const dsv41::DenseHome home = cuda ? dsv41::DenseHome::kDevice : dsv41::DenseHome::kHost;
    if (cuda) {
        std::map<std::string, uint64_t> by_kind;
        for (const dsv41::DenseEntry& e : entries)
            if (e.name != "token_embd.weight")
                by_kind[e.cls == dsv41::TensorClass::kVector ? "1-D weights (F32)" : dense_kind(e.name)] +=
                    e.cls == dsv41::TensorClass::kVector ? e.n_elems * 4 : e.n_bytes;
        for (const auto& [kind, bytes] : by_kind) add(MemoryTier::kVram, "  dense: " + kind, bytes, false);
    }
    add(MemoryTier::kHost, cuda ? "dense weights: 1-D weights and the token embedding" : "dense weights (all)",
        layout.host_bytes(home));
    if (cuda) add(MemoryTier::kHost, "load staging (pinned, freed after start-up)", 64ull << 20, false);

    // The forward pass.
    dsv41::ForwardConfig fc;
    fc.n_ctx = cfg.n_ctx > 0 ? cfg.n_ctx : n_prompt + std::max<int64_t>(cfg.gen, 1);
    fc.max_ubatch = cfg.ubatch;
    fc.matmul = parse_matmul_mode(cfg.matmul);
    // A run always builds a residency plan (the default from router bias): one mask per layer.
    const std::vector<std::vector<uint8_t>> masks(static_cast<size_t>(hp.n_layer), std::vector<uint8_t>(hp.n_expert));
    fc.resident = &masks;
    std::map<std::string, GgmlType> types;
    for (const ModelShape::Tensor& t : shape.tensors) types[t.name] = t.type;
    const dsv41::ForwardLayout fl =
        dsv41::ForwardLayout::of(hp, shape.roles, fc, [&types](const std::string& name) { return types.at(name); });
    if (cuda) {
        const dsv41::ForwardBytes f =
            fl.bytes(false, layout.device_image_bytes, dsv41::gpu_ops_device_bytes(fl), dsv41::gpu_ops_host_bytes(fl.ops));
        add(MemoryTier::kVram, "dense weights (all but the token embedding)", f.device_dense);
        add(MemoryTier::kVram, strf("KV and compressed caches (%lld positions)", (long long)fc.n_ctx), f.device_caches);
        add(MemoryTier::kVram, "activations, work buffers and routing masks", f.device_work);
        const MatmulNeeds& mn = fl.ops.matmul;
        std::string kinds;
        for (const auto& [on, what] : {std::pair<bool, const char*>{mn.int8_max_cols > 0, "integer kernels"},
                                       {mn.quant_max_cols > 0, "fused kernels"}})
            if (on) kinds += (kinds.empty() ? "" : ", ") + std::string(what);
        add(MemoryTier::kVram,
            "matmul workspace (" + (kinds.empty() ? std::string("cuBLAS only") : kinds) + ")" +
                (mn.dequant_bytes > 0 ? " and dequantisation scratch" : ""),
            f.device_matmul);
        add(MemoryTier::kHost, "forward buffers and kernel timeline", f.host);
    } else {
        add(MemoryTier::kHost, strf("forward caches (%lld positions), activations and work buffers", (long long)fc.n_ctx),
            fl.bytes(true, 0, 0, cpu::ops_host_bytes(fl.ops)).host);
    }

    // The tiered expert store.
    const uint64_t slot = TieredExpertStore::slot_bytes_for(shape.largest_expert_bytes());
    const int64_t L = hp.n_layer, T = cfg.transient_slots;
    add(MemoryTier::kVram, strf("hot expert slots (%lld layers x %lld x %s)", (long long)L, (long long)hot, mib(slot).c_str()),
        TieredExpertStore::device_pool_bytes(L, hot, 0, slot));
    add(MemoryTier::kVram, strf("transient expert slots (%lld)", (long long)T), TieredExpertStore::device_pool_bytes(0, 0, T, slot));
    add(MemoryTier::kHost, strf("host expert slots (%lld layers x %lld)", (long long)L, (long long)(slots - hot)),
        TieredExpertStore::host_pool_bytes(L, slots, hot, 0, 0, slot));
    add(MemoryTier::kHost, strf("expert staging slots (%lld) and LRU slots (%lld)", (long long)T, (long long)cfg.lru_slots),
        TieredExpertStore::host_pool_bytes(0, 0, 0, T, cfg.lru_slots, slot));

    // Engram rows and the timelines the overlap figure is made from.
    const uint64_t engram = cfg.engram_buffer_kib * 1024;
    add(MemoryTier::kVram, "Engram row buffer", engram);
    add(MemoryTier::kHost, "Engram staging (pinned)", engram);
    add(MemoryTier::kHost, "disk and copy timelines (expert reads, expert copies, Engram)",
        3 * timeline_capacity(hp.n_layer, hp.n_expert) * sizeof(Interval));
    if (cuda) add(MemoryTier::kVram, "CUDA runtime reserve (--vram-reserve)", cfg.vram_reserve_mib << 20);
    return p;
}

uint64_t MemoryPlan::total(MemoryTier t) const {
    uint64_t s = 0;
    for (const MemoryItem& i : items)
        if (i.tier == t && i.counted) s += i.bytes;
    return s;
}

std::string MemoryPlan::problems() const {
    std::string out;
    const uint64_t vram = total(MemoryTier::kVram), host = total(MemoryTier::kHost);
    if (vram > vram_budget_bytes)
        out += strf("VRAM: %s needed, %s over the budget of %s\n", mib(vram).c_str(), mib(vram - vram_budget_bytes).c_str(),
                    mib(vram_budget_bytes).c_str());
    if (host > host_budget_bytes)
        out += strf("host: %s needed, %s over the budget of %s\n", mib(host).c_str(), mib(host - host_budget_bytes).c_str(),
                    mib(host_budget_bytes).c_str());
    if (cgroup_limit_bytes && host + kCgroupHeadroomBytes > cgroup_limit_bytes)
        out += strf("cgroup: %s of host allocations leave less than %s of the %s limit for page cache, io buffers and "
                    "the heap\n",
                    mib(host).c_str(), mib(kCgroupHeadroomBytes).c_str(), mib(cgroup_limit_bytes).c_str());
    return out;
}

std::string MemoryPlan::table() const {
    std::string out;
    for (MemoryTier t : {MemoryTier::kVram, MemoryTier::kHost}) {
        const bool vram = t == MemoryTier::kVram;
        out += strf("%s (%s backend)\n", vram ? (backend == "cuda" ? "VRAM" : "device arena") : "host", backend.c_str());
        for (const MemoryItem& i : items)
            if (i.tier == t) out += strf("  %-64s %12s%s\n", i.what.c_str(), mib(i.bytes).c_str(), i.counted ? "" : "  (not added)");
        const uint64_t sum = total(t), budget = vram ? vram_budget_bytes : host_budget_bytes;
        out += strf("  %-64s %12s of %s budget (%s)\n", "total", mib(sum).c_str(), mib(budget).c_str(),
                    sum <= budget ? "fits" : "DOES NOT FIT");
        if (!vram && cgroup_limit_bytes)
            out += strf("  %-64s %12s of the %s cgroup limit (%s left; %s needed)\n", "total", mib(sum).c_str(),
                        mib(cgroup_limit_bytes).c_str(),
                        mib(cgroup_limit_bytes > sum ? cgroup_limit_bytes - sum : 0).c_str(),
                        mib(kCgroupHeadroomBytes).c_str());
    }
    return out;
}

nlohmann::json MemoryPlan::to_json() const {
    nlohmann::json items_j = nlohmann::json::array();
    for (const MemoryItem& i : items)
        items_j.push_back({{"tier", i.tier == MemoryTier::kVram ? "vram" : "host"}, {"what", i.what},
                           {"bytes", i.bytes}, {"counted", i.counted}});
    return {{"backend", backend},
            {"items", items_j},
            {"vram_bytes", total(MemoryTier::kVram)},
            {"host_bytes", total(MemoryTier::kHost)},
            {"vram_budget_bytes", vram_budget_bytes},
            {"host_budget_bytes", host_budget_bytes},
            {"cgroup_limit_bytes", cgroup_limit_bytes},
            {"fits", problems().empty()},
            {"problems", problems()}};
}

}  // namespace bg
