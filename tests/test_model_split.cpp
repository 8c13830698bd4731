// A model split as gguf-split splits it runs exactly as the unsplit file: make-model's shards
// hold the same bytes for every tensor, every reader (dense loading, the tiered expert store and
// the Engram store through io_uring and pread, the pread providers) goes to the tensor's shard,
// and the logits and greedy tokens are bit-for-bit those of the unsplit model on the CPU.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "cpu/cpu_ops.h"
#include "cpu/thread_pool.h"
#include "gguf/gguf_split.h"
#include "gguf_edit.h"
#include "model/dsv41_forward.h"
#include "model_fixture.h"
#include "runtime/providers.h"
#include "runtime/runner.h"
#include "runtime/session.h"
#include "util/check.h"
#include "util/file_io.h"

namespace {

using bg::dsv41::Model;

// About a quarter of the tiny model's 2.7 MB per shard: several shards, experts and Engram
// tables of different layers in different files.
constexpr uint64_t kShardBytes = 700000;

bg::ModelScale tiny_scale() { return bg::parse_scale(bgtest::kTinyScale, "tiny"); }

std::string split_tiny() { return bgtest::cached_split_model(tiny_scale(), 3, kShardBytes); }

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    std::vector<uint8_t> out(static_cast<size_t>(f.tellg()));
    f.seekg(0);
    f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
    return out;
}

TEST(ModelSplit, ShardsHoldTheUnsplitBytesOfEveryTensor) {
    const auto whole = Model::open(bgtest::tiny_model());
    const auto split = Model::open(split_tiny());
    ASSERT_FALSE(whole->gguf().is_split());
    ASSERT_TRUE(split->gguf().is_split());
    const size_t n_files = split->shard_paths().size();
    EXPECT_GE(n_files, 3u);
    EXPECT_EQ(split->gguf().shards().size(), n_files);
    ASSERT_EQ(split->gguf().tensors().size(), whole->gguf().tensors().size());
    // The model's metadata is the first shard's (with the split keys added), in the same order.
    ASSERT_EQ(split->gguf().kvs().size(), whole->gguf().kvs().size() + 3);
    for (size_t i = 0; i < whole->gguf().kvs().size(); ++i) {
        EXPECT_EQ(split->gguf().kvs()[i].key, whole->gguf().kvs()[i].key);
        EXPECT_TRUE(split->gguf().kvs()[i].value == whole->gguf().kvs()[i].value) << whole->gguf().kvs()[i].key;
    }
    std::set<uint32_t> used;
    std::vector<uint8_t> a, b;
    for (size_t i = 0; i < whole->gguf().tensors().size(); ++i) {
        const bg::gguf::TensorInfo& w = whole->gguf().tensors()[i];
        const bg::gguf::TensorInfo& s = split->gguf().tensors()[i];
        ASSERT_EQ(s.name, w.name);
        EXPECT_EQ(s.type, w.type);
        EXPECT_EQ(s.ne, w.ne);
        EXPECT_GE(s.shard, i == 0 ? 0u : split->gguf().tensors()[i - 1].shard) << "tensors in order";
        used.insert(s.shard);
        a.resize(w.n_bytes);
        b.resize(s.n_bytes);
        whole->read_tensor(w, a.data(), a.size(), 0, "test");
        split->read_tensor(s, b.data(), b.size(), 0, "test");
        EXPECT_EQ(a, b) << w.name;
    }
    EXPECT_EQ(used.size(), n_files) << "every shard holds tensors";
    // What the stores read lies in several files, at the unsplit file's bytes.
    const bg::dsv41::HParams& hp = split->hp();
    std::set<uint32_t> expert_files, engram_files;
    for (int64_t l = 0; l < hp.n_layer; ++l)
        for (int64_t e : {int64_t{0}, hp.n_expert - 1}) {
            const bg::ExpertRanges r = split->expert_ranges(l, e), wr = whole->expert_ranges(l, e);
            const bg::ByteRange xs[3] = {r.gate, r.up, r.down}, ys[3] = {wr.gate, wr.up, wr.down};
            for (int j = 0; j < 3; ++j) {
                const bg::ByteRange& x = xs[j];
                const bg::ByteRange& y = ys[j];
                expert_files.insert(x.file);
                a.resize(x.bytes);
                bg::pread_exact(split->fd(x.file), a.data(), x.bytes, x.offset, "test");
                b.resize(y.bytes);
                bg::pread_exact(whole->fd(y.file), b.data(), y.bytes, y.offset, "test");
                EXPECT_EQ(a, b) << "layer " << l << " expert " << e;
            }
        }
    for (int64_t l : hp.engram_layers) {
        const bg::ByteRange r = split->engram_row(l, 5).values, w = whole->engram_row(l, 5).values;
        engram_files.insert(r.file);
        a.resize(r.bytes);
        b.resize(w.bytes);
        bg::pread_exact(split->fd(r.file), a.data(), r.bytes, r.offset, "test");
        bg::pread_exact(whole->fd(w.file), b.data(), w.bytes, w.offset, "test");
        EXPECT_EQ(a, b) << "engram layer " << l;
    }
    EXPECT_GE(expert_files.size(), 2u);
    EXPECT_GE(engram_files.size(), 1u);
    EXPECT_TRUE(*expert_files.rbegin() > 0 && *engram_files.rbegin() > 0) << "reads past the first shard";
}

bg::RunConfig run_cfg(const std::string& path, const std::string& io) {
    bg::RunConfig c;
    c.model_path = path;
    c.prompt_tokens = 40;
    c.prompt_seed = 3;
    c.gen = 6;
    c.slots = 8;
    c.hot = 2;
    c.transient_slots = 6;
    c.threads = 2;
    c.ubatch = 16;
    c.io = bg::parse_enum<bg::io::IoEngine>(io);
    c.verify_slots = true;
    return c;
}

// The whole engine (tiered expert store, Engram store, dense image) through both io engines.
TEST(ModelSplit, SessionGivesTheUnsplitLogitsAndTokens) {
    bg::Session whole(run_cfg(bgtest::tiny_model(), "pread"));
    const std::vector<float> want = whole.all_logits(bg::RoutingPolicy::kExact);
    const nlohmann::json whole_metrics = whole.run(false);
    ASSERT_FALSE(whole.generated().empty());
    for (const char* io : {"uring", "pread"}) {
        SCOPED_TRACE(io);
        bg::Session split(run_cfg(split_tiny(), io));
        EXPECT_EQ(split.model().shard_paths().size(), split.model().gguf().shards().size());
        const std::vector<float> got = split.all_logits(bg::RoutingPolicy::kExact);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << "logits differ";
        const nlohmann::json m = split.run(false);
        EXPECT_EQ(split.generated(), whole.generated());
        EXPECT_GT(m["passes"][0]["experts"]["disk_bytes"].get<uint64_t>(), 0u);
        EXPECT_EQ(m["passes"][0]["experts"]["disk_bytes"], whole_metrics["passes"][0]["experts"]["disk_bytes"]);
        EXPECT_GT(m["passes"][0]["engram"]["disk_read_bytes"].get<uint64_t>(), 0u);
        EXPECT_EQ(m["model"]["files"].get<size_t>(), split.model().shard_paths().size());
        EXPECT_EQ(m["model"]["file_bytes"].get<uint64_t>(), split.model().gguf().total_file_size());
        EXPECT_GT(split.store().verify_slots(), 0u);
    }
}

// The pread providers the plain forward pass uses (no store).
TEST(ModelSplit, PreadProvidersGiveTheUnsplitLogits) {
    const std::vector<int32_t> prompt = bg::random_prompt(24, 5, 512, 0);
    auto logits_of = [&](const std::string& path) {
        auto m = Model::open(path);
        bg::cpu::ThreadPool pool(2);
        bg::PreadExpertProvider experts(*m);
        bg::PreadEngramProvider engram(*m);
        bg::dsv41::ForwardConfig fc;
        fc.n_ctx = 32;
        fc.max_ubatch = 8;
        bg::dsv41::Forward fwd(*m, bg::cpu::make_cpu_ops(pool), experts, engram, fc);
        bg::Runner runner(*m, fwd);
        std::vector<float> logits;
        runner.prefill(prompt, bg::PrefillOrder::kTokenMajor, 8, &logits);
        EXPECT_GT(experts.bytes_read(), 0u);
        EXPECT_GT(engram.bytes_read(), 0u);
        return logits;
    };
    const std::vector<float> want = logits_of(bgtest::tiny_model());
    const std::vector<float> got = logits_of(split_tiny());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

// Same seed, same bytes: a second split write, with another thread count, is identical.
TEST(ModelSplit, MakeModelSplitIsDeterministic) {
    const std::string dir = bgtest::test_models_dir() + "/split-determinism-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    bg::MakeModelConfig cfg;
    cfg.seed = 3;
    cfg.progress = false;
    cfg.split_max_bytes = kShardBytes;
    cfg.threads = 1;
    cfg.out_path = dir + "/one.gguf";
    const bg::MakeModelResult one = bg::make_model(tiny_scale(), cfg);
    cfg.threads = 3;
    cfg.chunk_bytes = 64 << 10;  // chunks that straddle tensors and shard ends differently
    cfg.out_path = dir + "/two";
    const bg::MakeModelResult two = bg::make_model(tiny_scale(), cfg);
    ASSERT_EQ(one.paths.size(), two.paths.size());
    ASSERT_GE(one.paths.size(), 3u);
    for (size_t k = 0; k < one.paths.size(); ++k) {
        const uint32_t n = static_cast<uint32_t>(one.paths.size());
        EXPECT_EQ(one.paths[k], bg::gguf::split_path(dir + "/one", static_cast<uint32_t>(k), n));
        EXPECT_EQ(two.paths[k], bg::gguf::split_path(dir + "/two", static_cast<uint32_t>(k), n));
        EXPECT_TRUE(file_bytes(one.paths[k]) == file_bytes(two.paths[k])) << "shard " << k + 1;
    }
    // And the cached split (another process may have written it) is the same model.
    EXPECT_TRUE(file_bytes(one.paths[0]) == file_bytes(split_tiny()));
    std::filesystem::remove_all(dir);
}

// Joined back into one file (what gguf-split --merge does, less its split.count 0 key), the
// shards are the unsplit file, byte for byte: the same metadata in the same order, the same
// tensors at the same offsets.
TEST(ModelSplit, MergedShardsAreTheUnsplitFile) {
    const std::string merged = bgtest::test_models_dir() + "/split-merged-" + std::to_string(::getpid()) + ".gguf";
    bgtest::GgufEdit(split_tiny()).write(merged);
    EXPECT_TRUE(file_bytes(merged) == file_bytes(bgtest::tiny_model()));
    std::remove(merged.c_str());
}

// The command line: info lists the shards; a missing shard is one clean error line.
TEST(ModelSplit, InfoListsShardsAndRunRefusesAMissingShard) {
    const std::string first = split_tiny();
    const auto m = Model::open(first);
    const std::string cmd = std::string(BG_BINARY_DIR) + "/betelgeuse info --no-tensors '" + first + "' 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ASSERT_EQ(::pclose(p), 0) << out;
    const auto& shards = m->gguf().shards();
    EXPECT_NE(out.find(bg::strf("files            %zu shards (gguf-split):", shards.size())), std::string::npos) << out;
    for (size_t k = 0; k < shards.size(); ++k)
        EXPECT_NE(out.find(bg::strf("  %5zu  %s  %llu tensors, %llu bytes", k + 1, shards[k].path.c_str(),
                                    (unsigned long long)shards[k].tensor_count, (unsigned long long)shards[k].tensor_bytes)),
                  std::string::npos)
            << out;

    // A copy of the shards with the last one missing.
    const std::string dir = bgtest::test_models_dir() + "/split-missing-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const uint32_t count = static_cast<uint32_t>(shards.size());
    for (uint32_t k = 0; k + 1 < count; ++k)
        std::filesystem::copy_file(shards[k].path, bg::gguf::split_path(dir + "/m", k, count));
    const std::string copy = bg::gguf::split_path(dir + "/m", 0, count);
    const bgtest::Exit r = bgtest::run_cli({"run", "-m", copy, "--prompt-tokens", "4", "-n", "1", "--backend", "cpu"});
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1) << r.err;
    EXPECT_NE(r.err.find("betelgeuse: error: gguf: shard " + std::to_string(count) + " of " + std::to_string(count) + " of '" +
                         copy + "' is missing: no file '" + bg::gguf::split_path(dir + "/m", count - 1, count) + "'"),
              std::string::npos)
        << r.err;
    std::filesystem::remove_all(dir);
}

}  // namespace
