#include "runtime/session.h"

#include "cpu/cpu_ops.h"
#include "cpu/int8_matmul.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "util/build_info.h"
#include "util/timeline.h"
#include "util/check.h"

namespace bg {

namespace {

// A row of up to 4 KiB + 1 byte at any offset covers at most two pages: one read each.
constexpr uint32_t kEngramReadBytes = 8192;

io::IoConfig io_config(const RunConfig& c) {
    io::IoConfig io;
    io.engine = c.io;
    io.queue_depth = c.queue_depth;
    io.read_bytes = c.read_size;
    return io;
}

// Engram reads are a row each, at most two pages: many small reads in flight, small buffers.
io::IoConfig engram_io_config(const RunConfig& c) {
    io::IoConfig io = io_config(c);
    io.queue_depth = c.engram_queue_depth;
    io.read_bytes = kEngramReadBytes;
    return io;
}

}  // namespace

// memory.peak of the cgroup (v2) this process runs in; < 0 when there is none to read.
double cgroup_memory_peak_mib() {
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("0::", 0) != 0) continue;
        std::ifstream peak("/sys/fs/cgroup" + line.substr(3) + "/memory.peak");
        unsigned long long bytes = 0;
        if (peak >> bytes) return bytes / 1048576.0;
    }
    return -1.0;
}

double host_peak_rss_mib() {
    struct rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

Fidelity compare_logits(const std::vector<float>& exact, const std::vector<float>& policy, int64_t V) {
    BG_CHECK(exact.size() == policy.size() && V > 0);
    Fidelity f;
    f.positions = static_cast<int64_t>(exact.size()) / V;
    int64_t agree = 0;
    double kl_sum = 0.0;
    for (int64_t p = 0; p < f.positions; ++p) {
        const float* a = &exact[p * V];
        const float* b = &policy[p * V];
        agree += argmax(a, V) == argmax(b, V);
        // log-softmax of both in double, then KL(a || b)
        double ma = a[0], mb = b[0];
        for (int64_t i = 1; i < V; ++i) ma = std::max<double>(ma, a[i]), mb = std::max<double>(mb, b[i]);
        double za = 0, zb = 0;
        for (int64_t i = 0; i < V; ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
        const double la = ma + std::log(za), lb = mb + std::log(zb);
        double kl = 0;
        for (int64_t i = 0; i < V; ++i) {
            const double lpa = a[i] - la, lpb = b[i] - lb;
            kl += std::exp(lpa) * (lpa - lpb);
        }
        kl_sum += std::max(0.0, kl);
    }
    f.top1_agreement = f.positions ? static_cast<double>(agree) / f.positions : 0.0;
    f.mean_kl = f.positions ? kl_sum / f.positions : 0.0;
    return f;
}

Session::Session(const RunConfig& cfg, DeviceFactory* device) : cfg_(cfg) {
    if (!device) device = &cpu::cpu_device();
    order_ = cfg.prefill;
    routing_ = cfg.routing;
    if (cfg.passes < 1) fail("--passes must be >= 1");
    if (cfg.gen < 0) fail("--gen must be >= 0");

    model_ = dsv41::Model::open(cfg.model_path, device->dense_on_device() ? dsv41::DenseHome::kDevice : dsv41::DenseHome::kHost);
    const dsv41::HParams& hp = model_->hp();
    // A tokenizer this engine cannot use matters only to text: ids still run.
    try {
        tokenizer_ = load_tokenizer(*model_);
    } catch (const Error& e) {
        if (!cfg.prompt_text.empty() || !cfg.prompt_text_file.empty()) throw;
        std::fprintf(stderr, "%s; running on token ids\n", e.what());
    }
    // Likewise the end-of-generation tokens: without them decoding runs to --gen.
    try {
        eog_ = tok::end_of_generation(model_->gguf());
        for (const std::string& note : eog_.ignored) std::fprintf(stderr, "end of generation: %s\n", note.c_str());
    } catch (const Error& e) {
        std::fprintf(stderr, "%s; decoding runs to --gen without end-of-generation tokens\n", e.what());
    }
    prompt_ = build_prompt(cfg, *model_, tokenizer_.get());
    sampler_ = std::make_unique<Sampler>(cfg.sampling);
    const ModelShape shape = shape_of(*model_);
    resolve_most_that_fit(cfg_, shape, device->dense_on_device(), static_cast<int64_t>(prompt_.size()));
    cfg_.resolve_residency_defaults(hp.n_expert, hp.n_expert_used);
    plan_ = cfg.residency.empty() ? plan_from_bias(*model_, cfg_.slots, cfg_.hot) : load_plan(cfg.residency, *model_);

    if (cfg.sm_limit < 0) fail("--sm-limit must be >= 0 (0: no limit), got %lld", (long long)cfg.sm_limit);
    if (cfg.host_expert_positions < 1 || cfg.host_expert_positions > kMaxHostExpertPositions)
        fail("--host-expert-positions must be 1..%lld, got %lld", (long long)kMaxHostExpertPositions,
             (long long)cfg.host_expert_positions);
    BackendOptions bo;
    bo.sm_limit = static_cast<int>(std::min<int64_t>(cfg.sm_limit, 1 << 20));
    bo.chained_launches = cfg.chained_launches;
    // On a GPU with an SM limit this makes the limited context current on this thread; the
    // store's streamer thread binds itself to it (Backend::bind_thread).
    backend_ = device->make_backend(bo);
    // --threads 0: every core, but on a GPU a quarter of them fewer, three at most: the thread that
    // issues GPU work and the expert store's streamer thread run beside the pool while the CPU
    // computes a decode step's host-resident experts, and the pool's members meet at barriers, so
    // one of them descheduled holds up the rest (one core is left for the rest of the host). Slice decode, hybrid, on
    // 16 virtual cores: on an H100 machine of 2026-12-06 08:17, rounds alternated, 12 threads
    // 150.7, 158.6, 157.1 tok/s, 13 164.6, 175.3, 169.4, 14 166.5, 166.9, 160.8; on another at
    // 07:22, 15 threads 155.5 against 12's 167.3 and 16 collapsed to 47.7 (a CPU expert 2.4 ms);
    // on the H200 machines of 2026-12-05, 15 threads 89.5, 103.3 and 75.2 against 12's 88.5, 113.4
    // and 114.4 (measurements/slice/decode-threads/).
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    pool_ = std::make_unique<cpu::ThreadPool>(cfg.threads > 0 ? cfg.threads
                                              : device->dense_on_device() ? std::max(1, hw - std::clamp(hw / 4, 1, 3))
                                                                          : 0);
    // Each reader opens every file of the model once (every shard of a split model).
    expert_reader_ = io::Reader::open(model_->shard_paths(), io_config(cfg), cfg.faults);
    engram_reader_ = io::Reader::open(model_->shard_paths(), engram_io_config(cfg), cfg.faults);

    const uint64_t mib = 1ull << 20;
    const uint64_t engram_bytes = cfg.engram_buffer_kib * 1024;
    const int64_t n_prompt = static_cast<int64_t>(prompt_.size());
    // What `betelgeuse plan` says these flags allocate, made first: the expert store's budget
    // checks (and what they say would fit) count the forward pass's caches and buffers from it,
    // so the store exists before the forward that reads experts from it. Every allocation is then
    // checked against it, tier by tier.
    const bool on_device = device->dense_on_device();
    cfg_.decode_experts = resolve_decode_experts(cfg.decode_experts, on_device);
    memory_ = plan_memory(shape, cfg, on_device, n_prompt, plan_.slots, plan_.hot);
    engram_ = std::make_unique<EngramStore>(*model_, *backend_, *engram_reader_, engram_bytes,
                                            cfg.engram_read_ahead_kib * 1024);
    if (on_device) vram_reserve_bytes_ = cfg.vram_reserve_mib * mib;

    StoreConfig sc;
    sc.transient_slots = cfg.transient_slots;
    sc.lru_slots = cfg.lru_slots;
    sc.prefetch = order_ == PrefillOrder::kLayerMajor;
    sc.speculative = cfg.speculative_copies;
    sc.split_experts = cfg.split_experts;
    sc.split_copy = cfg.split_copy;
    sc.vram_budget_bytes = cfg.vram_budget_mib * mib;
    sc.host_budget_bytes = cfg.host_budget_mib * mib;
    sc.device_fixed_bytes = engram_->buffer_bytes() + memory_.forward_device_bytes + vram_reserve_bytes_;
    sc.host_fixed_bytes = model_->dense_bytes() + memory_.forward_host_bytes + engram_->host_bytes()
                          + engram_->timeline().bytes();
    store_ = std::make_unique<TieredExpertStore>(*model_, *backend_, *expert_reader_, plan_, sc);

    dsv41::ForwardConfig fc;
    fc.n_ctx = cfg.n_ctx > 0 ? cfg.n_ctx : n_prompt + std::max<int64_t>(cfg.gen, 1);
    fc.max_ubatch = cfg.ubatch;
    fc.max_launch = cfg.max_launch();
    fc.swiglu_form = cfg.swiglu_clamp;
    fc.matmul = cfg.matmul;
    fc.routing = routing_;
    fc.resident = &plan_.mask;
    // The hot set starts as the plan's; promotion changes it (only hot-pool reads it).
    hot_mask_ = plan_.hot_masks(hp.n_expert);
    fc.hot = &hot_mask_;
    fc.host_expert_positions = host_expert_positions(cfg_.decode_experts, cfg_.host_expert_positions);
    fwd_ = std::make_unique<dsv41::Forward>(*model_, device->make_ops(*pool_), *store_, *engram_, fc,
                                            fc.host_expert_positions > 0 ? cpu::make_cpu_ops(*pool_) : nullptr);
    BG_CHECK_MSG(fwd_->device_bytes() == memory_.forward_device_bytes && fwd_->buffer_bytes() == memory_.forward_host_bytes,
                 "the forward pass holds other than its plan");
    runner_ = std::make_unique<Runner>(*model_, *fwd_);

    // A GPU's runtime holds device memory beside the engine's allocations (cuBLAS handle,
    // streams, events): measured now that all of it exists; it must stay within the fixed
    // reserve the budget set aside for it, so the device-reported peak stays within --vram-budget.
    const uint64_t tracked_device_bytes = engram_->buffer_bytes() + fwd_->device_bytes() + store_->device_bytes();
    if (on_device) {
        const uint64_t used = backend_->device_used_bytes();
        runtime_device_bytes_ = used > tracked_device_bytes ? used - tracked_device_bytes : 0;
        if (runtime_device_bytes_ > vram_reserve_bytes_)
            fail("the CUDA runtime holds %.1f MiB of device memory beside the engine's own %.1f MiB, more than "
                 "--vram-reserve %llu MiB: give --vram-reserve %llu or more",
                 runtime_device_bytes_ / 1048576.0, tracked_device_bytes / 1048576.0,
                 static_cast<unsigned long long>(cfg.vram_reserve_mib),
                 static_cast<unsigned long long>((runtime_device_bytes_ + mib - 1) / mib));
    }

    if (cfg_.decode_experts != DecodeExperts::kGpu) measure_host_paths();

    const uint64_t live_vram = store_->device_bytes() + engram_->buffer_bytes() + fwd_->device_bytes() + vram_reserve_bytes_;
    const uint64_t live_host = model_->dense_bytes() + fwd_->buffer_bytes() + store_->host_bytes() +
                               engram_->host_bytes() + store_->timeline_bytes() + engram_->timeline().bytes();
    BG_CHECK_MSG(live_vram == memory_.total(MemoryTier::kVram) && live_host == memory_.total(MemoryTier::kHost),
                 "the memory plan and the allocations differ");

}

Session::~Session() = default;

void Session::measure_host_paths() {
    // One measurement per distinct set of expert types (K-quant presets give some layers' down
    // matrices more bits), on that layer's expert 0, read from the file.
    const int64_t L = model_->hp().n_layer;
    std::vector<HostPathRates> rates(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) {
        const ExpertTypes t = model_->expert_types(l);
        int64_t same = -1;
        for (int64_t j = 0; j < l && same < 0; ++j)
            if (model_->expert_types(j) == t) same = j;
        if (same >= 0) {
            rates[l] = rates[same];
            continue;
        }
        const TieredExpertStore::HostPathProbe p = store_->probe_host_path(l);
        HostPathRates& r = rates[l];
        r.copy_ms = p.copy_ms;
        // What a split's copied part costs against a whole copy (HostPathRates), in the form the
        // run copies parts.
        if (p.part_rows_share > 0 && p.part_rows_share < 1 && p.copy_ms > 0)
            r.fit_part_copy(cfg_.split_copy, p.copy_part_ms, p.part_rows_share);
        r.gpu_ms = fwd_->time_expert_ms(p.device, l, 1, 3);
        // Each of the host slots' experts read once in turn, the first again at the end (its
        // bytes left the caches since), so each run reads its weights from memory as decode does;
        // the median. on_host: by the CPU; else by the device, reading the slot in place (its
        // kernel was loaded above).
        auto median_ms = [&](bool on_host, int64_t m) {
            std::vector<double> ms;
            for (size_t i = 0; i <= p.host.size(); ++i) {
                ExpertView v = p.host[i % p.host.size()];
                v.on_host = on_host;
                ms.push_back(fwd_->time_expert_ms(v, l, m, 1, false));
            }
            std::sort(ms.begin(), ms.end());
            return ms[ms.size() / 2];
        };
        r.cpu_ms_one = median_ms(true, 1);
        // Calls of more positions (--host-expert-positions > 1) give an expert more tokens: what
        // each further one costs, from the expert at up to 4 tokens. At these widths the CPU
        // kernel is compute-bound past one token, so it is nearly linear (bench_cpu, M = 1, 4, 16).
        // Decode alone: as much again (never used: its experts have one token).
        const int64_t m = std::min<int64_t>(cfg_.host_expert_positions, 4);
        r.cpu_ms_per_token =
            m > 1 ? std::max(0.0, (median_ms(true, m) - r.cpu_ms_one) / static_cast<double>(m - 1)) : r.cpu_ms_one;
        r.gpu_in_place_ms = median_ms(false, 1);
    }
    store_->set_host_compute(cfg_.decode_experts, rates);
    const HostPathRates& r = rates.front();
    std::fprintf(stderr,
                 "decode experts: %s; per host-resident expert of layer 0 at one token: the CPU %.3f ms in place, or a "
                 "copy %.3f ms and the device %.3f ms (the device reading it in place: %.3f ms)\n",
                 enum_name(cfg_.decode_experts), r.cpu_ms_one, r.copy_ms, r.gpu_ms, r.gpu_in_place_ms);
}

void Session::promote() {
    store_->promote();
    // The experts in VRAM changed: hot-pool routes among the new ones from now on.
    for (int64_t l = 0; l < model_->hp().n_layer; ++l) {
        std::fill(hot_mask_[l].begin(), hot_mask_[l].end(), 0);
        for (int32_t e : store_->hot_experts(l)) hot_mask_[l][e] = 1;
    }
    fwd_->refresh_hot_set();
}

std::vector<float> Session::all_logits(RoutingPolicy policy) {
    fwd_->set_routing(policy);
    std::vector<float> all;
    runner_->prefill(prompt_, order_, cfg_.ubatch, nullptr, &all);
    fwd_->set_routing(routing_);
    return all;
}

nlohmann::json Session::run(bool verbose, const std::function<void(int32_t)>& on_token) {
    const dsv41::HParams& hp = model_->hp();
    const int64_t n_prompt = static_cast<int64_t>(prompt_.size());
    nlohmann::json metrics;
    metrics["config"] = cfg_.to_json();
    metrics["build"] = build_info().to_json();  // the commit these binaries were built from
    metrics["engine"] = {{"backend", backend_->name()},
                         {"io_engine", expert_reader_->engine_name()},
                         {"threads", pool_->size()},
                         {"cpu_int8_kernel", cpu::cpu_isa_name(cpu::best_cpu_isa())},  // what CPU matmuls of --matmul fast run
                         {"decode_experts", enum_name(cfg_.decode_experts)},
                         {"prefetch", order_ == PrefillOrder::kLayerMajor},
                         {"slot_bytes", store_->slot_bytes()},
                         {"device_pool_bytes", store_->device_bytes()},
                         {"host_pool_bytes", store_->host_bytes()},
                         {"engram_buffer_bytes", engram_->buffer_bytes()},
                         {"dense_bytes", model_->dense_bytes()},
                         {"dense_home", model_->dense_home() == dsv41::DenseHome::kDevice ? "device" : "host"},
                         {"device_image_bytes", model_->device_image_bytes()},
                         {"vram_reserve_bytes", vram_reserve_bytes_},
                         {"runtime_device_bytes", runtime_device_bytes_},
                         {"work_buffer_bytes", fwd_->buffer_bytes()},
                         {"sm_limit", backend_->sm_limit().to_json()},
                         {"chained_launches", backend_->chained_launches()}};
    // Layers' experts may differ in size (llama-quantize's ffn_down rules): the largest, and each.
    std::vector<uint64_t> expert_each;
    for (int64_t l = 0; l < hp.n_layer; ++l) expert_each.push_back(model_->expert_bytes_each(l));
    metrics["model"] = {{"path", cfg_.model_path},
                        {"file_bytes", model_->gguf().total_file_size()},
                        {"files", model_->shard_paths().size()},
                        {"expert_bytes", model_->expert_bytes()},
                        {"engram_bytes", model_->engram_bytes()},
                        {"n_layer", hp.n_layer},
                        {"n_expert", hp.n_expert},
                        {"n_expert_used", hp.n_expert_used},
                        {"expert_bytes_each", *std::max_element(expert_each.begin(), expert_each.end())},
                        {"expert_bytes_by_layer", expert_each}};
    metrics["memory"] = memory_.to_json();
    metrics["residency"] = {{"slots", plan_.slots}, {"hot", plan_.hot}, {"source", plan_.source}};
    metrics["passes"] = nlohmann::json::array();
    const double vram_mib = (store_->device_bytes() + engram_->buffer_bytes() + fwd_->device_bytes()) / 1048576.0;

    // SPEC §5's overlap figure: of the time no disk read (expert or Engram) was in flight, the
    // share the GPU spent in kernels; null on the CPU backend or when a timeline overflowed.
    auto overlap_metrics = [&](double t0_ms, double t1_ms) {
        const Timeline disk = union_of(store_->disk_timeline(), engram_->timeline());
        const double idle_ms = std::max(0.0, (t1_ms - t0_ms) - disk.covered_ms(t0_ms, t1_ms));
        nlohmann::json o = {{"disk_busy_ms", (t1_ms - t0_ms) - idle_ms}, {"disk_idle_ms", idle_ms},
                            {"gpu_busy_disk_idle_ms", nullptr}, {"gpu_busy_while_disk_idle_fraction", nullptr}};
        // Issue 14's form: of the time neither a disk read nor an expert copy was pending.
        const Timeline io = union_of(disk, store_->copy_timeline());
        const double io_idle_ms = std::max(0.0, (t1_ms - t0_ms) - io.covered_ms(t0_ms, t1_ms));
        o["io_idle_ms"] = io_idle_ms;
        o["gpu_busy_io_idle_ms"] = nullptr;
        o["gpu_busy_while_io_idle_fraction"] = nullptr;
        const Timeline* gpu = fwd_->device_timeline();
        if (!gpu || gpu->overflowed() || disk.overflowed()) return o;
        const double busy_idle = covered_outside_ms(*gpu, disk, t0_ms, t1_ms);
        o["gpu_busy_disk_idle_ms"] = busy_idle;
        if (idle_ms > 0) o["gpu_busy_while_disk_idle_fraction"] = busy_idle / idle_ms;
        if (io.overflowed()) return o;
        const double busy_io_idle = covered_outside_ms(*gpu, io, t0_ms, t1_ms);
        o["gpu_busy_io_idle_ms"] = busy_io_idle;
        if (io_idle_ms > 0) o["gpu_busy_while_io_idle_fraction"] = busy_io_idle / io_idle_ms;
        return o;
    };
    auto begin_timelines = [&] {
        engram_->clear_timeline();
        fwd_->begin_timeline();
    };

    // The GPU's kernel time so far (negative: not measured), and of it the MoE calls' experts and
    // shared experts (Ops::BusyKind::kBesideHost).
    struct Busy {
        double all, beside;
    };
    auto busy_now = [&] { return Busy{fwd_->device_busy_ms(), fwd_->device_busy_beside_host_ms()}; };
    // The figures of a pass (or of decode) that ran from t0_ms to t1_ms on the steady clock, the
    // GPU's kernel time counted from b0 (busy_now() at t0_ms).
    auto tier_metrics = [&](const StoreCounters& d, const EngramCounters& g, double t0_ms, double t1_ms,
                            const Busy& b0) {
        const Busy b1 = busy_now();
        const double busy_ms = b0.all >= 0 ? b1.all - b0.all : -1.0;
        const double beside_ms = b0.beside >= 0 ? b1.beside - b0.beside : -1.0;
        const double wall_ms = t1_ms - t0_ms;
        const double blocked = d.disk_wait_ms + d.copy_wait_ms;
        const nlohmann::json overlap = overlap_metrics(t0_ms, t1_ms);
        return nlohmann::json{{"overlap", overlap},
                              {"gpu_busy_while_disk_idle_fraction", overlap["gpu_busy_while_disk_idle_fraction"]},
                              {"gpu_busy_while_io_idle_fraction", overlap["gpu_busy_while_io_idle_fraction"]},
                              {"gpu_busy_ms", busy_ms >= 0 ? nlohmann::json(busy_ms) : nlohmann::json(nullptr)},
                              {"gpu_busy_beside_host_ms",
                               busy_ms >= 0 && beside_ms >= 0 ? nlohmann::json(beside_ms) : nlohmann::json(nullptr)},
                              {"gpu_busy_fraction", busy_ms >= 0 && wall_ms > 0 ? nlohmann::json(busy_ms / wall_ms)
                                                                                : nlohmann::json(nullptr)},
                              {"experts", d.to_json()},
                              {"engram", g.to_json()},
                              {"disk_read_pct", d.consumed_bytes ? 100.0 * d.disk_bytes / d.consumed_bytes : 0.0},
                              {"disk_wait_ms", d.disk_wait_ms},
                              {"pcie_bytes", d.pcie_bytes},
                              {"pcie_gb_s", d.pcie_ms > 0 ? d.pcie_bytes / (d.pcie_ms * 1e6) : 0.0},
                              {"pcie_wall_gb_s", d.pcie_wall_ms > 0 ? d.pcie_bytes / (d.pcie_wall_ms * 1e6) : 0.0},
                              {"disk_gb_s", d.disk_busy_ms > 0 ? d.disk_read_bytes / (d.disk_busy_ms * 1e6) : 0.0},
                              {"compute_busy_fraction", wall_ms > 0 ? std::max(0.0, 1.0 - blocked / wall_ms) : 0.0},
                              {"vram_peak_mib", vram_mib},
                              {"vram_device_reported_mib", backend_->device_used_bytes() / 1048576.0},
                              {"host_peak_rss_mib", host_peak_rss_mib()}};
    };

    if (cfg_.preload) {
        store_->evict_all();  // every resident expert is read once more, so the figure is the whole fill
        double last_print = -1;
        const PreloadStats st = store_->preload([&](uint64_t done, uint64_t total) {
            const double t = now_ms();
            if (!verbose || (done < total && t - last_print < 500)) return;
            last_print = t;
            std::fprintf(stderr, "\rpreload: %.2f / %.2f GB of resident experts", done / 1e9, total / 1e9);
            if (done == total) std::fprintf(stderr, "\n");
        });
        metrics["preload"] = st.to_json();
        if (verbose)
            std::fprintf(stderr, "preload: %llu experts, %.2f GB in %.2f s (%.2f GB/s)\n", (unsigned long long)st.experts,
                         st.bytes / 1e9, st.seconds, st.seconds > 0 ? st.bytes / st.seconds / 1e9 : 0.0);
    }
    std::vector<float> logits;
    for (int64_t pass = 1; pass <= cfg_.passes; ++pass) {
        // The first pass is cold (every slot empty) unless --preload filled the resident ones.
        if (pass == 1 && !cfg_.preload) store_->evict_all();
        store_->begin_pass();
        const StoreCounters s0 = store_->counters();
        const EngramCounters g0 = engram_->counters();
        begin_timelines();
        const Busy b0 = busy_now();
        const double t0_ms = now_ms();
        runner_->prefill(prompt_, order_, cfg_.ubatch, &logits);
        const double t1_ms = now_ms();
        const double ms = t1_ms - t0_ms;
        const StoreCounters d = store_->counters() - s0;
        const EngramCounters g = engram_->counters() - g0;
        nlohmann::json pm = tier_metrics(d, g, t0_ms, t1_ms, b0);
        pm["pass"] = pass;
        pm["state"] = pass > 1 ? "warm" : cfg_.preload ? "preloaded" : "cold";
        pm["prompt_tokens"] = n_prompt;
        pm["prefill_ms"] = ms;
        pm["prefill_tok_s"] = n_prompt / (ms / 1e3);
        if (cfg_.promote) {
            const StoreCounters p0 = store_->counters();
            promote();
            const StoreCounters pd = store_->counters() - p0;
            pm["promotion"] = {{"experts_moved", pd.promotions}, {"bytes", pd.promotion_bytes}};
        }
        if (cfg_.verify_slots) pm["verified_slots"] = store_->verify_slots();
        if (verbose)
            std::fprintf(stderr,
                         "pass %lld (%s): prefill %lld tokens in %.1f ms = %.2f tok/s | disk read %.2f %% | disk wait "
                         "%.1f ms | vram %llu host %llu disk %llu fetches | pcie %.1f MB\n",
                         (long long)pass, pm["state"].get<std::string>().c_str(), (long long)n_prompt, ms, n_prompt / (ms / 1e3),
                         pm["disk_read_pct"].get<double>(), d.disk_wait_ms, (unsigned long long)d.vram_hits,
                         (unsigned long long)d.host_hits, (unsigned long long)d.disk_fetches, d.pcie_bytes / 1e6);
        metrics["passes"].push_back(pm);
    }

    store_->begin_pass();
    const StoreCounters s0 = store_->counters();
    const EngramCounters g0 = engram_->counters();
    begin_timelines();
    const Busy b0 = busy_now();
    const double host_ms0 = fwd_->host_expert_ms();
    const double t_dec_ms = now_ms();
    const DecodeStop stop{&eog_, cfg_.ignore_eos};
    generated_ = runner_->decode(logits, cfg_.gen, sampler_.get(), on_token, stop);
    const double t_dec_end_ms = now_ms();
    const double dec_ms = t_dec_end_ms - t_dec_ms;
    stopped_at_eog_ = stop.stopped_at(generated_);
    const int64_t n_generated = static_cast<int64_t>(generated_.size());
    // The first generated token comes from the prefill's logits: decode speed counts the
    // one-token steps that followed it (none follows an end-of-generation token).
    const int64_t steps = std::max<int64_t>(0, n_generated - 1);
    const StoreCounters dd = store_->counters() - s0;
    nlohmann::json dm = tier_metrics(dd, engram_->counters() - g0, t_dec_ms, t_dec_end_ms, b0);
    // Where the host-resident experts went (--decode-experts): each path's bytes and busy time.
    nlohmann::json rates = nlohmann::json::array(), rates_end = nlohmann::json::array();
    const std::vector<HostPathRates> at_start = store_->host_path_rates_at_start();
    for (const HostPathRates& r : at_start) rates.push_back(r.to_json());
    if (!at_start.empty())
        for (const HostPathRates& r : store_->host_path_rates()) rates_end.push_back(r.to_json());
    dm["host_experts"] = {{"mode", enum_name(cfg_.decode_experts)},
                          {"cpu_experts", dd.cpu_experts},
                          {"cpu_bytes", dd.cpu_bytes},
                          {"cpu_busy_ms", fwd_->host_expert_ms() - host_ms0},
                          {"cpu_gb_s", fwd_->host_expert_ms() > host_ms0 ? dd.cpu_bytes / ((fwd_->host_expert_ms() - host_ms0) * 1e6) : 0.0},
                          {"copied_experts", dd.copied_experts},
                          // split between the two: the CPU's rows in cpu_bytes, the copied part (its
                          // rows of gate and up, and of down its columns or all of it) in copied_bytes
                          {"split_experts", dd.split_experts},
                          // the host-resident (and disk-read) experts' bytes, each once: what the
                          // two paths had to move between them
                          {"host_bytes", dd.host_hit_bytes + dd.disk_bytes},
                          {"copied_bytes", dd.pcie_bytes},
                          {"copy_busy_ms", dd.pcie_ms},
                          {"cpu_share_of_host_bytes",
                           dd.cpu_bytes + dd.pcie_bytes > 0 ? static_cast<double>(dd.cpu_bytes) / (dd.cpu_bytes + dd.pcie_bytes) : 0.0},
                          {"rates_by_layer", rates},             // measured at start-up
                          {"rates_by_layer_at_end", rates_end}};  // as the run's own figures left them
    dm["tokens"] = n_generated;
    dm["requested_tokens"] = cfg_.gen;
    dm["stopped_at_eog"] = stopped_at_eog_;
    dm["eog_token"] = stopped_at_eog_ ? nlohmann::json(generated_.back()) : nlohmann::json(nullptr);
    dm["steps"] = steps;
    dm["decode_ms"] = dec_ms;
    dm["decode_tok_s"] = steps > 0 ? steps / (dec_ms / 1e3) : 0.0;
    metrics["decode"] = dm;
    metrics["generated"] = generated_;
    metrics["prompt_first_tokens"] = std::vector<int32_t>(prompt_.begin(), prompt_.begin() + std::min<int64_t>(n_prompt, 16));
    metrics["end_of_generation"] = {{"ids", eog_.ids}, {"ignored", eog_.ignored}, {"ignore_eos", cfg_.ignore_eos}};
    if (verbose)
        // The harness reads "decode: N tokens, X tok/s" (harness/progress.h): the stop comes after.
        std::fprintf(stderr, "decode: %lld tokens, %.2f tok/s%s\n", (long long)n_generated, dm["decode_tok_s"].get<double>(),
                     stopped_at_eog_ ? strf(" (stopped at end-of-generation token %d)", generated_.back()).c_str() : "");

    if (cfg_.fidelity) {
        // Extra prefills outside the measured passes: exact routing against the chosen policy.
        const std::vector<float> exact = all_logits(RoutingPolicy::kExact);
        const std::vector<float> chosen = all_logits(routing_);
        const Fidelity f = compare_logits(exact, chosen, hp.n_vocab);
        metrics["fidelity"] = {{"policy", enum_name(routing_)},
                               {"top1_agreement", f.top1_agreement},
                               {"mean_kl", f.mean_kl},
                               {"positions", f.positions}};
        if (verbose)
            std::fprintf(stderr, "fidelity of %s vs exact: top-1 agreement %.3f, mean KL %.5f over %lld positions\n",
                         enum_name(routing_), f.top1_agreement, f.mean_kl, (long long)f.positions);
    }
    metrics["host_peak_rss_mib"] = host_peak_rss_mib();
    const double cg = cgroup_memory_peak_mib();
    if (cg >= 0) metrics["cgroup_memory_peak_mib"] = cg;
    metrics["pool_allocations"] = store_->counters().pool_allocations;
    return metrics;
}

}  // namespace bg
