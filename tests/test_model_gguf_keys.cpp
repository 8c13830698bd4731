// The GGUF keys make-model writes have exactly the types llama.cpp's loader reads them with
// (engine/model/GGUF_KEYS.md): one test per type, each failing when the writer changes the type
// of a key of that type, plus checks that the doc's table and the writer agree. The other way,
// our reader takes the variants llama.cpp takes (and more): a file written by hand with counts
// as uint64 or int32, per-layer arrays for scalars and scalars for per-layer arrays reads to the
// same hyper-parameters, and a type it cannot convert is still a one-line error naming the key.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/dsv41.h"
#include "model_fixture.h"
#include "util/check.h"

namespace {

using bg::gguf::KeyValue;
using bg::gguf::Reader;
using bg::gguf::Value;
using bg::gguf::ValueType;
using bg::gguf::Writer;
using Bytes = std::vector<uint8_t>;

// What a key is written as: its GGUF type and, for arrays, the element type.
struct KeyType {
    ValueType type;
    ValueType elem = ValueType::UINT8;
    bool operator==(const KeyType& o) const {
        return type == o.type && (type != ValueType::ARRAY || elem == o.elem);
    }
};

std::string text(const KeyType& t) {
    return t.type == ValueType::ARRAY ? std::string("array of ") + bg::gguf::value_type_name(t.elem)
                                      : bg::gguf::value_type_name(t.type);
}

constexpr KeyType kU32{ValueType::UINT32};
constexpr KeyType kU64{ValueType::UINT64};
constexpr KeyType kF32{ValueType::FLOAT32};
constexpr KeyType kBool{ValueType::BOOL};
constexpr KeyType kStr{ValueType::STRING};
constexpr KeyType kArrF32{ValueType::ARRAY, ValueType::FLOAT32};
constexpr KeyType kArrI32{ValueType::ARRAY, ValueType::INT32};
constexpr KeyType kArrU32{ValueType::ARRAY, ValueType::UINT32};
constexpr KeyType kArrU64{ValueType::ARRAY, ValueType::UINT64};

// The types llama.cpp reads (GGUF_KEYS.md names the reader of each). Written on purpose apart
// from the writer and the doc: changing a type means changing it here too, on purpose.
const std::map<std::string, KeyType>& expected_types() {
    static const std::map<std::string, KeyType> m = [] {
        std::map<std::string, KeyType> e = {
            {"general.architecture", kStr},
            {"general.name", kStr},
            {"general.type", kStr},
            {"general.file_type", kU32},
            {"general.quantization_version", kU32},
            {"tokenizer.ggml.model", kStr},
            {"tokenizer.ggml.bos_token_id", kU32},
            {"betelgeuse.seed", kU64},
            {"betelgeuse.scale", kStr},
            {"betelgeuse.router_bias_skew", kF32},
        };
        const std::map<std::string, KeyType> arch = {
            {"vocab_size", kU32},
            {"block_count", kU32},
            {"context_length", kU32},
            {"embedding_length", kU32},
            {"feed_forward_length", kU32},
            {"attention.head_count", kU32},
            {"attention.head_count_kv", kU32},
            {"attention.key_length", kU32},
            {"attention.value_length", kU32},
            {"rope.dimension_count", kU32},
            {"rope.freq_base", kF32},
            {"rope.scaling.type", kStr},
            {"rope.scaling.factor", kF32},
            {"rope.scaling.original_context_length", kU32},
            {"rope.scaling.yarn_beta_fast", kF32},
            {"rope.scaling.yarn_beta_slow", kF32},
            {"expert_count", kU32},
            {"expert_used_count", kU32},
            {"attention.layer_norm_rms_epsilon", kF32},
            {"attention.q_lora_rank", kU32},
            {"attention.sliding_window", kU32},
            {"expert_feed_forward_length", kU32},
            {"expert_shared_count", kU32},
            {"expert_weights_scale", kF32},
            {"expert_weights_norm", kBool},
            {"expert_gating_func", kU32},
            {"swiglu_clamp_exp", kArrF32},
            {"attention.indexer.head_count", kU32},
            {"attention.indexer.key_length", kU32},
            {"attention.indexer.top_k", kU32},
            {"attention.output_group_count", kU32},
            {"attention.output_lora_rank", kU32},
            {"attention.compress_rope_freq_base", kF32},
            {"attention.compress_ratios", kArrI32},
            {"hyper_connection.count", kU32},
            {"hyper_connection.sinkhorn_iterations", kU32},
            {"hyper_connection.epsilon", kF32},
            {"hash_layer_count", kU32},
            {"engram.layer_ids", kArrI32},
            {"engram.head_count", kU32},
            {"engram.key_length", kU32},
            {"engram.max_ngram_size", kU32},
            {"engram.pad_id", kU32},
            {"engram.multipliers", kArrU64},
            {"engram.primes", kArrU64},
            {"engram.offsets", kArrU64},
            {"engram.token_map", kArrU32},
        };
        for (const auto& [k, t] : arch) e.emplace(std::string(bg::dsv41::kArch) + "." + k, t);
        return e;
    }();
    return m;
}

// The tiny scale has Engram layers, and its types are the MXFP4_MOE preset's mix (Q8_0 dense,
// MXFP4 experts), so its file holds every key make-model writes.
const Reader& written() {
    static const Reader r = Reader::open(bgtest::tiny_model());
    return r;
}

KeyType type_of(const Value& v) { return {v.type, v.elem_type}; }

// Every expected key of type `t` is written, and written as `t`.
void expect_written_as(const KeyType& t) {
    int n = 0;
    for (const auto& [key, want] : expected_types()) {
        if (!(want == t)) continue;
        ++n;
        const Value* v = written().find(key);
        ASSERT_NE(v, nullptr) << key << " is not written";
        EXPECT_EQ(text(type_of(*v)), text(t)) << key << ": llama.cpp reads it as " << text(t);
    }
    EXPECT_GT(n, 0) << "no key of type " << text(t) << " expected";
}

TEST(WrittenKeyTypes, Uint32) { expect_written_as(kU32); }
TEST(WrittenKeyTypes, Uint64) { expect_written_as(kU64); }
TEST(WrittenKeyTypes, Float32) { expect_written_as(kF32); }
TEST(WrittenKeyTypes, Bool) { expect_written_as(kBool); }
TEST(WrittenKeyTypes, String) { expect_written_as(kStr); }
TEST(WrittenKeyTypes, ArrayOfFloat32) { expect_written_as(kArrF32); }
TEST(WrittenKeyTypes, ArrayOfInt32) { expect_written_as(kArrI32); }
TEST(WrittenKeyTypes, ArrayOfUint32) { expect_written_as(kArrU32); }
TEST(WrittenKeyTypes, ArrayOfUint64) { expect_written_as(kArrU64); }

// The three keys whose absence or type made llama.cpp refuse our files.
TEST(WrittenKeyTypes, KeysLlamaCppRequires) {
    EXPECT_EQ(written().get_str("tokenizer.ggml.model"), "none");
    EXPECT_EQ(written().find("deepseek41.engram.pad_id")->type, ValueType::UINT32);
    const bg::gguf::TensorInfo* embd = written().tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(written().find("deepseek41.vocab_size")->type, ValueType::UINT32);
    EXPECT_EQ(static_cast<int64_t>(written().get_u64("deepseek41.vocab_size")), embd->ne[1]);
}

TEST(WrittenKeyTypes, NoUnlistedKey) {
    for (const KeyValue& kv : written().kvs())
        EXPECT_TRUE(expected_types().count(kv.key)) << kv.key << " is written but not in the table of checked keys";
}

// GGUF_KEYS.md's table rows: "| `key` | written as | reader | source |", `A.` for the arch prefix.
std::map<std::string, std::string> doc_table() {
    std::ifstream f(bgtest::source_path("engine/model/GGUF_KEYS.md"));
    std::map<std::string, std::string> rows;
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("| `", 0) != 0) continue;
        const size_t key_end = line.find('`', 3);
        std::string key = line.substr(3, key_end - 3);
        if (key.rfind("A.", 0) == 0) key = std::string(bg::dsv41::kArch) + "." + key.substr(2);
        const size_t col = line.find('|', key_end) + 1;
        std::string written_as = line.substr(col, line.find('|', col) - col);
        written_as = written_as.substr(written_as.find_first_not_of(' '));
        written_as.erase(written_as.find_last_not_of(' ') + 1);
        rows[key] = written_as;
    }
    return rows;
}

TEST(WrittenKeyTypes, DocTableListsEveryWrittenKeyWithItsType) {
    const std::map<std::string, std::string> doc = doc_table();
    ASSERT_FALSE(doc.empty()) << "no table rows in GGUF_KEYS.md";
    for (const KeyValue& kv : written().kvs()) {
        auto it = doc.find(kv.key);
        ASSERT_NE(it, doc.end()) << kv.key << " is written but not documented in GGUF_KEYS.md";
        // "uint32", "string (`none`)", "array of float32, one per layer": the type comes first.
        EXPECT_EQ(it->second.rfind(text(type_of(kv.value)), 0), 0u)
            << kv.key << ": GGUF_KEYS.md says '" << it->second << "', written as " << text(type_of(kv.value));
    }
    for (const auto& [key, t] : doc)
        EXPECT_TRUE(written().find(key)) << key << " is documented but not written";
}

// ---- the other way: what our reader accepts ----

// A file holding the tiny model's metadata with some values replaced, and the one tensor
// read_hparams looks at.
Bytes variant(const std::function<void(const std::string& key, Value& v)>& change) {
    Writer w;
    for (const KeyValue& kv : written().kvs()) {
        Value v = kv.value;
        change(kv.key, v);
        w.set(kv.key, std::move(v));
    }
    const bg::gguf::TensorInfo* embd = written().tensor("token_embd.weight");
    w.add_tensor(embd->name, embd->ne, embd->type);
    Bytes image = w.header_bytes();
    image.resize(w.total_size(), 0);  // the tensor's bytes, which read_hparams never looks at
    return image;
}

// The hyper-parameters as the writer would put them in a file: equal output, equal values.
std::vector<KeyValue> canonical(const Reader& r) {
    Writer w;
    bg::dsv41::write_hparams(bg::dsv41::read_hparams(r), w);
    return w.kvs();
}

bool is_arch_key(const std::string& key) { return key.rfind(std::string(bg::dsv41::kArch) + ".", 0) == 0; }

Value converted_integer(const Value& v, ValueType to) {
    if (to == ValueType::UINT64) return Value::u64(v.u);
    return Value::i32(static_cast<int32_t>(v.u));
}

void expect_reads_the_same(const Bytes& image) {
    const Reader original = Reader::open(bgtest::tiny_model());
    // The tensor table is missing from the variant, so only the hyper-parameters are compared.
    const Reader r = Reader::parse(image.data(), image.size());
    const std::vector<KeyValue> want = canonical(original), got = canonical(r);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].key, want[i].key);
        EXPECT_TRUE(got[i].value == want[i].value) << want[i].key;
    }
}

TEST(ReaderTolerance, CountsAsUint64) {
    const Bytes image = variant([](const std::string& key, Value& v) {
        if (is_arch_key(key) && v.type == ValueType::UINT32) v = converted_integer(v, ValueType::UINT64);
    });
    const Reader r = Reader::parse(image.data(), image.size());
    ASSERT_EQ(r.find("deepseek41.block_count")->type, ValueType::UINT64);
    ASSERT_EQ(r.find("deepseek41.engram.pad_id")->type, ValueType::UINT64);  // what make-model used to write
    expect_reads_the_same(image);
}

TEST(ReaderTolerance, CountsAsInt32) {
    const Bytes image = variant([](const std::string& key, Value& v) {
        if (is_arch_key(key) && v.type == ValueType::UINT32) v = converted_integer(v, ValueType::INT32);
    });
    expect_reads_the_same(image);
}

TEST(ReaderTolerance, FloatsAsFloat64) {
    const Bytes image = variant([](const std::string& key, Value& v) {
        if (is_arch_key(key) && v.type == ValueType::FLOAT32) v = Value::f64(v.f);
        if (is_arch_key(key) && v.type == ValueType::ARRAY && v.elem_type == ValueType::FLOAT32) {
            std::vector<Value> items;
            for (const Value& x : v.items) items.push_back(Value::f64(x.f));
            v = Value::array(ValueType::FLOAT64, std::move(items));
        }
    });
    expect_reads_the_same(image);
}

// llama.cpp's get_key_or_arr keys as one value per layer, and the per-layer clamp as a scalar.
TEST(ReaderTolerance, ScalarsAsPerLayerArraysAndBack) {
    const int64_t n_layer = static_cast<int64_t>(written().get_u64("deepseek41.block_count"));
    const std::set<std::string> per_layer = {"deepseek41.attention.head_count", "deepseek41.attention.head_count_kv",
                                             "deepseek41.expert_used_count", "deepseek41.expert_feed_forward_length"};
    const Bytes image = variant([&](const std::string& key, Value& v) {
        if (per_layer.count(key))
            v = Value::array_u32(std::vector<uint32_t>(static_cast<size_t>(n_layer), static_cast<uint32_t>(v.u)));
        if (key == "deepseek41.swiglu_clamp_exp") v = Value::f32(static_cast<float>(v.items[0].f));
    });
    const Reader r = Reader::parse(image.data(), image.size());
    ASSERT_EQ(r.find("deepseek41.attention.head_count")->type, ValueType::ARRAY);
    ASSERT_EQ(r.find("deepseek41.swiglu_clamp_exp")->type, ValueType::FLOAT32);
    expect_reads_the_same(image);
}

// Integer arrays with the other element types llama.cpp (or only we) accept.
TEST(ReaderTolerance, IntegerArraysOfOtherElementTypes) {
    auto retyped = [](const Value& v, ValueType to) {
        std::vector<Value> items;
        for (const Value& x : v.items) {
            const uint64_t u = x.type == ValueType::INT32 ? static_cast<uint64_t>(x.i) : x.u;
            items.push_back(to == ValueType::UINT32 ? Value::u32(static_cast<uint32_t>(u))
                            : to == ValueType::INT32 ? Value::i32(static_cast<int32_t>(u))
                                                     : Value::u64(u));
        }
        return Value::array(to, std::move(items));
    };
    const Bytes image = variant([&](const std::string& key, Value& v) {
        if (key == "deepseek41.attention.compress_ratios" || key == "deepseek41.engram.layer_ids")
            v = retyped(v, ValueType::UINT32);
        if (key == "deepseek41.engram.token_map") v = retyped(v, ValueType::INT32);
        if (key == "deepseek41.engram.primes" || key == "deepseek41.engram.offsets") v = retyped(v, ValueType::UINT32);
    });
    expect_reads_the_same(image);
}

std::string error_reading(const Bytes& image) {
    try {
        const Reader r = Reader::parse(image.data(), image.size());
        bg::dsv41::read_hparams(r);
    } catch (const bg::Error& e) {
        return e.what();
    }
    return "";
}

void expect_refused(const Bytes& image, const std::string& want) {
    const std::string msg = error_reading(image);
    EXPECT_NE(msg.find(want), std::string::npos) << "error was: '" << msg << "', expected it to contain '" << want << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(ReaderTolerance, WrongTypesStayCleanErrors) {
    expect_refused(variant([](const std::string& key, Value& v) {
                       if (key == "deepseek41.block_count") v = Value::str("40");
                   }),
                   "key 'deepseek41.block_count' has type string, expected uint64");
    expect_refused(variant([](const std::string& key, Value& v) {
                       if (key == "deepseek41.engram.pad_id") v = Value::f32(2.0f);
                   }),
                   "key 'deepseek41.engram.pad_id' has type float32, expected uint64");
    expect_refused(variant([](const std::string& key, Value& v) {
                       if (key == "deepseek41.attention.head_count") v = Value::array_f32({2.0f, 2.0f});
                   }),
                   "key 'deepseek41.attention.head_count' has type array of float32, expected array of uint64");
    expect_refused(variant([](const std::string& key, Value& v) {
                       if (key == "deepseek41.attention.head_count") v = Value::array_u32({2, 2, 4, 2, 2, 2});
                   }),
                   "key 'deepseek41.attention.head_count' differs between layers");
    // One value per main layer at least (a converter also writes the next-n layers').
    expect_refused(variant([](const std::string& key, Value& v) {
                       if (key == "deepseek41.attention.head_count") v = Value::array_u32({2, 2, 2});
                   }),
                   "key 'deepseek41.attention.head_count' has 3 values, expected at least 6");
    expect_refused(variant([](const std::string& key, Value& v) {
                       if (key == "deepseek41.attention.head_count") v = Value::array_u32({});
                   }),
                   "key 'deepseek41.attention.head_count' has 0 values, expected at least 6");
    expect_refused(variant([](const std::string& key, Value& v) {
                       if (key == "deepseek41.rope.freq_base") v = Value::u32(10000);
                   }),
                   "key 'deepseek41.rope.freq_base' has type uint32, expected float32");
}

}  // namespace
