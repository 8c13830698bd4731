#include "runtime/memory_plan.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "cpu/cpu_ops.h"
#include "model/dsv41_forward.h"
#include "model/forward_layout.h"
#include "model/make_model.h"
#include "model/scale.h"
#include "runtime/expert_slots.h"
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

std::vector<ModelShape::ExpertLayer> ModelShape::expert_layers() const {
    // An expert is one slice of each of its layer's three merged tensors.
    std::vector<ExpertLayer> out(static_cast<size_t>(hp.n_layer));
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        ExpertLayer& e = out[static_cast<size_t>(l)];
        for (const Tensor& t : tensors) {
            if (t.cls != dsv41::TensorClass::kExperts) continue;
            GgmlType* type = nullptr;
            if (t.name == dsv41::layer_tensor_name(l, "ffn_gate_exps")) type = &e.gate;
            else if (t.name == dsv41::layer_tensor_name(l, "ffn_up_exps")) type = &e.up;
            else if (t.name == dsv41::layer_tensor_name(l, "ffn_down_exps")) type = &e.down;
            if (!type) continue;
            *type = t.type;
            e.bytes += t.n_bytes / static_cast<uint64_t>(hp.n_expert);
        }
    }
    return out;
}

std::vector<uint64_t> ModelShape::expert_bytes_by_layer() const {
    std::vector<uint64_t> out;
    for (const ExpertLayer& e : expert_layers()) out.push_back(e.bytes);
    return out;
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
    fc.max_launch = cfg.max_launch();
    fc.matmul = cfg.matmul;
    fc.host_expert_positions =
        host_expert_positions(resolve_decode_experts(cfg.decode_experts, cuda), cfg.host_expert_positions);
    // A run always builds a residency plan (the default from router bias): a resident and a hot
    // mask per layer.
    const std::vector<std::vector<uint8_t>> masks(static_cast<size_t>(hp.n_layer), std::vector<uint8_t>(hp.n_expert));
    fc.resident = &masks;
    fc.hot = &masks;
    std::map<std::string, GgmlType> types;
    for (const ModelShape::Tensor& t : shape.tensors) types[t.name] = t.type;
    const dsv41::ForwardLayout fl =
        dsv41::ForwardLayout::of(hp, shape.roles, fc, [&types](const std::string& name) { return types.at(name); });
    // The CPU ops that compute host-resident experts hold their own scratch (none without them).
    const uint64_t host_ops_bytes = fc.host_expert_positions > 0 ? cpu::ops_host_bytes(fl.host_ops) : 0;
    if (cuda) {
        const dsv41::ForwardBytes f = fl.bytes(false, layout.device_image_bytes, dsv41::gpu_ops_device_bytes(fl),
                                               dsv41::gpu_ops_host_bytes(fl.ops) + host_ops_bytes);
        add(MemoryTier::kVram, "dense weights (all but the token embedding)", f.device_dense);
        add(MemoryTier::kVram, strf("KV and compressed caches (%lld positions)", (long long)fc.n_ctx), f.device_caches);
        add(MemoryTier::kVram, "activations, work buffers and routing masks", f.device_work);
        const MatmulNeeds& mn = fl.ops.matmul;
        std::string kinds;
        for (const auto& [on, what] : {std::pair<bool, const char*>{mn.int8_max_cols > 0, "integer kernels"},
                                       {mn.quant_max_cols > 0, "fused kernels"}})
            if (on) kinds += (kinds.empty() ? "" : ", ") + std::string(what);
        // Parts of the ops' own beside the matmul's.
        const uint64_t decode_scratch = attention_partial_bytes(fl.ops) + kArgmaxWordBytes;
        add(MemoryTier::kVram,
            "matmul workspace (" + (kinds.empty() ? std::string("cuBLAS only") : kinds) + ")" +
                (mn.dequant_bytes > 0 ? " and dequantisation scratch" : ""),
            f.device_matmul - decode_scratch);
        add(MemoryTier::kVram, "decode attention's row-split partials and the greedy choice's word", decode_scratch);
        add(MemoryTier::kHost, "forward buffers and kernel timeline", f.host);
        p.forward_device_bytes = f.device_dense + f.device_caches + f.device_work + f.device_matmul;
        p.forward_host_bytes = f.host;
    } else {
        p.forward_host_bytes = fl.bytes(true, 0, 0, cpu::ops_host_bytes(fl.ops) + host_ops_bytes).host;
        add(MemoryTier::kHost, strf("forward caches (%lld positions), activations and work buffers", (long long)fc.n_ctx),
            p.forward_host_bytes);
    }

    // The tiered expert store: each layer's resident slots its own experts' size, the shared
    // slots the largest (runtime/expert_slots.h).
    const ExpertSlots es = ExpertSlots::of(shape.expert_bytes_by_layer());
    const int64_t L = hp.n_layer, T = cfg.transient_slots;
    const std::string layer_slot =
        es.uniform() ? mib(es.largest)
                     : mib(*std::min_element(es.layer.begin(), es.layer.end())) + "-" + mib(es.largest) + " by layer";
    add(MemoryTier::kVram,
        strf("hot expert slots (%lld layers x %lld x %s)", (long long)L, (long long)hot, layer_slot.c_str()),
        es.device_pool_bytes(hot, 0));
    add(MemoryTier::kVram, strf("transient expert slots (%lld x %s)", (long long)T, mib(es.largest).c_str()),
        es.device_pool_bytes(0, T));
    add(MemoryTier::kHost,
        strf("host expert slots (%lld layers x %lld x %s)", (long long)L, (long long)(slots - hot), layer_slot.c_str()),
        es.host_pool_bytes(slots, hot, 0, 0));
    add(MemoryTier::kHost,
        strf("expert staging slots (%lld) and LRU slots (%lld), %s each", (long long)T, (long long)cfg.lru_slots,
             mib(es.largest).c_str()),
        es.host_pool_bytes(0, 0, T, cfg.lru_slots));

    // Engram rows and the timelines the overlap figure is made from.
    const uint64_t engram = cfg.engram_buffer_kib * 1024;
    add(MemoryTier::kVram, "Engram row buffer", engram);
    add(MemoryTier::kHost, "Engram staging (pinned)", engram);
    if (cfg.engram_read_ahead_kib) add(MemoryTier::kHost, "Engram read-ahead ring", cfg.engram_read_ahead_kib * 1024);
    add(MemoryTier::kHost, "disk and copy timelines (expert reads, expert copies, Engram)",
        3 * timeline_capacity(hp.n_layer, hp.n_expert) * sizeof(Interval));
    if (cuda) add(MemoryTier::kVram, "CUDA runtime reserve (--vram-reserve)", cfg.vram_reserve_mib << 20);
    return p;
}

ExpertCapacity expert_capacity(const ModelShape& shape, const RunConfig& cfg, bool cuda, int64_t n_prompt,
                               int64_t slots, int64_t hot, uint64_t cgroup_limit_bytes) {
    // Every other allocation is the same whatever S and H are, and each hot (host) slot per
    // layer adds one slot of every layer to VRAM (host): the plan without them gives the room.
    const ExpertSlots es = ExpertSlots::of(shape.expert_bytes_by_layer());
    ExpertCapacity c;
    c.hot = hot;
    if (es.layer_sum == 0) return c;
    const int64_t n_expert = shape.hp.n_expert;
    const MemoryPlan no_hot = plan_memory(shape, cfg, cuda, n_prompt, std::max(slots, hot), 0, cgroup_limit_bytes);
    const uint64_t vram = no_hot.total(MemoryTier::kVram);
    if (vram <= no_hot.vram_budget_bytes)
        c.max_hot = std::min<int64_t>(n_expert, static_cast<int64_t>((no_hot.vram_budget_bytes - vram) / es.layer_sum));
    const MemoryPlan no_host_slots = plan_memory(shape, cfg, cuda, n_prompt, hot, hot, cgroup_limit_bytes);
    uint64_t limit = no_host_slots.host_budget_bytes;
    if (cgroup_limit_bytes)
        limit = std::min(limit, cgroup_limit_bytes > MemoryPlan::kCgroupHeadroomBytes
                                    ? cgroup_limit_bytes - MemoryPlan::kCgroupHeadroomBytes : 0);
    const uint64_t host = no_host_slots.total(MemoryTier::kHost);
    if (host <= limit)
        c.max_slots = std::min<int64_t>(n_expert, hot + static_cast<int64_t>((limit - host) / es.layer_sum));
    return c;
}

void resolve_most_that_fit(RunConfig& cfg, const ModelShape& shape, bool cuda, int64_t n_prompt,
                           uint64_t cgroup_limit_bytes) {
    const bool most_slots = cfg.slots == RunConfig::kMostThatFit, most_hot = cfg.hot == RunConfig::kMostThatFit;
    if (!most_slots && !most_hot) return;
    if (!cfg.residency.empty())
        fail("--slots max and --hot max size a plan from the router bias; --residency '%s' gives S and H itself",
             cfg.residency.c_str());
    const int64_t n_expert = shape.hp.n_expert, k = shape.hp.n_expert_used;
    std::string note;
    if (most_hot) {
        if (!most_slots && cfg.slots == RunConfig::kFromModel) {
            cfg.slots = RunConfig::default_slots(n_expert, k);
            note = strf("S = %lld, the seed's default (not given on the command line); ", (long long)cfg.slots);
        }
        const int64_t s = most_slots ? RunConfig::default_slots(n_expert, k) : cfg.slots;
        const ExpertCapacity cap = expert_capacity(shape, cfg, cuda, n_prompt, s, 0, cgroup_limit_bytes);
        if (cap.max_hot < 0)
            fail("--hot max: the VRAM budget of %llu MiB does not hold the rest of the run, without any expert",
                 (unsigned long long)cfg.vram_budget_mib);
        cfg.hot = most_slots ? cap.max_hot : std::min(cap.max_hot, cfg.slots);
        note += strf("--hot max: H = %lld (VRAM holds %lld per layer%s)", (long long)cfg.hot, (long long)cap.max_hot,
                    !most_slots && cfg.hot < cap.max_hot ? ", at most S" : "");
    } else if (most_slots && cfg.hot == RunConfig::kFromModel) {
        cfg.hot = RunConfig::default_hot(RunConfig::default_slots(n_expert, k));
        note = strf("H = %lld, the seed's default (not given on the command line)", (long long)cfg.hot);
    }
    if (most_slots) {
        const ExpertCapacity cap = expert_capacity(shape, cfg, cuda, n_prompt, cfg.hot, cfg.hot, cgroup_limit_bytes);
        const int64_t need = std::max(cfg.hot, k);
        if (cap.max_slots < need)
            fail("--slots max: the host budget of %llu MiB%s holds %lld resident experts per layer with --hot %lld; "
                 "routing needs at least %lld",
                 (unsigned long long)cfg.host_budget_mib,
                 cgroup_limit_bytes ? strf(" (and the cgroup limit of %llu MiB)", (unsigned long long)(cgroup_limit_bytes >> 20)).c_str() : "",
                 (long long)std::max<int64_t>(cap.max_slots, 0), (long long)cfg.hot, (long long)need);
        cfg.slots = cap.max_slots;
        note += strf("%s--slots max: S = %lld (%s)", note.empty() ? "" : "; ", (long long)cfg.slots,
                     cfg.slots == n_expert ? "every expert of a layer" : "the most the host budget holds");
    }
    cfg.residency_defaults += (cfg.residency_defaults.empty() ? "" : "; ") + note;
}

std::string expert_summary(const ModelShape& shape, const ExpertCapacity& cap, int64_t n_layer) {
    const std::vector<ModelShape::ExpertLayer> layers = shape.expert_layers();
    // Layers with equal experts, in order of their first layer.
    std::vector<std::pair<const ModelShape::ExpertLayer*, std::vector<int64_t>>> groups;
    for (int64_t l = 0; l < static_cast<int64_t>(layers.size()); ++l) {
        const ModelShape::ExpertLayer& e = layers[static_cast<size_t>(l)];
        auto same = [&](const auto& g) {
            return g.first->bytes == e.bytes && g.first->gate == e.gate && g.first->up == e.up && g.first->down == e.down;
        };
        auto it = std::find_if(groups.begin(), groups.end(), same);
        if (it == groups.end()) groups.push_back({&e, {l}});
        else it->second.push_back(l);
    }
    std::string out = "experts by layer (one expert: gate, up and down)\n";
    for (const auto& [e, ls] : groups) {
        std::string names;
        for (size_t i = 0; i < ls.size(); ++i) {
            size_t j = i;
            while (j + 1 < ls.size() && ls[j + 1] == ls[j] + 1) ++j;
            names += strf("%s%lld", names.empty() ? "" : ", ", (long long)ls[i]);
            if (j > i) names += strf("-%lld", (long long)ls[j]);
            i = j;
        }
        out += strf("  layers %-30s %10.3f MB per expert (%s, %s, %s), slots of %s\n", names.c_str(), e->bytes / 1e6,
                    type_name(e->gate), type_name(e->up), type_name(e->down),
                    mib(ExpertSlots::round_up(e->bytes)).c_str());
    }
    auto held = [&](int64_t per_layer) {
        return per_layer < 0 ? std::string("none (the rest of the tier is over the budget)")
                             : strf("%lld per layer (%lld experts)", (long long)per_layer, (long long)(per_layer * n_layer));
    };
    out += strf("experts the budgets hold: VRAM up to --hot %s; host up to --slots %s with --hot %lld\n",
                held(cap.max_hot).c_str(), held(cap.max_slots).c_str(), (long long)cap.hot);
    return out;
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
