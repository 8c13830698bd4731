// The tiered expert store and its invariants (SPEC §3) on synthetic models.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_fixture.h"
#include "backend/backend.h"
#include "cpu/routing.h"
#include "io/reader.h"
#include "model/quant_preset.h"
#include "runtime/session.h"
#include "util/check.h"
#include "util/file_io.h"

namespace {

using bg::RoutingPolicy;

bg::RunConfig tiny_cfg() {
    bg::RunConfig c;
    c.model_path = bgtest::tiny_model();
    c.prompt_tokens = 40;
    c.prompt_seed = 3;
    c.gen = 4;
    c.slots = 8;
    c.hot = 2;
    c.transient_slots = 6;
    c.threads = 2;
    c.ubatch = 16;
    return c;
}


std::vector<int32_t> tokens_of(bg::RunConfig c) {
    bg::Session s(c);
    s.run(false);
    return s.generated();
}

const RoutingPolicy kPolicies[] = {RoutingPolicy::kExact, RoutingPolicy::kPinnedTop1, RoutingPolicy::kResidentOnly};

TEST(Routing, PoliciesArePureFunctionsOfScoresAndResidentSet) {
    // 8 experts; scores make expert 5 the exact argmax, but it is not resident.
    const float logits[8] = {0.1f, 2.0f, -1.0f, 0.5f, 1.5f, 4.0f, 0.0f, 3.0f};
    const float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const uint8_t resident[8] = {1, 0, 1, 1, 1, 0, 1, 0};
    float scratch[16], w[3];
    int32_t order[8], ids[3];
    bg::route(RoutingPolicy::kExact, logits, bias, resident, nullptr, 8, 3, bg::RouteWeighting{true, 1.5f}, ids, w, scratch, order);
    EXPECT_EQ(std::vector<int32_t>(ids, ids + 3), (std::vector<int32_t>{5, 7, 1}));
    bg::route(RoutingPolicy::kPinnedTop1, logits, bias, resident, nullptr, 8, 3, bg::RouteWeighting{true, 1.5f}, ids, w, scratch, order);
    EXPECT_EQ(std::vector<int32_t>(ids, ids + 3), (std::vector<int32_t>{5, 4, 3})) << "rank 1 exact, then resident in score order";
    float sum = 0;
    for (float x : w) sum += x;
    EXPECT_NEAR(sum, 1.5f, 1e-5);
    const float p5 = std::sqrt(std::log1p(std::exp(4.0f))), p4 = std::sqrt(std::log1p(std::exp(1.5f))),
                p3 = std::sqrt(std::log1p(std::exp(0.5f)));
    EXPECT_NEAR(w[0], 1.5f * p5 / (p5 + p4 + p3), 1e-5);
    bg::route(RoutingPolicy::kResidentOnly, logits, bias, resident, nullptr, 8, 3, bg::RouteWeighting{true, 1.5f}, ids, w, scratch, order);
    EXPECT_EQ(std::vector<int32_t>(ids, ids + 3), (std::vector<int32_t>{4, 3, 0}));
}

TEST(Store, ColdWarmPromotionAndPolicyOrderInvariance) {
    for (RoutingPolicy pol : kPolicies) {
        SCOPED_TRACE(bg::enum_name(pol));
        bg::RunConfig c = tiny_cfg();
        c.routing = pol;
        bg::Session lm(c);
        const std::vector<float> cold = lm.all_logits(pol);
        const std::vector<float> warm = lm.all_logits(pol);
        EXPECT_EQ(cold, warm) << "tier state must not change a result";
        lm.store().promote();
        EXPECT_EQ(cold, lm.all_logits(pol)) << "promotion must not change a result";

        bg::RunConfig t = c;
        t.prefill = bg::PrefillOrder::kTokenMajor;
        t.ubatch = 3;
        bg::Session tm(t);
        EXPECT_LT(bgtest::max_rel_diff(cold, tm.all_logits(pol)), 1e-4);
    }
}

TEST(Store, SameTokensWhateverTheIoAndBudgets) {
    bg::RunConfig base = tiny_cfg();
    base.routing = bg::RoutingPolicy::kPinnedTop1;
    base.passes = 2;
    base.promote = true;
    const std::vector<int32_t> want = tokens_of(base);
    ASSERT_EQ(want.size(), 4u);
    {
        bg::RunConfig c = base;
        c.io = bg::io::IoEngine::kPread;
        EXPECT_EQ(tokens_of(c), want) << "--io pread";
    }
    for (uint32_t qd : {1u, 64u}) {
        bg::RunConfig c = base;
        c.queue_depth = qd;
        c.read_size = 4096;
        EXPECT_EQ(tokens_of(c), want) << "queue depth " << qd;
    }
    {
        bg::RunConfig c = base;
        c.hot = 0;
        c.transient_slots = 1;
        EXPECT_EQ(tokens_of(c), want) << "no hot slots, one transient slot";
    }
    {
        bg::RunConfig c = base;
        c.hot = 8;
        c.promote = false;
        EXPECT_EQ(tokens_of(c), want) << "everything resident in VRAM, no promotion";
    }
    {
        bg::RunConfig c = base;
        c.faults.short_read_every = 2;
        c.faults.eintr_every = 3;
        c.faults.eagain_every = 7;
        EXPECT_EQ(tokens_of(c), want) << "short reads, EINTR and EAGAIN are retried";
    }
}

// Records the distinct (layer, expert) pairs routing used.
class UsedExperts final : public bg::RoutingObserver {
public:
    void on_route(int64_t layer, int64_t, const int32_t* ids, const float*, int k) override {
        for (int j = 0; j < k; ++j) used.insert({layer, ids[j]});
    }
    std::set<std::pair<int64_t, int32_t>> used;
};

TEST(Store, ResidentOnlyReadsExactlyTheResidentExpertsColdAndNothingWarm) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kResidentOnly;
    c.passes = 2;
    c.gen = 1;
    bg::Session s(c);
    UsedExperts obs;
    s.forward().set_observer(&obs);
    const nlohmann::json m = s.run(false);
    // Independently: the bytes of every distinct expert routing used in the pass.
    uint64_t want = 0;
    for (const auto& [l, e] : obs.used) {
        ASSERT_TRUE(s.plan().is_resident(l, e));
        want += s.model().expert_bytes_each(l);
    }
    const auto& cold = m["passes"][0]["experts"];
    const auto& warm = m["passes"][1]["experts"];
    EXPECT_EQ(cold["disk_bytes"].get<uint64_t>(), want);
    EXPECT_EQ(cold["disk_fetches"].get<uint64_t>(), obs.used.size());
    EXPECT_GE(cold["disk_read_bytes"].get<uint64_t>(), want);
    EXPECT_EQ(warm["disk_bytes"].get<uint64_t>(), 0u);
    EXPECT_EQ(warm["disk_read_bytes"].get<uint64_t>(), 0u) << "a fully resident warm pass reads 0 bytes";
    EXPECT_EQ(warm["consumed_bytes"].get<uint64_t>(), want) << "layer-major: each used expert consumed once per layer";
    EXPECT_DOUBLE_EQ(m["passes"][1]["disk_read_pct"].get<double>(), 0.0);
    EXPECT_EQ(warm["vram_hits"].get<uint64_t>() + warm["host_hits"].get<uint64_t>(), obs.used.size());
}

TEST(Store, NoExpertReadTwiceInALayerPassAndPoolsOnlyAtStartUp) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kExact;
    c.passes = 2;
    c.transient_slots = 2;  // forces staging to recycle many times
    bg::Session s(c);
    const uint64_t allocs = s.store().counters().pool_allocations;
    const nlohmann::json m = s.run(false);
    for (const auto& p : m["passes"]) {
        EXPECT_EQ(p["experts"]["max_reads_one_expert_pass"].get<uint64_t>(), 1u);
        EXPECT_GT(p["experts"]["disk_fetches"].get<uint64_t>(), 0u) << "exact routing leaves the resident set";
    }
    EXPECT_EQ(s.store().counters().pool_allocations, allocs);
    EXPECT_EQ(allocs, 2u);
}

// The disk timeline the overlap figure is laid against holds every expert read interval of the
// pass (its total is the store's disk_busy_ms) and every interval with an Engram read in flight
// (its total is the Engram busy_ms, which covers each fetch's wait for its reads); without a GPU
// the GPU-side figures are null, not zero.
TEST(Store, OverlapTimelineCoversTheDiskReadsOfThePass) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kExact;
    c.passes = 2;
    bg::Session s(c);
    const nlohmann::json m = s.run(false);
    for (const auto& p : m["passes"]) {
        const nlohmann::json& o = p["overlap"];
        const double expert_busy = p["experts"]["disk_busy_ms"].get<double>();
        const double engram_ms = p["engram"]["busy_ms"].get<double>();
        ASSERT_GT(expert_busy, 0.0) << "exact routing reads experts from disk";
        ASSERT_GT(engram_ms, 0.0);
        EXPECT_GE(engram_ms, 0.5 * p["engram"]["disk_ms"].get<double>() - 0.05) << "a fetch waits only while its reads are in flight, and for its copy";
        // Union against sum, in floating point: 1 % + 50 us of slack.
        const double slack = 0.01 * (expert_busy + engram_ms) + 0.05;
        EXPECT_GE(o["disk_busy_ms"].get<double>(), expert_busy - slack);
        EXPECT_GE(o["disk_busy_ms"].get<double>(), engram_ms - slack);
        EXPECT_LE(o["disk_busy_ms"].get<double>(), expert_busy + engram_ms + slack);
        EXPECT_NEAR(o["disk_busy_ms"].get<double>() + o["disk_idle_ms"].get<double>(), p["prefill_ms"].get<double>(),
                    0.05 * p["prefill_ms"].get<double>() + 0.5);
        EXPECT_TRUE(o["gpu_busy_while_disk_idle_fraction"].is_null());
        EXPECT_TRUE(p["gpu_busy_while_disk_idle_fraction"].is_null());
    }
    EXPECT_EQ(s.store().disk_timeline().intervals().empty(), false);
}

TEST(Store, EverySlotMatchesTheFileAfterPassesAndPromotion) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kPinnedTop1;
    c.passes = 3;
    c.promote = true;
    c.verify_slots = true;
    bg::Session s(c);
    const nlohmann::json m = s.run(false);
    for (const auto& p : m["passes"]) EXPECT_GT(p["verified_slots"].get<uint64_t>(), 0u);
    EXPECT_GT(m["passes"][0]["promotion"]["experts_moved"].get<uint64_t>(), 0u);
}

TEST(Store, PromotionPutsTheMostUsedResidentExpertsInVram) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kResidentOnly;
    c.hot = 3;
    bg::Session s(c);
    UsedExperts obs;
    s.forward().set_observer(&obs);
    s.store().begin_pass();
    s.all_logits(RoutingPolicy::kResidentOnly);
    s.store().promote();
    // Count tokens per resident expert of layer 0 independently and compare with the hot set.
    bg::Session ref(c);
    class Counter final : public bg::RoutingObserver {
    public:
        std::vector<uint64_t> n = std::vector<uint64_t>(64, 0);
        void on_route(int64_t layer, int64_t, const int32_t* ids, const float*, int k) override {
            if (layer == 0)
                for (int j = 0; j < k; ++j) ++n[ids[j]];
        }
    } cnt;
    ref.forward().set_observer(&cnt);
    ref.all_logits(RoutingPolicy::kResidentOnly);
    std::vector<int32_t> res = s.plan().resident[0];
    std::stable_sort(res.begin(), res.end(), [&](int32_t a, int32_t b) { return cnt.n[a] != cnt.n[b] ? cnt.n[a] > cnt.n[b] : a < b; });
    std::vector<int32_t> want(res.begin(), res.begin() + 3);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(s.store().hot_experts(0), want);
}

// Hot-pool routes among the experts in VRAM at the time (SPEC: it depends on the tier): with
// H >= k, ranks 2..k are hot, also after promotion moved other experts into VRAM; rank 1 is
// resident; a warm pass reads nothing from disk.
class HotCheck final : public bg::RoutingObserver {
public:
    explicit HotCheck(bg::Session& s) : s_(s) {}
    int64_t tokens = 0, moved = 0;  // routed tokens; of them, routed with a hot set promotion changed
    void on_route(int64_t layer, int64_t pos, const int32_t* ids, const float*, int k) override {
        const std::vector<int32_t> hot = s_.store().hot_experts(layer);
        std::vector<int32_t> planned = s_.plan().hot_ids[layer];
        std::sort(planned.begin(), planned.end());
        ++tokens;
        moved += hot != planned;
        EXPECT_TRUE(s_.plan().is_resident(layer, ids[0])) << "layer " << layer << " pos " << pos;
        for (int j = 1; j < k; ++j)
            EXPECT_TRUE(std::binary_search(hot.begin(), hot.end(), ids[j])) << "layer " << layer << " pos " << pos << " rank " << j + 1;
    }

private:
    bg::Session& s_;
};

bg::RunConfig hot_pool_cfg() {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kHotPool;
    c.slots = 12;
    c.hot = 7;  // the tiny model routes 6 per token
    return c;
}

TEST(Store, HotPoolRoutesAmongTheExpertsInVramNow) {
    bg::RunConfig c = hot_pool_cfg();
    bg::Session s(c);
    // A pass routed by resident-only fills the usage promotion reads, so promotion moves other
    // experts into VRAM than hot-pool would keep there (its hot experts serve every token).
    s.store().begin_pass();
    s.all_logits(RoutingPolicy::kResidentOnly);
    s.promote();
    HotCheck check(s);
    s.forward().set_observer(&check);
    s.all_logits(RoutingPolicy::kHotPool);
    EXPECT_GT(check.tokens, 0);
    EXPECT_EQ(check.moved, check.tokens) << "promotion changed the hot sets, and routing followed them";

    c.passes = 3;
    c.promote = true;
    bg::Session run(c);
    HotCheck run_check(run);
    run.forward().set_observer(&run_check);
    const nlohmann::json m = run.run(false);
    EXPECT_GT(run_check.tokens, 0);
    EXPECT_EQ(m["passes"][2]["experts"]["disk_fetches"], 0) << "every routed expert is resident";
}

TEST(Store, InjectedEioIsAClearErrorNotWrongWeights) {
    bg::RunConfig c = tiny_cfg();
    c.faults.eio_at = 5;
    try {
        bg::Session s(c);
        s.run(false);
        FAIL() << "an EIO must stop the run";
    } catch (const bg::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
    }
}

TEST(Store, BudgetsTooSmallSayWhatWouldFit) {
    bg::RunConfig c = tiny_cfg();
    c.vram_budget_mib = 1;
    c.hot = 8;
    try {
        bg::Session s(c);
        FAIL() << "the budget cannot hold the hot slots";
    } catch (const bg::Error& e) {
        // Below the fixed part no --hot fits: the message names the budget that would.
        EXPECT_NE(std::string(e.what()).find("it would need --vram-budget"), std::string::npos) << e.what();
    }
    c = tiny_cfg();
    c.host_budget_mib = 1;
    try {
        bg::Session s(c);
        FAIL() << "the host budget cannot hold the dense weights";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("host budget"), std::string::npos) << e.what();
    }
}

TEST(Residency, PlanRoundTripsAndBadPlansAreRejected) {
    auto m = bg::dsv41::Model::open(bgtest::tiny_model());
    const bg::ResidencyPlan p = bg::plan_from_bias(*m, 8, 2);
    const float* bias = m->layer(3).exp_probs_b;
    for (int32_t e : p.resident[3])
        for (int32_t o = 0; o < 64; ++o)
            if (!p.is_resident(3, o)) {
                EXPECT_GE(bias[e], bias[o]);
            }
    const std::string path = bgtest::test_models_dir() + "/plan.json";
    bg::save_plan(p, path);
    const bg::ResidencyPlan q = bg::load_plan(path, *m);
    EXPECT_EQ(q.resident, p.resident);
    EXPECT_EQ(q.hot_ids, p.hot_ids);

    nlohmann::json j = p.to_json();
    j["layers"][2]["hot"][0] = 63 - 0;  // very likely not resident; make sure
    int32_t not_res = 0;
    while (p.is_resident(2, not_res)) ++not_res;
    j["layers"][2]["hot"][0] = not_res;
    bg::write_file_atomic(path, j.dump());
    EXPECT_THROW(bg::load_plan(path, *m), bg::Error);
    j = p.to_json();
    j["layers"][1]["resident"][1] = j["layers"][1]["resident"][0];
    bg::write_file_atomic(path, j.dump());
    EXPECT_THROW(bg::load_plan(path, *m), bg::Error);
    EXPECT_THROW(bg::plan_from_bias(*m, 4, 2), bg::Error) << "fewer slots than experts per token";
}

// Speculative copies (layer-major, resident-only): a warm pass copies each layer's host-resident
// experts before routing; results are those of the run without them, every byte over PCIe is a
// host hit or a counted unused copy, and neither the cold pass (nothing in host slots yet) nor
// decode (k slots per layer, under the threshold) speculates.
TEST(Store, SpeculativeCopiesChangeNoResultAndAreCounted) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kResidentOnly;
    c.passes = 2;
    c.gen = 3;
    c.transient_slots = 3;  // fewer slots than host-resident experts: speculation waits for releases too
    c.speculative_copies = false;
    bg::Session off(c);
    const nlohmann::json moff = off.run(false);
    c.speculative_copies = true;
    bg::Session on(c);
    const nlohmann::json mon = on.run(false);
    EXPECT_EQ(on.generated(), off.generated());
    EXPECT_EQ(on.all_logits(bg::RoutingPolicy::kResidentOnly), off.all_logits(bg::RoutingPolicy::kResidentOnly));

    const int64_t L = on.model().hp().n_layer;
    const uint64_t bytes = on.model().expert_bytes_each(0);
    for (int64_t l = 1; l < L; ++l) ASSERT_EQ(on.model().expert_bytes_each(l), bytes);
    const auto& cold = mon["passes"][0]["experts"];
    const auto& warm = mon["passes"][1]["experts"];
    EXPECT_EQ(cold["speculative_copies"].get<uint64_t>(), 0u) << "cold: the host slots are empty before routing";
    // Warm: each host-resident expert the cold pass loaded, once per layer.
    EXPECT_GT(warm["speculative_copies"].get<uint64_t>(), 0u);
    EXPECT_LE(warm["speculative_copies"].get<uint64_t>(), static_cast<uint64_t>(L * (c.slots - c.hot)));
    EXPECT_EQ(warm["pcie_bytes"].get<uint64_t>(),
              warm["host_hit_bytes"].get<uint64_t>() + warm["speculative_unused"].get<uint64_t>() * bytes);
    EXPECT_LE(warm["speculative_unused"].get<uint64_t>(), warm["speculative_copies"].get<uint64_t>());
    EXPECT_EQ(mon["decode"]["experts"]["speculative_copies"].get<uint64_t>(), 0u) << "decode routes k slots per layer";
    // What routing used, and so what was consumed, does not change.
    const auto& warm_off = moff["passes"][1]["experts"];
    for (const char* key : {"consumed_bytes", "vram_hits", "host_hits", "host_hit_bytes", "disk_bytes"})
        EXPECT_EQ(warm[key], warm_off[key]) << key;
    EXPECT_EQ(warm_off["speculative_copies"].get<uint64_t>(), 0u);
}

// Engram read-ahead (EngramStore::read_ahead, offered by the forward once a pass's tokens are
// embedded) changes no result and reads the same pages; in a run that follows its plan, every
// row a fetch uses was read ahead and none is dropped, layer-major, token-major, at decode, and
// with a ring too small for a pass's rows.
TEST(Store, EngramReadAheadChangesNoResultAndEveryRowWasReadAhead) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kResidentOnly;
    c.passes = 2;
    c.gen = 4;
    c.engram_read_ahead_kib = 0;
    bg::Session off(c);
    const nlohmann::json moff = off.run(false);
    ASSERT_GT(moff["passes"][0]["engram"]["rows"].get<uint64_t>(), 0u) << "the tiny model has Engram layers";
    auto check = [&](bg::RunConfig rc, bool all_ahead, const char* what) {
        bg::Session s(rc);
        const nlohmann::json m = s.run(false);
        EXPECT_EQ(s.generated(), off.generated()) << what;
        EXPECT_EQ(s.all_logits(c.routing), off.all_logits(c.routing)) << what;
        std::vector<nlohmann::json> parts(m["passes"].begin(), m["passes"].end());
        parts.push_back(m["decode"]);
        std::vector<nlohmann::json> parts_off(moff["passes"].begin(), moff["passes"].end());
        parts_off.push_back(moff["decode"]);
        for (size_t i = 0; i < parts.size(); ++i) {
            const nlohmann::json& g = parts[i]["engram"];
            const nlohmann::json& g_off = parts_off[i]["engram"];
            EXPECT_EQ(g["rows"], g_off["rows"]) << what << ", part " << i;
            EXPECT_EQ(g["row_bytes"], g_off["row_bytes"]) << what << ", part " << i;
            EXPECT_EQ(g["disk_read_bytes"], g_off["disk_read_bytes"]) << what << ", part " << i;
            EXPECT_EQ(g["rows_discarded"].get<uint64_t>(), 0u) << what << ", part " << i;
            if (all_ahead)
                EXPECT_EQ(g["rows_read_ahead"], g["rows"]) << what << ", part " << i;
            else
                EXPECT_GT(g["rows_read_ahead"].get<uint64_t>(), 0u) << what << ", part " << i;
            EXPECT_EQ(g_off["rows_read_ahead"].get<uint64_t>(), 0u) << what << ", part " << i;
        }
    };
    c.engram_read_ahead_kib = 2048;
    check(c, true, "layer-major");
    {
        bg::RunConfig t = c;
        t.prefill = bg::PrefillOrder::kTokenMajor;
        check(t, true, "token-major");
    }
    {
        bg::RunConfig t = c;
        t.engram_read_ahead_kib = 1;  // fewer rows than one unit's: offered again after each fetch
        check(t, false, "a ring smaller than a unit's rows");
    }
}

TEST(Store, CiScaleWarmPassReadsLessThanCold) {
    bg::RunConfig c;
    c.model_path = bgtest::ci_model();
    c.prompt_tokens = 64;
    c.passes = 2;
    c.gen = 2;
    c.routing = bg::RoutingPolicy::kPinnedTop1;
    c.promote = true;
    bg::Session s(c);
    const nlohmann::json m = s.run(false);
    const uint64_t cold = m["passes"][0]["experts"]["disk_bytes"].get<uint64_t>();
    const uint64_t warm = m["passes"][1]["experts"]["disk_bytes"].get<uint64_t>();
    EXPECT_GT(cold, 0u);
    EXPECT_LT(warm, cold);
    EXPECT_GT(m["passes"][1]["experts"]["vram_hits"].get<uint64_t>(), 0u);
    EXPECT_GT(m["passes"][0]["engram"]["disk_read_bytes"].get<uint64_t>(), 0u);
}

}  // namespace

namespace {

TEST(Store, LruKeepsNonResidentExpertsWithoutChangingResults) {
    bg::RunConfig c = tiny_cfg();
    c.routing = bg::RoutingPolicy::kExact;
    c.passes = 2;
    const std::vector<int32_t> want = tokens_of(c);
    c.lru_slots = 6 * 64;  // room for every expert of the tiny model
    bg::Session s(c);
    const nlohmann::json m = s.run(false);
    EXPECT_EQ(s.generated(), want);
    EXPECT_GT(m["passes"][0]["experts"]["disk_bytes"].get<uint64_t>(), 0u);
    EXPECT_EQ(m["passes"][1]["experts"]["disk_bytes"].get<uint64_t>(), 0u) << "everything cached after the cold pass";
    c.lru_slots = 3;  // constant eviction
    EXPECT_EQ(tokens_of(c), want);
}

}  // namespace

namespace {

// The store's hand-outs to a decode step (host_compute): next_ready_batch gives every expert
// present at once, those in VRAM first, then the host-resident ones the split gave the CPU (as
// host views); release_computed moves the layer's CPU rate toward the time the caller measured,
// by kRateWeight, and only for that layer.
TEST(Store, ReadyExpertsComeTogetherAndTheCpuRateFollowsTheCallersTime) {
    bg::RunConfig c = tiny_cfg();
    bg::Session s(c);
    bg::TieredExpertStore& st = s.store();
    st.preload();
    const bg::ResidencyPlan& plan = s.plan();
    const int64_t L = plan.n_layer(), layer = L - 1;
    std::vector<bg::HostPathRates> rates(static_cast<size_t>(L));
    for (auto& r : rates) r.cpu_ms_one = 1.0, r.copy_ms = 1.0, r.gpu_ms = 0.1;
    st.set_host_compute(bg::DecodeExperts::kCpu, rates);

    // Two hot experts and every host-resident one, one token each, ascending ids.
    std::set<int32_t> hot(plan.hot_ids[layer].begin(), plan.hot_ids[layer].end());
    std::set<int32_t> want(hot);
    for (int32_t e : plan.resident[layer]) want.insert(e);
    ASSERT_EQ(hot.size(), 2u);
    ASSERT_GT(want.size(), hot.size()) << "no host-resident expert: no test";
    const std::vector<int32_t> experts(want.begin(), want.end());
    const std::vector<int32_t> tokens(experts.size(), 1);
    const int64_t n = static_cast<int64_t>(experts.size());

    st.begin_pass();
    st.begin_layer(layer, experts.data(), tokens.data(), n, true);
    std::vector<int32_t> got(experts.size());
    std::vector<bg::ExpertView> views(experts.size());
    const int64_t n_got = st.next_ready_batch(got.data(), views.data(), n);
    ASSERT_EQ(n_got, n) << "every expert was present at once";
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(views[i].on_host, hot.count(got[i]) == 0) << "expert " << got[i];
        if (i > 0 && views[i - 1].on_host) {
            EXPECT_TRUE(views[i].on_host) << "VRAM experts first";
        }
    }
    std::vector<int32_t> sorted(got.begin(), got.end());
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, experts);
    // The CPU's: 5 ms, then 3 ms, against 1 ms at start.
    double want_rate = 1.0;
    int64_t on_host = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (!views[i].on_host) {
            st.release(got[i]);
            continue;
        }
        const double took = on_host++ % 2 == 0 ? 5.0 : 3.0;
        st.release_computed(got[i], took);
        want_rate += bg::TieredExpertStore::kRateWeight * (took - want_rate);
    }
    st.end_layer();
    const std::vector<bg::HostPathRates> after = st.host_path_rates();
    EXPECT_NEAR(after[layer].cpu_ms_one, want_rate, 1e-12);
    for (int64_t l = 0; l < layer; ++l) EXPECT_EQ(after[l].cpu_ms_one, 1.0) << "layer " << l;
}

// expect_layer keeps the streamer spinning for its layer (here a minute): it still copies every
// expert the layer names, once, and a store destroyed meanwhile stops at once rather than when
// the spin would have ended.
TEST(Store, AStreamerKeptAwakeCopiesAsAsleepAndStopsAtOnce) {
    bg::RunConfig c = tiny_cfg();
    auto s = std::make_unique<bg::Session>(c);
    bg::TieredExpertStore& st = s->store();
    st.preload();
    const bg::ResidencyPlan& plan = s->plan();
    const int64_t layer = plan.n_layer() - 1;
    std::set<int32_t> host(plan.resident[layer].begin(), plan.resident[layer].end());
    for (int32_t e : plan.hot_ids[layer]) host.erase(e);
    ASSERT_FALSE(host.empty()) << "no host-resident expert: no copy to test";
    const std::vector<int32_t> experts(host.begin(), host.end());
    const std::vector<int32_t> tokens(experts.size(), 1);
    const int64_t n = static_cast<int64_t>(experts.size());
    const bg::StoreCounters before = st.counters();
    st.begin_pass();
    st.expect_layer(60'000'000);
    // Spinning until the layer begins.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(st.begin_layer(layer, experts.data(), tokens.data(), n, false), n);
    std::set<int32_t> got;
    for (int64_t i = 0; i < n; ++i) {
        bg::ExpertView v;
        const int32_t e = st.next_ready(&v);
        EXPECT_FALSE(v.on_host);
        EXPECT_TRUE(got.insert(e).second) << "expert " << e << " handed out twice";
        st.release(e);
    }
    st.end_layer();
    EXPECT_EQ(got, host);
    EXPECT_EQ(st.counters().copied_experts - before.copied_experts, static_cast<uint64_t>(n));
    st.expect_layer(60'000'000);
    const auto t0 = std::chrono::steady_clock::now();
    s.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "the spinning streamer held up the stop";
}

// A decode layer for the split tests: the MXFP4 tiny-blocks model (256 hidden rows, steps of 32),
// its last layer's two hot and six host-resident experts (ascending ids, one token each), the
// store preloaded and told rates by which a split is the fastest choice: six host experts at 1 ms
// on the CPU, 1.5 ms a copy, a part's copy its rows' share of one; whole, four on the CPU end at
// 4 ms; three and 5/8 of a fourth at max(3.625, 2 x 1.5 + 3/8 x 1.5) = 3.625.
struct SplitLayer {
    std::unique_ptr<bg::Session> session;
    int64_t layer = 0;
    std::vector<int32_t> experts, tokens, host_ids;  // host_ids: the host-resident ones, ascending
    explicit SplitLayer(bg::RunConfig c) {
        c.model_path = bgtest::preset_model(bg::QuantPreset::kMxfp4Moe);
        session = std::make_unique<bg::Session>(c);
        bg::TieredExpertStore& st = session->store();
        st.preload();
        const bg::ResidencyPlan& plan = session->plan();
        layer = plan.n_layer() - 1;
        std::vector<bg::HostPathRates> rates(static_cast<size_t>(plan.n_layer()));
        for (auto& r : rates) r.cpu_ms_one = r.cpu_ms_per_token = 1.0, r.copy_ms = 1.5, r.gpu_ms = 0, r.part_copy_fixed = 0, r.part_copy_slope = 1;
        st.set_host_compute(bg::DecodeExperts::kHybrid, rates);
        const std::set<int32_t> hot(plan.hot_ids[layer].begin(), plan.hot_ids[layer].end());
        std::set<int32_t> want(hot);
        for (int32_t e : plan.resident[layer]) want.insert(e);
        experts.assign(want.begin(), want.end());
        tokens.assign(experts.size(), 1);
        for (int32_t e : experts)
            if (!hot.count(e)) host_ids.push_back(e);
    }
};

// One expert split between the paths (split_host_experts, given rates that make a split the
// fastest choice): begin_layer announces one hand-out more; the split expert comes twice, its
// first cpu_rows hidden rows as a host view into its host slot (with the others the CPU takes
// whole), the rest as a device view into a transient slot holding those rows of gate and up and
// those columns of down as the file has them; cpu_bytes counts the CPU's rows, pcie_bytes what
// was copied (the part's rows of gate and up, all of down), and the CPU part's time teaches the
// CPU rate as its share of a whole expert.
TEST(Store, AnExpertSplitBetweenThePathsComesTwiceWithItsOwnRowsAndBytes) {
    for (const bg::SplitCopy form : {bg::SplitCopy::kColumns, bg::SplitCopy::kWholeDown}) {
        SCOPED_TRACE(bg::enum_name(form));
        bg::RunConfig c = tiny_cfg();
        c.split_copy = form;
        SplitLayer sl(c);
        bg::Session& s = *sl.session;
        bg::TieredExpertStore& st = s.store();
        const int64_t layer = sl.layer;
        const std::vector<int32_t>&experts = sl.experts, &tokens = sl.tokens, &host_ids = sl.host_ids;
        const int64_t n = static_cast<int64_t>(experts.size());
        ASSERT_EQ(host_ids.size(), 6u) << "six host-resident experts";
        const int32_t split_id = host_ids[3];  // three whole to the CPU, by position; the fourth split

        const bg::StoreCounters before = st.counters();
        st.begin_pass();
        ASSERT_EQ(st.begin_layer(layer, experts.data(), tokens.data(), n, true), n + 1);
        std::vector<int32_t> got(static_cast<size_t>(n + 1));
        std::vector<bg::ExpertView> views(static_cast<size_t>(n + 1));
        for (int64_t k = 0; k < n + 1;) k += st.next_ready_batch(got.data() + k, views.data() + k, n + 1 - k);

        bg::ExpertMats slot;  // the split expert's matrices in its host slot, from a whole host view's layout
        const bg::ExpertRanges r = s.model().expert_ranges(layer, split_id);
        std::vector<uint8_t> file(r.total());
        bg::pread_exact(s.model().fd(r.gate.file), file.data(), r.gate.bytes, r.gate.offset, "test");
        bg::pread_exact(s.model().fd(r.up.file), file.data() + r.gate.bytes, r.up.bytes, r.up.offset, "test");
        bg::pread_exact(s.model().fd(r.down.file), file.data() + r.gate.bytes + r.up.bytes, r.down.bytes, r.down.offset, "test");
        s.model().expert_views(layer, file.data(), &slot.gate, &slot.up, &slot.down);
        const int64_t F = slot.gate.rows, E = slot.gate.cols, f = 5 * 32;
        int64_t parts = 0, cpu_whole = 0;
        for (int64_t i = 0; i <= n; ++i) {
            const bg::ExpertView& v = views[static_cast<size_t>(i)];
            if (got[static_cast<size_t>(i)] != split_id) {
                EXPECT_FALSE(v.part);
                EXPECT_EQ(v.gate.rows, F);
                cpu_whole += v.on_host ? 1 : 0;
                continue;
            }
            ++parts;
            EXPECT_TRUE(v.part);
            const bg::ExpertMats want_part = slot.hidden_rows(v.on_host ? 0 : f, v.on_host ? f : F - f);
            EXPECT_EQ(v.gate.rows, want_part.gate.rows);
            EXPECT_EQ(v.up.rows, want_part.up.rows);
            EXPECT_EQ(v.down.cols, want_part.down.cols);
            EXPECT_EQ(v.down.rows, E);
            // The part's bytes, where the views point, are the file's: rows of gate and up, then
            // the columns of each of down's rows.
            for (const auto& [have, want_m] : {std::pair{v.gate, want_part.gate}, std::pair{v.up, want_part.up}})
                EXPECT_EQ(0, std::memcmp(have.data, want_m.data, have.rows * have.row_stride));
            const uint64_t width = bg::row_bytes(v.down.type, v.down.cols);
            for (int64_t row = 0; row < E; ++row)
                ASSERT_EQ(0, std::memcmp(v.down.data + row * v.down.row_stride, want_part.down.data + row * want_part.down.row_stride,
                                         width))
                    << (v.on_host ? "host" : "device") << " part, down row " << row;
        }
        EXPECT_EQ(parts, 2);
        EXPECT_EQ(cpu_whole, 3);
        for (int64_t i = 0; i <= n; ++i) {
            const bg::ExpertView& v = views[static_cast<size_t>(i)];
            if (v.on_host) st.release_computed(got[static_cast<size_t>(i)], v.part ? 0.5 : 1.0);
            else st.release(got[static_cast<size_t>(i)]);
        }
        st.end_layer();

        const bg::StoreCounters d = st.counters() - before;
        const uint64_t each = s.model().expert_bytes_each(layer);
        const uint64_t cpu_part = static_cast<uint64_t>(f) * (slot.gate.row_stride + slot.up.row_stride) +
                                  static_cast<uint64_t>(E) * bg::row_bytes(slot.down.type, f);
        const uint64_t cpu_down = static_cast<uint64_t>(E) * bg::row_bytes(slot.down.type, f);  // its columns of down
        const uint64_t copy_part = static_cast<uint64_t>(F - f) * (slot.gate.row_stride + slot.up.row_stride) +
                                   static_cast<uint64_t>(E) * bg::row_bytes(slot.down.type, F - f) +
                                   (form == bg::SplitCopy::kWholeDown ? cpu_down : 0);
        EXPECT_EQ(cpu_part + copy_part - (form == bg::SplitCopy::kWholeDown ? cpu_down : 0), each)
            << "with all of down copied, the CPU's columns of it are the only bytes both paths read; else none";
        EXPECT_EQ(d.split_experts, 1u);
        EXPECT_EQ(d.cpu_experts, 3u);
        EXPECT_EQ(d.copied_experts, 2u);
        EXPECT_EQ(d.cpu_bytes, 3 * each + cpu_part);
        EXPECT_EQ(d.pcie_bytes, 2 * each + copy_part);
        // The part's 0.5 ms stands for 0.5 x 256 / 160 = 0.8 ms a whole expert; the whole ones' 1 ms
        // each leave the rate at 1 ms, so the last release decides it whichever order they came in.
        const double got_rate = st.host_path_rates()[layer].cpu_ms_one;
        EXPECT_LT(got_rate, 1.0);
        EXPECT_GE(got_rate, 1.0 + bg::TieredExpertStore::kRateWeight * (0.8 - 1.0) - 1e-12);
    }
}

// --split-experts off: the same rates split nothing; four go to the CPU whole.
TEST(Store, SplitExpertsOffKeepsExpertsWhole) {
    bg::RunConfig c = tiny_cfg();
    c.split_experts = false;
    SplitLayer sl(c);
    bg::TieredExpertStore& st = sl.session->store();
    const int64_t layer = sl.layer;
    const std::vector<int32_t>&experts = sl.experts, &tokens = sl.tokens;
    const int64_t n = static_cast<int64_t>(experts.size());
    const bg::StoreCounters before = st.counters();
    st.begin_pass();
    ASSERT_EQ(st.begin_layer(layer, experts.data(), tokens.data(), n, true), n);
    std::vector<int32_t> got(static_cast<size_t>(n));
    std::vector<bg::ExpertView> views(static_cast<size_t>(n));
    for (int64_t k = 0; k < n;) k += st.next_ready_batch(got.data() + k, views.data() + k, n - k);
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_FALSE(views[static_cast<size_t>(i)].part);
        if (views[static_cast<size_t>(i)].on_host) st.release_computed(got[static_cast<size_t>(i)], 1.0);
        else st.release(got[static_cast<size_t>(i)]);
    }
    st.end_layer();
    const bg::StoreCounters d = st.counters() - before;
    EXPECT_EQ(d.split_experts, 0u);
    EXPECT_EQ(d.cpu_experts, 4u);
    EXPECT_EQ(d.copied_experts, 2u);
}


// The CPU arena with copies that land only when the test lets them: copy_async copies the bytes
// at once, but wait_copy (the streamer's) blocks while the gate is shut, and each ticket has an
// event, as on a GPU.
class GatedCopyBackend final : public bg::Backend {
public:
    const char* name() const override { return "gated-cpu"; }
    uint8_t* alloc_device(uint64_t bytes) override { return base_->alloc_device(bytes); }
    void free_device(uint8_t* p) override { base_->free_device(p); }
    uint8_t* alloc_host(uint64_t bytes) override { return base_->alloc_host(bytes); }
    void free_host(uint8_t* p) override { base_->free_host(p); }
    void copy(uint8_t* dst, const uint8_t* src, uint64_t bytes, bg::CopyKind kind) override { base_->copy(dst, src, bytes, kind); }
    uint64_t copy_async(uint8_t* dst, const uint8_t* src, uint64_t bytes, bg::CopyKind kind) override {
        base_->copy(dst, src, bytes, kind);
        note_thread();
        return ++queued_;
    }
    uint64_t copy_rows_async(uint8_t* dst, uint64_t dst_pitch, const uint8_t* src, uint64_t src_pitch, uint64_t width,
                             uint64_t rows, bg::CopyKind kind) override {
        base_->copy_rows_async(dst, dst_pitch, src, src_pitch, width, rows, kind);
        note_thread();
        return ++queued_;
    }
    void wait_copy(uint64_t ticket) override {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return open_; });
        EXPECT_LE(ticket, queued_.load());
    }
    bg::DeviceEvent copy_event(uint64_t ticket) const override { return {reinterpret_cast<const void*>(ticket)}; }
    uint64_t device_used_bytes() const override { return 0; }
    bool device_is_host_addressable() const override { return true; }
    void set_open(bool open) {
        std::lock_guard<std::mutex> g(mu_);
        open_ = open;
        cv_.notify_all();
    }
    uint64_t queued() const { return queued_.load(); }
    // The threads that queued copies since the last call.
    std::vector<std::thread::id> take_copy_threads() {
        std::lock_guard<std::mutex> g(mu_);
        return std::exchange(copy_threads_, {});
    }

private:
    void note_thread() {
        std::lock_guard<std::mutex> g(mu_);
        copy_threads_.push_back(std::this_thread::get_id());
    }
    std::unique_ptr<bg::Backend> base_ = bg::make_cpu_backend();
    std::atomic<uint64_t> queued_{0};
    std::mutex mu_;
    std::condition_variable cv_;
    bool open_ = true;
    std::vector<std::thread::id> copy_threads_;
};

// The tiny model's store over a GatedCopyBackend, preloaded: every resident expert in its slot.
struct GatedStore {
    bg::RunConfig c = tiny_cfg();
    bg::Session s{c};
    GatedCopyBackend backend;
    std::unique_ptr<bg::io::Reader> reader;
    std::unique_ptr<bg::TieredExpertStore> st;
    GatedStore() {
        bg::io::IoConfig io;
        io.engine = c.io;
        reader = bg::io::Reader::open(s.model().shard_paths(), io);
        bg::StoreConfig sc;
        sc.transient_slots = c.transient_slots;
        sc.vram_budget_bytes = sc.host_budget_bytes = 1ull << 30;
        st = std::make_unique<bg::TieredExpertStore>(s.model(), backend, *reader, s.plan(), sc);
        st->preload();
    }
};

// Copies in flight (a backend with copy events): the experts present come first, together (also
// without waiting, ready_batch_now, which then gives none while the copies are held); then
// each expert whose copy is queued comes alone, in copy order, with its copy's event, before the
// copy has landed; it may be released before it lands, and end_layer returns only once the
// streamer has seen every copy land. Then a layer with copies landing at once.
TEST(Store, CopiesInFlightComeAloneInCopyOrderWithTheirEvents) {
    GatedStore g;
    const bg::RunConfig& c = g.c;
    const bg::ResidencyPlan& plan = g.s.plan();
    GatedCopyBackend& backend = g.backend;
    bg::TieredExpertStore& st = *g.st;
    const int64_t L = plan.n_layer();
    for (int64_t layer : {L - 1, int64_t{0}}) {
        SCOPED_TRACE(layer);
        const bool gated = layer == L - 1;
        std::set<int32_t> hot(plan.hot_ids[layer].begin(), plan.hot_ids[layer].end());
        std::set<int32_t> want(plan.resident[layer].begin(), plan.resident[layer].end());
        const int64_t n_copied = static_cast<int64_t>(want.size() - hot.size());
        ASSERT_GT(n_copied, 1) << "fewer than two host-resident experts: no test";
        ASSERT_LE(n_copied, c.transient_slots) << "every copy in one batch";
        const std::vector<int32_t> experts(want.begin(), want.end());
        const std::vector<int32_t> tokens(experts.size(), 1);
        const int64_t n = static_cast<int64_t>(experts.size());

        backend.set_open(!gated);
        st.begin_pass();
        const bg::StoreCounters before = st.counters();
        st.begin_layer(layer, experts.data(), tokens.data(), n, false);
        std::vector<int32_t> got(experts.size());
        std::vector<bg::ExpertView> views(experts.size());
        int64_t n_got = 0, n_landing = 0;
        uintptr_t last_ticket = 0;
        if (gated) {
            // Without waiting: what is present (the hot experts, together), then nothing while
            // the copies are held, where next_ready_batch would block.
            n_got = st.ready_batch_now(got.data(), views.data(), n);
            EXPECT_EQ(n_got, static_cast<int64_t>(hot.size())) << "the hot experts, present, together";
            for (int64_t i = 0; i < n_got; ++i) {
                EXPECT_EQ(hot.count(got[i]), 1u) << got[i];
                EXPECT_FALSE(views[i].ready) << "present already";
            }
            EXPECT_EQ(st.ready_batch_now(got.data() + n_got, views.data() + n_got, n - n_got), 0)
                << "nothing else is present: none, at once";
        }
        while (n_got < n) {
            const int64_t k = st.next_ready_batch(got.data() + n_got, views.data() + n_got, n - n_got);
            ASSERT_GE(k, 1);
            for (int64_t i = n_got; i < n_got + k; ++i) {
                EXPECT_FALSE(views[i].on_host);
                if (!views[i].ready) continue;
                ++n_landing;
                EXPECT_EQ(k, 1) << "an expert on its way comes alone";
                EXPECT_EQ(hot.count(got[i]), 0u) << "a hot expert needs no copy";
                const auto ticket = reinterpret_cast<uintptr_t>(views[i].ready.handle);
                EXPECT_GT(ticket, last_ticket) << "in copy order";
                last_ticket = ticket;
            }
            if (gated && n_got == 0) {
                EXPECT_EQ(k, static_cast<int64_t>(hot.size())) << "the hot experts first, together";
                for (int64_t i = 0; i < k; ++i) EXPECT_FALSE(views[i].ready) << "present already";
            }
            n_got += k;
        }
        std::vector<int32_t> sorted(got.begin(), got.end());
        std::sort(sorted.begin(), sorted.end());
        EXPECT_EQ(sorted, experts);
        if (gated) {
            EXPECT_EQ(n_landing, n_copied) << "the gate held every copy: each came on its way";
        }
        // Released before the copies land (a device's compute waited for them on its own).
        for (int32_t e : got) st.release(e);
        std::atomic<bool> ended{false};
        std::thread ender([&] {
            st.end_layer();
            ended = true;
        });
        if (gated) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            EXPECT_FALSE(ended.load()) << "end_layer returned while copies were still landing";
            backend.set_open(true);
        }
        ender.join();
        EXPECT_TRUE(ended.load());
        const bg::StoreCounters d = st.counters() - before;
        EXPECT_EQ(d.copied_experts, static_cast<uint64_t>(n_copied));
        EXPECT_EQ(d.vram_hits, hot.size());
    }
    EXPECT_GT(st.verify_slots(), 0u);
}

// A decode layer (host_compute) leaves its first copies to the caller: none is queued by the
// streamer (here 20 ms on), start_copies queues every one on the calling thread before it
// returns, and a caller that never calls it gets them queued by its first wait for an expert,
// on its thread too. The experts, their copies and the counts are those of a streamer's copies.
TEST(Store, ADecodeLayersFirstCopiesAreQueuedByTheCaller) {
    GatedStore g;
    const bg::RunConfig& c = g.c;
    const bg::ResidencyPlan& plan = g.s.plan();
    GatedCopyBackend& backend = g.backend;
    bg::TieredExpertStore& st = *g.st;
    const int64_t layer = plan.n_layer() - 1;
    const std::set<int32_t> hot(plan.hot_ids[layer].begin(), plan.hot_ids[layer].end());
    const std::set<int32_t> want(plan.resident[layer].begin(), plan.resident[layer].end());
    const int64_t n_copied = static_cast<int64_t>(want.size() - hot.size());
    ASSERT_GT(n_copied, 1) << "fewer than two host-resident experts: no test";
    ASSERT_LE(n_copied, c.transient_slots) << "every copy in one batch";
    const std::vector<int32_t> experts(want.begin(), want.end());
    const std::vector<int32_t> tokens(experts.size(), 1);
    const int64_t n = static_cast<int64_t>(experts.size());
    for (const bool calls_start : {true, false}) {
        SCOPED_TRACE(calls_start ? "start_copies" : "no start_copies");
        st.begin_pass();
        const bg::StoreCounters before = st.counters();
        const uint64_t queued0 = backend.queued();
        backend.take_copy_threads();
        backend.set_open(false);
        ASSERT_EQ(st.begin_layer(layer, experts.data(), tokens.data(), n, true), n);  // host mode gpu: all copied
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(backend.queued(), queued0) << "the streamer queued a decode layer's first copies";
        std::vector<int32_t> got(experts.size());
        std::vector<bg::ExpertView> views(experts.size());
        int64_t n_got = st.ready_batch_now(got.data(), views.data(), n);
        EXPECT_EQ(n_got, static_cast<int64_t>(hot.size()));
        if (calls_start) {
            st.start_copies();
            EXPECT_EQ(backend.queued() - queued0, static_cast<uint64_t>(n_copied)) << "queued before start_copies returned";
        }
        while (n_got < n) n_got += st.next_ready_batch(got.data() + n_got, views.data() + n_got, n - n_got);
        const std::vector<std::thread::id> threads = backend.take_copy_threads();
        EXPECT_EQ(static_cast<int64_t>(threads.size()), n_copied);
        for (const std::thread::id& t : threads) EXPECT_EQ(t, std::this_thread::get_id()) << "a copy queued by another thread";
        backend.set_open(true);
        for (int32_t e : got) st.release(e);
        st.end_layer();
        std::vector<int32_t> sorted(got.begin(), got.end());
        std::sort(sorted.begin(), sorted.end());
        EXPECT_EQ(sorted, experts);
        const bg::StoreCounters d = st.counters() - before;
        EXPECT_EQ(d.copied_experts, static_cast<uint64_t>(n_copied));
        EXPECT_EQ(d.vram_hits, hot.size());
    }
    EXPECT_GT(st.verify_slots(), 0u);
}

}  // namespace
