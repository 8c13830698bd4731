// Split models as llama.cpp's gguf-split writes them: naming, the --split-max-size shard plan,
// reading the shards back as one tensor table (files and memory images), and every way a set
// of shards can fail to belong together, each with the message naming the file and problem.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "temp_dir.h"
#include "util/check.h"

namespace {

using bgtest::TempDir;

using bg::GgmlType;
using bg::gguf::Image;
using bg::gguf::Reader;
using bg::gguf::ReaderLimits;
using bg::gguf::TensorInfo;
using bg::gguf::Value;
using bg::gguf::ValueType;
using bg::gguf::Writer;
using Bytes = std::vector<uint8_t>;


Bytes read_bytes(const std::string& path) { return bgtest::read_file_bytes(path); }

// Runs fn, which must throw a one-line bg::Error starting "gguf: " containing every `want`.
std::string error_of(const std::function<void()>& fn, const std::vector<std::string>& want) {
    try {
        fn();
    } catch (const bg::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        for (const std::string& w : want) EXPECT_NE(msg.find(w), std::string::npos) << "message: " << msg << "\nwanted: " << w;
        return msg;
    }
    ADD_FAILURE() << "no bg::Error thrown; wanted: " << (want.empty() ? "" : want[0]);
    return "";
}

// A small model: a few keys and tensors of several types and sizes (bytes in brackets).
Writer small_model() {
    Writer w;
    w.set("general.architecture", Value::str("test"));
    w.set("test.count", Value::u32(7));
    w.set("test.list", Value::array_f32({1.0f, -2.5f, 3.25f}));
    w.add_tensor("a", {64, 4}, GgmlType::F32);    // [1024]
    w.add_tensor("b", {32, 3}, GgmlType::Q8_0);   // [102]
    w.add_tensor("c", {256, 8}, GgmlType::F16);   // [4096]
    w.add_tensor("d", {7}, GgmlType::F32);        // [28]
    w.add_tensor("e", {128, 2}, GgmlType::BF16);  // [512]
    w.add_tensor("f", {32, 16}, GgmlType::MXFP4); // [272]
    w.add_tensor("g", {100}, GgmlType::F32);      // [400]
    return w;
}

// Random bytes for every tensor of the model, by name.
std::map<std::string, Bytes> random_data(const Writer& w, uint32_t seed) {
    std::mt19937 rng(seed);
    std::map<std::string, Bytes> data;
    for (const TensorInfo& t : w.tensors()) {
        Bytes b(t.n_bytes);
        for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
        data[t.name] = std::move(b);
    }
    return data;
}

// Writes each shard header with the data its tensors have in `data`.
void write_shards(const std::vector<std::string>& paths, const std::vector<Writer>& shards,
                  const std::map<std::string, Bytes>& data) {
    ASSERT_EQ(paths.size(), shards.size());
    for (size_t k = 0; k < shards.size(); ++k) {
        std::vector<const void*> ptrs;
        for (const TensorInfo& t : shards[k].tensors()) ptrs.push_back(data.at(t.name).data());
        shards[k].write_file(paths[k], ptrs);
    }
}

std::vector<std::string> shard_paths(const std::string& prefix, size_t n) {
    std::vector<std::string> p;
    for (size_t k = 0; k < n; ++k) p.push_back(bg::gguf::split_path(prefix, static_cast<uint32_t>(k), static_cast<uint32_t>(n)));
    return p;
}

// gguf-split's size rule, restated from tools/gguf-split/gguf-split.cpp for comparison: the
// index of the first tensor of each shard.
std::vector<size_t> gguf_split_boundaries(const std::vector<uint64_t>& n_bytes, uint64_t max) {
    std::vector<size_t> first = {0};
    uint64_t curr = 0;
    for (size_t i = 0; i < n_bytes.size(); ++i) {
        const uint64_t n = (n_bytes[i] + 31) / 32 * 32;
        if (curr + n > max && i > 0) {
            first.push_back(i);
            curr = n;
        } else {
            curr += n;
        }
    }
    return first;
}

// ---------------------------------------------------------------------------------------------
// Naming and the size argument

TEST(GgufSplitNames, PathAndPrefixAsLlamaCpp) {
    using bg::gguf::split_path;
    using bg::gguf::split_prefix;
    EXPECT_EQ(split_path("/models/ggml-model-q4_0", 1, 4), "/models/ggml-model-q4_0-00002-of-00004.gguf");
    EXPECT_EQ(split_path("m", 0, 1), "m-00001-of-00001.gguf");
    EXPECT_EQ(split_path("m", 99999, 65535), "m-100000-of-65535.gguf");  // %05d grows, as snprintf does
    EXPECT_EQ(split_prefix("/models/ggml-model-q4_0-00002-of-00004.gguf", 1, 4), "/models/ggml-model-q4_0");
    EXPECT_EQ(split_prefix("a/b-00001-of-00012.gguf", 0, 12), "a/b");
    EXPECT_FALSE(split_prefix("a/b-00001-of-00012.gguf", 1, 12)) << "another shard number";
    EXPECT_FALSE(split_prefix("a/b-00001-of-00012.gguf", 0, 13)) << "another count";
    EXPECT_FALSE(split_prefix("-00001-of-00002.gguf", 0, 2)) << "no prefix left";
    EXPECT_FALSE(split_prefix("b-00001-of-00002.gguf.bak", 0, 2));
    EXPECT_FALSE(split_prefix("b.gguf", 0, 2));
}

TEST(GgufSplitNames, MaxSizeArgument) {
    using bg::gguf::parse_split_max_size;
    EXPECT_EQ(parse_split_max_size("4096"), 4096u);
    EXPECT_EQ(parse_split_max_size("5K"), 5000u);
    EXPECT_EQ(parse_split_max_size("128M"), 128000000u);
    EXPECT_EQ(parse_split_max_size("4G"), 4000000000u);
    for (const char* bad : {"", "M", "0", "0G", "10X", "10m", "-5", "1.5G", "5 M", "G5", "99999999999999999999",
                            "18446744073709551615G"}) {
        try {
            parse_split_max_size(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const bg::Error& e) {
            EXPECT_EQ(std::string(e.what()).rfind("--split-max-size '", 0), 0u) << e.what();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The shard plan

TEST(GgufSplitWriter, ShardsFollowGgufSplitsSizeRuleAndKeys) {
    const Writer whole = small_model();
    std::vector<uint64_t> sizes;
    for (const TensorInfo& t : whole.tensors()) sizes.push_back(t.n_bytes);
    for (uint64_t max : {1ull, 100ull, 128ull, 1200ull, 1300ull, 4096ull, 5000ull, 6500ull, 1ull << 40}) {
        SCOPED_TRACE("max " + std::to_string(max));
        const std::vector<Writer> shards = bg::gguf::split_writer(whole, max);
        const std::vector<size_t> want = gguf_split_boundaries(sizes, max);
        ASSERT_EQ(shards.size(), want.size());
        size_t i = 0;
        for (size_t k = 0; k < shards.size(); ++k) {
            EXPECT_EQ(i, want[k]) << "shard " << k << " starts at tensor " << i;
            ASSERT_FALSE(shards[k].tensors().empty());
            uint64_t padded = 0;
            for (const TensorInfo& t : shards[k].tensors()) {
                const TensorInfo& w = whole.tensors()[i++];
                EXPECT_EQ(t.name, w.name);
                EXPECT_EQ(t.ne, w.ne);
                EXPECT_EQ(t.type, w.type);
                padded += (t.n_bytes + 31) / 32 * 32;
            }
            if (shards[k].tensors().size() > 1) {
                EXPECT_LE(padded, max) << "only a lone tensor may pass the size";
            }
            // Keys: shard 0 has the model's, in order, then the split keys; the others only those.
            const auto& kvs = shards[k].kvs();
            const size_t model_keys = k == 0 ? whole.kvs().size() : 0;
            ASSERT_EQ(kvs.size(), model_keys + 3);
            for (size_t j = 0; j < model_keys; ++j) {
                EXPECT_EQ(kvs[j].key, whole.kvs()[j].key);
                EXPECT_TRUE(kvs[j].value == whole.kvs()[j].value) << kvs[j].key;
            }
            EXPECT_EQ(kvs[model_keys].key, "split.no");
            EXPECT_TRUE(kvs[model_keys].value == Value::u16(static_cast<uint16_t>(k)));
            EXPECT_EQ(kvs[model_keys + 1].key, "split.count");
            EXPECT_TRUE(kvs[model_keys + 1].value == Value::u16(static_cast<uint16_t>(shards.size())));
            EXPECT_EQ(kvs[model_keys + 2].key, "split.tensors.count");
            EXPECT_TRUE(kvs[model_keys + 2].value == Value::i32(7));
        }
        EXPECT_EQ(i, whole.tensors().size());
    }
    EXPECT_EQ(bg::gguf::split_writer(whole, 1).size(), 7u) << "one tensor per shard";
    EXPECT_EQ(bg::gguf::split_writer(whole, 1ull << 40).size(), 1u);
}

TEST(GgufSplitWriter, OtherAlignmentKeptInEveryShard) {
    Writer whole = small_model();
    whole.set_alignment(256);
    const std::vector<Writer> shards = bg::gguf::split_writer(whole, 1500);
    ASSERT_GT(shards.size(), 2u);
    for (const Writer& s : shards) {
        EXPECT_EQ(s.alignment(), 256u);
        for (const TensorInfo& t : s.tensors()) EXPECT_EQ(t.file_offset % 256, 0u) << t.name;
    }
}

// ---------------------------------------------------------------------------------------------
// Reading shards back

// Files and memory images give the same table, each tensor's bytes where it says.
TEST(GgufSplitReader, ShardsReadAsOneTable) {
    for (uint64_t alignment : {32ull, 64ull, 4096ull}) {
        SCOPED_TRACE("alignment " + std::to_string(alignment));
        TempDir dir("bg_gguf_split");
        Writer whole = small_model();
        if (alignment != 32) whole.set_alignment(alignment);
        const std::map<std::string, Bytes> data = random_data(whole, 11);
        const std::vector<Writer> shards = bg::gguf::split_writer(whole, 1200);
        ASSERT_EQ(shards.size(), 4u);
        const std::vector<std::string> paths = shard_paths(dir.file("model"), shards.size());
        write_shards(paths, shards, data);

        const Reader r = Reader::open(paths[0]);
        std::vector<Bytes> files;
        std::vector<Image> images;
        for (const std::string& p : paths) files.push_back(read_bytes(p));
        for (const Bytes& f : files) images.push_back({f.data(), f.size()});
        const Reader m = Reader::parse_shards(images);
        for (const Reader* x : {&r, &m}) {
            ASSERT_TRUE(x->is_split());
            ASSERT_EQ(x->shards().size(), 4u);
            ASSERT_EQ(x->tensors().size(), whole.tensors().size());
            EXPECT_EQ(x->kvs().size(), whole.kvs().size() + 3);
            EXPECT_EQ(x->get_u32("test.count"), 7u);
            uint64_t total = 0;
            for (size_t k = 0; k < 4; ++k) {
                const bg::gguf::Shard& s = x->shards()[k];
                EXPECT_EQ(s.path, x == &r ? paths[k] : "");
                EXPECT_EQ(s.file_size, files[k].size());
                EXPECT_EQ(s.tensor_count, shards[k].tensors().size());
                EXPECT_EQ(s.alignment, alignment);
                uint64_t bytes = 0;
                for (const TensorInfo& t : shards[k].tensors()) bytes += t.n_bytes;
                EXPECT_EQ(s.tensor_bytes, bytes);
                total += s.file_size;
            }
            EXPECT_EQ(x->total_file_size(), total);
            EXPECT_EQ(x->file_size(), files[0].size());
            uint32_t shard = 0;
            size_t in_shard = 0;
            for (size_t i = 0; i < x->tensors().size(); ++i) {
                const TensorInfo& t = x->tensors()[i];
                while (in_shard == shards[shard].tensors().size()) {
                    ++shard;
                    in_shard = 0;
                }
                ++in_shard;
                EXPECT_EQ(t.name, whole.tensors()[i].name);
                EXPECT_EQ(t.shard, shard) << t.name;
                EXPECT_EQ(x->tensor(t.name), &t);
                const Bytes& f = files[t.shard];
                ASSERT_LE(t.file_offset + t.n_bytes, f.size());
                EXPECT_EQ(0, std::memcmp(f.data() + t.file_offset, data.at(t.name).data(), t.n_bytes)) << t.name;
            }
        }
    }
}

// gguf-split --merge leaves split.count 0; a one-shard split has split.count 1. Both are one
// file whatever its name.
TEST(GgufSplitReader, CountZeroOrOneIsOneFile) {
    for (uint16_t count : {0, 1}) {
        TempDir dir("bg_gguf_split");
        Writer w = small_model();
        w.set("split.no", Value::u16(0));
        w.set("split.count", Value::u16(count));
        w.set("split.tensors.count", Value::i32(7));
        const std::map<std::string, Bytes> data = random_data(w, 3);
        const std::string path = dir.file("merged.gguf");
        write_shards({path}, {w}, data);
        const Reader r = Reader::open(path);
        EXPECT_FALSE(r.is_split());
        EXPECT_EQ(r.shards().size(), 1u);
        EXPECT_EQ(r.tensors().size(), 7u);
        EXPECT_EQ(r.total_file_size(), r.file_size());
    }
}

// ---------------------------------------------------------------------------------------------
// Shards that do not belong together

class GgufSplitErrors : public ::testing::Test {
protected:
    void SetUp() override {
        whole_ = small_model();
        data_ = random_data(whole_, 5);
        shards_ = bg::gguf::split_writer(whole_, 1200);
        ASSERT_EQ(shards_.size(), 4u);
        paths_ = shard_paths(dir_.file("m"), 4);
    }
    void write() { write_shards(paths_, shards_, data_); }
    // The message of opening the first shard, which must name `file`.
    std::string open_error(const std::vector<std::string>& want, const std::string& file) {
        std::vector<std::string> all = want;
        all.push_back(file);
        return error_of([&] { Reader::open(paths_[0]); }, all);
    }

    TempDir dir_{"bg_gguf_split"};
    Writer whole_;
    std::map<std::string, Bytes> data_;
    std::vector<Writer> shards_;
    std::vector<std::string> paths_;
};

TEST_F(GgufSplitErrors, MissingShard) {
    write();
    ASSERT_EQ(::unlink(paths_[2].c_str()), 0);
    open_error({"shard 3 of 4 of '" + paths_[0] + "' is missing: no file"}, paths_[2]);
}

TEST_F(GgufSplitErrors, LaterShardGivenFirst) {
    write();
    error_of([&] { Reader::open(paths_[2]); },
             {"'" + paths_[2] + "' is shard 3 of 4 (split.no 2); a split model is opened by its first shard, '" + paths_[0] + "'"});
}

TEST_F(GgufSplitErrors, FirstShardNotNamedAsOne) {
    write();
    const std::string renamed = dir_.file("model.gguf");
    ASSERT_EQ(::rename(paths_[0].c_str(), renamed.c_str()), 0);
    error_of([&] { Reader::open(renamed); },
             {"'" + renamed + "' has split.count 4 but is not named as its first shard ('<prefix>-00001-of-00004.gguf')"});
}

TEST_F(GgufSplitErrors, ShardOfAnotherSplitCount) {
    write();
    // The same model split in 7: its second shard put where this split's second belongs.
    const std::vector<Writer> other = bg::gguf::split_writer(whole_, 1);
    write_shards({paths_[1]}, {other[1]}, data_);
    open_error({"'" + paths_[1] + "' is not shard 2 of 4 of '" + paths_[0] + "': it says it is shard 2 of 7 of a model "
                "of 7 tensors, the first shard says 4 shards of 7 tensors (a shard of another split model, or renamed)"},
               paths_[1]);
}

TEST_F(GgufSplitErrors, ShardOfAnotherTensorCount) {
    shards_[3].set("split.tensors.count", Value::i32(8));
    write();
    open_error({"is not shard 4 of 4", "it says it is shard 4 of 4 of a model of 8 tensors"}, paths_[3]);
}

TEST_F(GgufSplitErrors, ShardsSwapped) {
    write();
    const std::string tmp = dir_.file("tmp");
    ASSERT_EQ(::rename(paths_[1].c_str(), tmp.c_str()), 0);
    ASSERT_EQ(::rename(paths_[2].c_str(), paths_[1].c_str()), 0);
    ASSERT_EQ(::rename(tmp.c_str(), paths_[2].c_str()), 0);
    open_error({"is not shard 2 of 4", "it says it is shard 3 of 4 of a model of 7 tensors"}, paths_[1]);
}

TEST_F(GgufSplitErrors, PlainFileInPlaceOfShard) {
    Writer plain;
    plain.add_tensor("x", {4}, GgmlType::F32);
    shards_[1] = plain;
    data_["x"] = Bytes(16, 1);
    write();
    open_error({"shard 2 of 4", "has no split.no key: not a shard of a split model"}, paths_[1]);
}

TEST_F(GgufSplitErrors, TensorPastItsShardsEnd) {
    write();
    // Cut the last shard one byte short of its last tensor's end.
    const TensorInfo& last = shards_[3].tensors().back();
    ASSERT_EQ(::truncate(paths_[3].c_str(), static_cast<off_t>(last.file_offset + last.n_bytes - 1)), 0);
    open_error({"tensor '" + last.name + "' data [offset " + std::to_string(last.file_offset) + ", size " +
                    std::to_string(last.n_bytes) + "] ends past end of file"},
               paths_[3]);
}

TEST_F(GgufSplitErrors, TensorInTwoShards) {
    // Shard 3 also carries shard 1's first tensor.
    Writer dup;
    dup.set("split.no", Value::u16(2));
    dup.set("split.count", Value::u16(4));
    dup.set("split.tensors.count", Value::i32(7));
    for (const TensorInfo& t : shards_[2].tensors()) dup.add_tensor(t.name, t.ne, t.type);
    const TensorInfo& first = shards_[0].tensors()[0];
    dup.add_tensor(first.name, first.ne, first.type);
    shards_[2] = dup;
    write();
    open_error({"tensor '" + first.name + "' is in '" + paths_[0] + "' and again in shard 3 of 4"}, paths_[2]);
}

TEST_F(GgufSplitErrors, TensorCountShort) {
    for (Writer& s : shards_) s.set("split.tensors.count", Value::i32(9));
    write();
    open_error({"split.tensors.count is 9 but the 4 shards hold 7 tensors"}, paths_[0]);
}

TEST_F(GgufSplitErrors, SplitKeysMissingOrMistyped) {
    {
        Writer w;
        w.set("split.count", Value::u16(4));
        w.set("split.tensors.count", Value::i32(7));
        for (const TensorInfo& t : shards_[0].tensors()) w.add_tensor(t.name, t.ne, t.type);
        shards_[0] = w;
        write();
        open_error({"split.count is 4 but split.no is missing"}, paths_[0]);
    }
    {
        shards_[0].set("split.no", Value::u16(0));
        shards_[0].set("split.tensors.count", Value::str("7"));
        write();
        open_error({"split.tensors.count has type string, expected an integer"}, paths_[0]);
    }
    {
        shards_[0].set("split.tensors.count", Value::i32(7));
        shards_[0].set("split.count", Value::u32(70000));
        write();
        open_error({"split.count is 70000, more than 65535"}, paths_[0]);
    }
    {
        shards_[0].set("split.count", Value::u16(4));
        shards_[2].set("split.no", Value::i32(-2));
        write();
        open_error({"shard 3 of 4", "split.no is -2, outside 0..65535"}, paths_[2]);
    }
}

// The limits hold for the model as a whole, not per shard.
TEST_F(GgufSplitErrors, LimitsCountEveryShard) {
    shards_[1].set("pad", Value::str(std::string(3000, 'x')));  // shard 2 holds most of the metadata
    write();
    ReaderLimits lim;
    lim.max_tensor_count = 6;  // each shard holds fewer, the model 7
    error_of([&] { Reader::open(paths_[0], lim); }, {"tensor count 1 exceeds the limit of 0", paths_[3]});
    // The least metadata limit the model opens under; one byte less fails at the last shard,
    // whose own small metadata tips the sum (a per-shard limit would fail at shard 2).
    auto opens = [&](uint64_t limit) {
        ReaderLimits l;
        l.max_metadata_bytes = limit;
        try {
            Reader::open(paths_[0], l);
            return true;
        } catch (const bg::Error&) {
            return false;
        }
    };
    uint64_t lo = 0, hi = 1 << 20;
    ASSERT_TRUE(opens(hi));
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        (opens(mid) ? hi : lo) = mid;
    }
    EXPECT_GT(hi, 3000u);
    lim = ReaderLimits{};
    lim.max_metadata_bytes = hi - 1;
    error_of([&] { Reader::open(paths_[0], lim); }, {"metadata exceeds the limit of", paths_[3]});
}

TEST_F(GgufSplitErrors, MemoryImagesMissingOrExtra) {
    write();
    std::vector<Bytes> files;
    for (const std::string& p : paths_) files.push_back(read_bytes(p));
    std::vector<Image> images;
    for (const Bytes& f : files) images.push_back({f.data(), f.size()});
    error_of([&] { Reader::parse(files[0].data(), files[0].size()); }, {"shard 2 of 4 is missing (1 shard images given)"});
    error_of([&] { Reader::parse_shards({images[0], images[1], images[2]}); }, {"shard 4 of 4 is missing (3 shard images given)"});
    std::vector<Image> extra = images;
    extra.push_back(images[3]);
    error_of([&] { Reader::parse_shards(extra); }, {"5 shard images given but the first declares 4"});
    error_of([&] { Reader::parse_shards({images[0], images[2], images[1], images[3]}); },
             {"shard image 2 is not shard 2 of 4 of shard image 1: it says it is shard 3 of 4"});
    error_of([&] { Reader::parse_shards({}); }, {"no file given"});
}

}  // namespace
