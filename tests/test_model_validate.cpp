// The dsv41 loader rejects files whose metadata or tensor table does not match the
// architecture, with one line naming the problem.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/dsv41_model.h"
#include "model_fixture.h"
#include "util/check.h"
#include "util/file_io.h"

namespace {

struct Edit {
    std::function<void(std::vector<bg::gguf::KeyValue>&)> kvs = [](auto&) {};
    // Return false to drop the tensor; may change its shape or type (data is then zero).
    std::function<bool(bg::gguf::TensorInfo&)> tensor = [](auto&) { return true; };
    std::vector<bg::gguf::TensorInfo> extra;
};

// Copies the tiny model through the writer with an edit applied.
std::string rewrite(const std::string& name, const Edit& e) {
    const std::string src = bgtest::tiny_model();
    const bg::gguf::Reader r = bg::gguf::Reader::open(src);
    std::vector<bg::gguf::KeyValue> kvs = r.kvs();
    e.kvs(kvs);
    bg::gguf::Writer w;
    for (const auto& kv : kvs) w.set(kv.key, kv.value);
    const int fd = ::open(src.c_str(), O_RDONLY);
    std::vector<std::vector<uint8_t>> data;
    for (bg::gguf::TensorInfo t : r.tensors()) {
        const bg::gguf::TensorInfo orig = t;
        if (!e.tensor(t)) continue;
        w.add_tensor(t.name, t.ne, t.type);
        const uint64_t bytes = w.tensors().back().n_bytes;
        data.emplace_back(bytes, 0);
        if (t.ne == orig.ne && t.type == orig.type) bg::pread_exact(fd, data.back().data(), bytes, orig.file_offset, "test");
    }
    ::close(fd);
    for (const auto& t : e.extra) {
        w.add_tensor(t.name, t.ne, t.type);
        data.emplace_back(w.tensors().back().n_bytes, 0);
    }
    std::vector<const void*> ptrs;
    for (auto& d : data) ptrs.push_back(d.data());
    const std::string out = bgtest::test_models_dir() + "/edit-" + name + ".gguf";
    w.write_file(out, ptrs);
    return out;
}

std::string open_error(const std::string& path) {
    try {
        bg::dsv41::Model::open(path);
    } catch (const bg::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
        return msg;
    }
    return "";
}

TEST(ModelValidate, UnmodifiedCopyLoads) {
    const std::string p = rewrite("none", Edit{});
    EXPECT_EQ(open_error(p), "");
}

TEST(ModelValidate, WrongShape) {
    Edit e;
    e.tensor = [](bg::gguf::TensorInfo& t) {
        if (t.name == "blk.0.attn_kv.weight") t.ne = {64, 32};
        return true;
    };
    EXPECT_EQ(open_error(rewrite("shape", e)),
              "model: tensor 'blk.0.attn_kv.weight' has shape {64, 32}, expected {64, 64}");
}

TEST(ModelValidate, MissingTensor) {
    Edit e;
    e.tensor = [](bg::gguf::TensorInfo& t) { return t.name != "blk.3.ffn_norm.weight"; };
    EXPECT_NE(open_error(rewrite("missing", e)).find("missing tensor 'blk.3.ffn_norm.weight'"), std::string::npos);
}

TEST(ModelValidate, UnexpectedTensor) {
    Edit e;
    bg::gguf::TensorInfo t;
    t.name = "blk.0.bogus.weight";
    t.ne = {32};
    t.type = bg::GgmlType::F32;
    e.extra.push_back(t);
    EXPECT_NE(open_error(rewrite("extra", e)).find("unexpected tensor 'blk.0.bogus.weight'"), std::string::npos);
}

TEST(ModelValidate, TypeNotAllowed) {
    Edit e;
    e.tensor = [](bg::gguf::TensorInfo& t) {
        // Dense matrices are F32, F16, BF16 or Q8_0; MXFP4 is for experts.
        if (t.name == "blk.1.attn_q_a.weight") t.type = bg::GgmlType::MXFP4;
        return true;
    };
    EXPECT_NE(open_error(rewrite("type", e)).find("'blk.1.attn_q_a.weight' has type mxfp4, which is not allowed"),
              std::string::npos);
}

TEST(ModelValidate, WrongArchitecture) {
    Edit e;
    e.kvs = [](std::vector<bg::gguf::KeyValue>& kvs) {
        for (auto& kv : kvs)
            if (kv.key == "general.architecture") kv.value = bg::gguf::Value::str("llama");
    };
    EXPECT_NE(open_error(rewrite("arch", e)).find("architecture is 'llama', expected 'deepseek41'"), std::string::npos);
}

TEST(ModelValidate, MissingKey) {
    Edit e;
    e.kvs = [](std::vector<bg::gguf::KeyValue>& kvs) {
        std::erase_if(kvs, [](const bg::gguf::KeyValue& kv) { return kv.key == "deepseek41.expert_count"; });
    };
    EXPECT_NE(open_error(rewrite("key", e)).find("deepseek41.expert_count"), std::string::npos);
}

TEST(ModelValidate, CompressedLayerWithoutKvSource) {
    Edit e;
    e.tensor = [](bg::gguf::TensorInfo& t) { return t.name.rfind("blk.2.attn_compressor", 0) != 0; };
    EXPECT_NE(open_error(rewrite("roles", e)).find("kv source"), std::string::npos);
}

// Shorter than the vocabulary: refused (llama.cpp refuses it too; a longer map is taken, see
// test_model_keys).
TEST(ModelValidate, EngramTokenMapTooShort) {
    Edit e;
    e.kvs = [](std::vector<bg::gguf::KeyValue>& kvs) {
        for (auto& kv : kvs)
            if (kv.key == "deepseek41.engram.token_map") kv.value.items.pop_back();
    };
    EXPECT_NE(open_error(rewrite("tokmap", e)).find("engram.token_map has 511 entries, too few for the 512-token vocabulary"), std::string::npos);
}

}  // namespace
