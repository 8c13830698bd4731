// An expert split between the CPU and the device (runtime/decode_split.h): its first hidden rows
// computed by the host ops from host memory, the rest by the device ops, the CPU's output added
// to the device's (Ops::moe_scatter_join). The forward, given a provider that splits one expert
// of every decode layer at a different row each layer, decodes the float64 reference's greedy
// tokens, and its last step's logits agree with an engine that splits nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/thread_pool.h"
#include "model/dsv41_forward.h"
#include "model/dsv41_model.h"
#include "model/quant_preset.h"
#include "model_fixture.h"
#include "reference/dsv41_reference.h"
#include "runtime/decode_split.h"
#include "runtime/providers.h"
#include "runtime/runner.h"
#include "runtime/sampler.h"
#include "util/file_io.h"

namespace {

// Hands out every expert of a layer at once, read from the file. Where the caller computes on the
// host (a decode step) and `split` is on, the layer's first expert comes as two parts: hidden rows
// [0, f) on the host (ExpertView::on_host), the rest as a device view (the CPU backend's memory is
// the host's), f a different whole step each layer. Checks each part is released once, the host
// part with its CPU time.
class SplittingProvider final : public bg::ExpertProvider {
public:
    SplittingProvider(const bg::MoeModel& m, bool split) : m_(m), split_(split) {}

    int64_t begin_layer(int64_t layer, const int32_t* experts, const int32_t*, int64_t n, bool host_compute) override {
        const uint64_t each = m_.expert_bytes_each(layer);
        buf_.assign(static_cast<size_t>(n) * each, 0);
        views_.clear();
        ids_.clear();
        released_.clear();
        for (int64_t i = 0; i < n; ++i) {
            uint8_t* at = buf_.data() + static_cast<uint64_t>(i) * each;
            const bg::ExpertRanges r = m_.expert_ranges(layer, experts[i]);
            bg::pread_exact(m_.fd(r.gate.file), at, r.gate.bytes, r.gate.offset, "expert read");
            bg::pread_exact(m_.fd(r.up.file), at + r.gate.bytes, r.up.bytes, r.up.offset, "expert read");
            bg::pread_exact(m_.fd(r.down.file), at + r.gate.bytes + r.up.bytes, r.down.bytes, r.down.offset,
                            "expert read");
            bg::ExpertMats e;
            m_.expert_views(layer, at, &e.gate, &e.up, &e.down);
            const int64_t F = e.gate.rows;
            const int64_t step = bg::split_step_rows(F, bg::type_traits(e.down.type).block_elems);
            if (i == 0 && split_ && host_compute && step > 0) {
                const int64_t f = step * (1 + layer % (F / step - 1));
                add(experts[i], e.hidden_rows(0, f), true, true);
                add(experts[i], e.hidden_rows(f, F - f), false, true);
                ++splits_;
            } else {
                add(experts[i], e, false, false);
            }
        }
        next_ = 0;
        return static_cast<int64_t>(views_.size());
    }
    int32_t next_ready(bg::ExpertView* view) override {
        int32_t e = -1;
        next_ready_batch(&e, view, 1);
        return e;
    }
    int64_t next_ready_batch(int32_t* experts, bg::ExpertView* views, int64_t max) override {
        int64_t n = 0;
        for (; n < max && next_ < views_.size(); ++n, ++next_) {
            experts[n] = ids_[next_];
            views[n] = views_[next_];
        }
        EXPECT_GT(n, 0);
        return n;
    }
    void release(int32_t expert) override { released(expert, false); }
    void release_computed(int32_t expert, double cpu_ms) override {
        EXPECT_GE(cpu_ms, 0.0);
        released(expert, true);
    }
    void end_layer() override {
        EXPECT_EQ(next_, views_.size());
        for (const bool r : released_) EXPECT_TRUE(r) << "every part released once";
    }
    int64_t splits() const { return splits_; }

private:
    void add(int32_t id, const bg::ExpertMats& e, bool on_host, bool part) {
        bg::ExpertView v;
        v.gate = e.gate, v.up = e.up, v.down = e.down;
        v.on_host = on_host;
        v.part = part;
        views_.push_back(v);
        ids_.push_back(id);
        released_.push_back(false);
    }
    void released(int32_t expert, bool on_host) {
        for (size_t i = 0; i < views_.size(); ++i)
            if (ids_[i] == expert && views_[i].on_host == on_host) {
                EXPECT_FALSE(released_[i]) << "expert " << expert << " released twice";
                released_[i] = true;
                return;
            }
        ADD_FAILURE() << "expert " << expert << " released but never handed out that way";
    }

    const bg::MoeModel& m_;
    const bool split_;
    std::vector<uint8_t> buf_;
    std::vector<bg::ExpertView> views_;
    std::vector<int32_t> ids_;
    std::vector<bool> released_;
    size_t next_ = 0;
    int64_t splits_ = 0;
};

struct Engine {
    std::unique_ptr<bg::dsv41::Model> model;
    bg::cpu::ThreadPool pool;
    SplittingProvider experts;
    bg::PreadEngramProvider engram;
    bg::dsv41::Forward fwd;
    bg::Runner runner;
    Engine(const std::string& path, const bg::dsv41::ForwardConfig& fc, bool split)
        : model(bg::dsv41::Model::open(path)), pool(2), experts(*model, split), engram(*model),
          fwd(*model, bg::cpu::make_cpu_ops(pool), experts, engram, fc, bg::cpu::make_cpu_ops(pool)),
          runner(*model, fwd) {}
};

bg::dsv41::ForwardConfig forward_config() {
    bg::dsv41::ForwardConfig fc;
    fc.n_ctx = 64;
    fc.max_ubatch = 16;
    fc.host_expert_positions = 1;  // decode steps compute on the host too
    return fc;
}

}  // namespace

TEST(SplitExpert, DecodeWithOneExpertSplitEachLayerGivesTheReferenceTokens) {
    // 256 hidden rows of MXFP4 experts: steps of 32 rows.
    const std::string path = bgtest::preset_model(bg::QuantPreset::kMxfp4Moe);
    const ref::Dsv41Reference ref(path, ref::Dsv41Options{});
    const int64_t n_vocab = ref.hparams().n_vocab;
    const std::vector<int32_t> prompt = bg::random_prompt(24, 5, n_vocab, 0);
    constexpr int64_t kGen = 8;

    Engine split(path, forward_config(), true);
    std::vector<float> last;
    split.runner.prefill(prompt, bg::PrefillOrder::kLayerMajor, 16, &last);
    const std::vector<int32_t> tokens = split.runner.decode(last, kGen);
    EXPECT_EQ(tokens, ref.greedy(prompt, kGen));
    EXPECT_GE(split.experts.splits(), (kGen - 1) * split.model->hp().n_layer) << "a split in every decode layer";

    // The last step's logits (top-1 sampling hands them back) against an engine splitting nothing.
    bg::SamplingConfig top1;
    top1.temp = 1.0;
    top1.top_k = 1;
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> drawn;
    for (const bool with_split : {true, false}) {
        Engine e(path, forward_config(), with_split);
        std::vector<float> l;
        e.runner.prefill(prompt, bg::PrefillOrder::kLayerMajor, 16, &l);
        bg::Sampler sampler(top1);
        drawn.push_back(e.runner.decode(l, kGen, &sampler));
        logits.push_back(l);
        EXPECT_EQ(e.experts.splits() > 0, with_split);
    }
    EXPECT_EQ(drawn[0], drawn[1]);
    EXPECT_EQ(drawn[0], tokens);
    const double rel = bgtest::max_rel_diff(logits[0], logits[1]);
    std::printf("split against whole: last step's logits max rel diff %.3g\n", rel);
    EXPECT_LT(rel, 1e-5);
    EXPECT_GT(rel, 0.0) << "the split's sums are in another order: some logit differs in its last bits";
}
