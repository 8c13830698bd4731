// The device's busy time (Ops::busy_begin / busy_end, the "GPU kernel time" of every result) is
// measured in brackets the forward places around what it queues. What a bracket must hold:
//  - every op that computes (a kernel on a GPU), in prefill and in decode: the Engram
//    projections, the grouping, the CPU rows' scatter, the output head and the embedding were
//    left out before 2026-12-07, about a quarter of a slice decode token's kernel time;
//  - no wait: not the host's (a sync, a fence waited for) and not the device's (for a copy's
//    event, for the CPU's word), so a bracket never holds an idle device;
//  - brackets alternate begin, end, and none is left open when a run ends;
//  - those of the MoE calls' experts and shared experts, which run beside the host's paths
//    (Ops::BusyKind::kBesideHost, left out of issue 24's bound), hold nothing else.
// Checked on the tiny model through the CPU backend, whose ops run the forward's exact sequence of
// calls, for every --decode-experts path and the routing rules that change the MoE's flow.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/device.h"
#include "cpu/cpu_ops.h"
#include "forwarding_ops.h"
#include "tiny_decode_run.h"
#include "runtime/session.h"

namespace {

class BracketWatch final : public bgtest::ForwardingOps {
public:
    explicit BracketWatch(std::unique_ptr<bg::Ops> in) : ForwardingOps(std::move(in)) {}
    // The forward's start-up and the session's rate probes (Forward::time_expert_ms, timed
    // alone) come before the first pass begins its timeline, the second begin_timeline (the
    // forward's constructor calls it once): from then on every call counts.
    void begin_timeline() override {
        armed_ = ++timelines_ >= 2;
        ForwardingOps::begin_timeline();
    }
    std::vector<std::string> outside, waits_inside, misnested;
    std::set<std::string> beside_host_ops;  // what the kBesideHost brackets held
    int64_t inside = 0, brackets = 0, beside_host_brackets = 0;
    bool open = false, beside_host = false;

protected:
    void on(Call kind, const char* what) override {
        switch (kind) {
            case Call::kBusyBegin:
            case Call::kBusyBeginBesideHost:
                if (open) misnested.push_back("begin inside a bracket");
                open = true;
                ++brackets;
                beside_host = kind == Call::kBusyBeginBesideHost;
                beside_host_brackets += beside_host;
                break;
            case Call::kBusyEnd:
                if (!open) misnested.push_back("end outside a bracket");
                open = false;
                break;
            case Call::kCompute:
                if (!armed_) break;
                if (open)
                    ++inside;
                else
                    outside.push_back(what);
                if (open && beside_host) beside_host_ops.insert(what);
                break;
            case Call::kSync:
            case Call::kFenceWait:
            case Call::kDeviceWait:
                if (open) waits_inside.push_back(what);
                break;
            default:
                break;
        }
    }

private:
    bool armed_ = false;
    int timelines_ = 0;
};

class WatchedDevice final : public bg::DeviceFactory {
public:
    const char* name() const override { return "cpu-watching-busy-brackets"; }
    std::unique_ptr<bg::Backend> make_backend(const bg::BackendOptions& opts) override {
        return bg::cpu::cpu_device().make_backend(opts);
    }
    std::unique_ptr<bg::Ops> make_ops(bg::cpu::ThreadPool& pool) override {
        auto ops = std::make_unique<BracketWatch>(bg::cpu::cpu_device().make_ops(pool));
        watch = ops.get();
        return ops;
    }
    BracketWatch* watch = nullptr;
};

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 12; ++i) s += (i ? ", " : "") + v[i];
    return s + (v.size() > 12 ? ", ..." : "");
}

TEST(BusyBrackets, EveryComputeOpIsInsideOneAndNoWaitIs) {
    for (bg::RoutingPolicy routing : {bg::RoutingPolicy::kExact, bg::RoutingPolicy::kResidentOnly}) {
        for (bg::DecodeExperts mode : {bg::DecodeExperts::kGpu, bg::DecodeExperts::kCpu, bg::DecodeExperts::kHybrid}) {
            SCOPED_TRACE(std::string(bg::enum_name(routing)) + " " + bg::enum_name(mode));
            const bg::RunConfig c = bgtest::tiny_decode_run(mode, routing, 6);
            WatchedDevice device;
            bg::Session s(c, &device);
            const nlohmann::json m = s.run(false);
            ASSERT_NE(device.watch, nullptr);
            const BracketWatch& w = *device.watch;
            EXPECT_EQ(s.generated().size(), 6u);
            EXPECT_GT(m["decode"]["experts"]["host_hit_bytes"].get<uint64_t>() +
                          m["decode"]["experts"]["disk_bytes"].get<uint64_t>(),
                      0u)
                << "decode used no host-resident expert: the MoE's host paths went untested";
            EXPECT_TRUE(w.outside.empty()) << "ops outside every bracket: " << joined(w.outside);
            EXPECT_TRUE(w.waits_inside.empty()) << "waits inside a bracket: " << joined(w.waits_inside);
            EXPECT_TRUE(w.misnested.empty()) << joined(w.misnested);
            EXPECT_FALSE(w.open) << "a bracket left open at the end of the run";
            EXPECT_GT(w.inside, 0);
            EXPECT_GT(w.brackets, 0);
            // The brackets a bound may leave out (kBesideHost) hold the experts and the shared
            // expert, nothing of the chain a token waits for.
            EXPECT_GT(w.beside_host_brackets, 0);
            for (const std::string& op : w.beside_host_ops)
                EXPECT_TRUE(op == "expert_ffn" || op == "matmul" || op == "swiglu")
                    << op << " in a beside-host bracket";
            EXPECT_TRUE(w.beside_host_ops.count("expert_ffn")) << "no expert in a beside-host bracket";
        }
    }
}

}  // namespace
