// GGUF v3 reader and writer: round trips of every value and tensor type, and rejection of
// malformed files (each with the message naming its problem) through both the file and the
// memory path.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/gguf_json.h"
#include "temp_dir.h"
#include "util/check.h"

namespace {

using bgtest::TempDir;

using bg::GgmlType;
using bg::gguf::KeyValue;
using bg::gguf::Reader;
using bg::gguf::ReaderLimits;
using bg::gguf::TensorInfo;
using bg::gguf::Value;
using bg::gguf::ValueType;
using bg::gguf::Writer;
using Bytes = std::vector<uint8_t>;


void write_bytes(const std::string& path, const uint8_t* data, size_t n) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
    ASSERT_TRUE(f.good()) << path;
}

Bytes read_bytes(const std::string& path) { return bgtest::read_file_bytes(path); }

// Runs fn, which must throw a one-line bg::Error starting with "gguf: " that contains `want`.
// Returns the message.
std::string error_of(const std::function<void()>& fn, const std::string& want) {
    try {
        fn();
    } catch (const bg::Error& e) {
        std::string msg = e.what();
        EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwanted: " << want;
        return msg;
    }
    ADD_FAILURE() << "no bg::Error thrown; wanted: " << want;
    return "";
}

// Both entry points must reject the image with the same problem.
void expect_rejected(const Bytes& image, const std::string& want, const ReaderLimits& lim = {}) {
    SCOPED_TRACE("wanted: " + want);
    error_of([&] { Reader::parse(image.data(), image.size(), lim); }, want);
    TempDir dir("bg_gguf_test");
    std::string path = dir.file("bad.gguf");
    write_bytes(path, image.data(), image.size());
    std::string msg = error_of([&] { Reader::open(path, lim); }, want);
    EXPECT_NE(msg.find(path), std::string::npos) << "file errors name the file: " << msg;
}

// Little-endian byte builder for hand-made (often malformed) images.
struct Builder {
    Bytes b;
    template <class T>
    Builder& put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        b.insert(b.end(), p, p + sizeof v);
        return *this;
    }
    Builder& u8(uint8_t v) { return put(v); }
    Builder& u32(uint32_t v) { return put(v); }
    Builder& u64(uint64_t v) { return put(v); }
    Builder& str(const std::string& s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Builder& header(uint64_t tensor_count, uint64_t kv_count) {
        return u32(bg::gguf::kMagic).u32(3).u64(tensor_count).u64(kv_count);
    }
    Builder& pad_to(uint64_t alignment) {
        while (b.size() % alignment) b.push_back(0);
        return *this;
    }
    Builder& zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
};

struct RawTensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    uint64_t offset = 0;
};

// A file with the given tensor infos, an optional general.alignment and `data_bytes` of data.
Bytes image_with(const std::vector<RawTensor>& tensors, uint64_t data_bytes,
                 uint32_t alignment = 0) {
    Builder b;
    b.header(tensors.size(), alignment ? 1 : 0);
    if (alignment) b.str("general.alignment").u32(uint32_t(ValueType::UINT32)).u32(alignment);
    for (const RawTensor& t : tensors) {
        b.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
        for (uint64_t n : t.ne) b.u64(n);
        b.u32(t.type).u64(t.offset);
    }
    b.pad_to(alignment ? alignment : 32).zeros(data_bytes);
    return b.b;
}

// One key with a hand-encoded value (`value` holds type and payload bytes).
Bytes image_with_kv(const std::string& key, const Bytes& value, size_t extra_zeros = 0) {
    Builder b;
    b.header(0, 1).str(key);
    b.b.insert(b.b.end(), value.begin(), value.end());
    b.pad_to(32).zeros(extra_zeros);
    return b.b;
}

Bytes random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    Bytes out(n);
    for (auto& x : out) x = static_cast<uint8_t>(rng());
    return out;
}

// A small file used by the corruption tests: two kvs and two tensors.
struct SmallFile {
    Writer w;
    std::vector<Bytes> data;
    Bytes image;
};

SmallFile small_file() {
    SmallFile f;
    f.w.set("general.name", Value::str("tiny"));
    f.w.set("tiny.sizes", Value::array_u32({1, 2, 3}));
    f.w.add_tensor("wa", {8, 2}, GgmlType::F32);
    f.w.add_tensor("wb", {32}, GgmlType::Q8_0);
    for (const TensorInfo& t : f.w.tensors()) f.data.push_back(random_bytes(t.n_bytes, 7));
    TempDir dir("bg_gguf_test");
    std::string path = dir.file("small.gguf");
    std::vector<const void*> ptrs;
    for (const Bytes& d : f.data) ptrs.push_back(d.data());
    f.w.write_file(path, ptrs);
    f.image = read_bytes(path);
    return f;
}

size_t find_bytes(const Bytes& hay, const std::string& needle) {
    auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
    return it == hay.end() ? std::string::npos : static_cast<size_t>(it - hay.begin());
}

// Byte position of the named tensor's offset field in a Writer-made image.
size_t offset_field_pos(const Bytes& image, const std::string& name, size_t n_dims) {
    size_t at = find_bytes(image, name);
    EXPECT_NE(at, std::string::npos);
    return at + name.size() + 4 + 8 * n_dims + 4;
}

void put_u32_at(Bytes& b, size_t pos, uint32_t v) { std::memcpy(b.data() + pos, &v, 4); }
void put_u64_at(Bytes& b, size_t pos, uint64_t v) { std::memcpy(b.data() + pos, &v, 8); }

Bytes value_bytes(uint32_t type, const Bytes& payload) {
    Builder b;
    b.u32(type);
    b.b.insert(b.b.end(), payload.begin(), payload.end());
    return b.b;
}

// ---------------------------------------------------------------------------------------------
// Round trips

std::vector<KeyValue> every_value() {
    std::vector<KeyValue> kv;
    auto add = [&](const std::string& k, Value v) { kv.push_back({k, std::move(v)}); };
    add("t.u8", Value::u8(250));
    add("t.i8", Value::i8(-128));
    add("t.u16", Value::u16(65535));
    add("t.i16", Value::i16(-32768));
    add("t.u32", Value::u32(4000000000u));
    add("t.i32", Value::i32(-2000000000));
    add("t.f32", Value::f32(1.5f));
    add("t.bool_true", Value::boolean(true));
    add("t.bool_false", Value::boolean(false));
    add("t.str", Value::str("hello"));
    add("t.str_empty", Value::str(""));
    add("t.str_unicode", Value::str("h\xC3\xA9llo \xE2\x9C\x93 \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x9A\x80"));
    add("t.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
    add("t.i64", Value::i64(std::numeric_limits<int64_t>::min()));
    add("t.f64", Value::f64(3.141592653589793));
    add("t.f32_neg_zero", Value::f32(-0.0f));
    add("t.f64_inf", Value::f64(INFINITY));

    add("a.u8", Value::array(ValueType::UINT8, {Value::u8(0), Value::u8(255)}));
    add("a.i8", Value::array(ValueType::INT8, {Value::i8(-1), Value::i8(127)}));
    add("a.u16", Value::array(ValueType::UINT16, {Value::u16(1), Value::u16(65535)}));
    add("a.i16", Value::array(ValueType::INT16, {Value::i16(-300), Value::i16(300)}));
    add("a.u32", Value::array_u32({0, 1, 4294967295u}));
    add("a.i32", Value::array_i32({-7, 0, 2147483647}));
    add("a.f32", Value::array_f32({0.25f, -1e30f, 7.0f}));
    add("a.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
    add("a.str", Value::array_str({"a", "", "\xC3\xBC", "tokens with spaces"}));
    add("a.u64", Value::array_u64({0, 1ull << 40, std::numeric_limits<uint64_t>::max()}));
    add("a.i64", Value::array(ValueType::INT64, {Value::i64(-5), Value::i64(1ll << 50)}));
    add("a.f64", Value::array(ValueType::FLOAT64, {Value::f64(1e-300), Value::f64(-2.5)}));
    add("a.empty", Value::array(ValueType::UINT8, {}));
    add("a.empty_str", Value::array(ValueType::STRING, {}));
    add("a.nested", Value::array(ValueType::ARRAY,
                                 {Value::array_i32({1, 2}), Value::array_i32({}),
                                  Value::array(ValueType::ARRAY, {Value::array_str({"deep"})})}));
    return kv;
}

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
};

std::vector<TensorSpec> every_tensor() {
    return {
        {"f32.1d", {7}, GgmlType::F32},
        {"f16.2d", {3, 5}, GgmlType::F16},
        {"bf16.3d", {2, 3, 4}, GgmlType::BF16},
        {"q8_0.4d", {64, 2, 1, 3}, GgmlType::Q8_0},
        {"mxfp4.2d", {32, 3}, GgmlType::MXFP4},
        {"mxfp4.4d", {64, 1, 2, 2}, GgmlType::MXFP4},
        {"q8_0.1d", {32}, GgmlType::Q8_0},
        {"f32.4d", {1, 1, 1, 1}, GgmlType::F32},
        {"blk.0.\xE2\x9C\x93", {5}, GgmlType::BF16},
        {"q2_K.2d", {256, 3}, GgmlType::Q2_K},
        {"q3_K.1d", {512}, GgmlType::Q3_K},
        {"q4_K.3d", {256, 2, 2}, GgmlType::Q4_K},
        {"q5_K.2d", {768, 1}, GgmlType::Q5_K},
        {"q6_K.2d", {256, 2}, GgmlType::Q6_K},
        {"iq2_xxs.2d", {512, 3}, GgmlType::IQ2_XXS},
    };
}

void expect_same_infos(const std::vector<TensorInfo>& got, const std::vector<TensorInfo>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(want[i].name);
        EXPECT_EQ(got[i].name, want[i].name);
        EXPECT_EQ(got[i].ne, want[i].ne);
        EXPECT_EQ(got[i].type, want[i].type);
        EXPECT_EQ(got[i].offset, want[i].offset);
        EXPECT_EQ(got[i].n_elems, want[i].n_elems);
        EXPECT_EQ(got[i].n_bytes, want[i].n_bytes);
        EXPECT_EQ(got[i].file_offset, want[i].file_offset);
    }
}

void round_trip(uint64_t alignment) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    Writer w;
    std::vector<KeyValue> kvs = every_value();
    for (const KeyValue& kv : kvs) w.set(kv.key, kv.value);
    if (alignment) w.set_alignment(alignment);
    const uint64_t align = alignment ? alignment : bg::gguf::kDefaultAlignment;
    EXPECT_EQ(w.alignment(), align);

    std::vector<Bytes> data;
    for (const TensorSpec& s : every_tensor()) {
        size_t i = w.add_tensor(s.name, s.ne, s.type);
        data.push_back(random_bytes(w.tensors()[i].n_bytes, static_cast<uint32_t>(i + 1)));
    }
    // Expected sizes from the type table, independent of the writer's arithmetic.
    for (const TensorInfo& t : w.tensors()) {
        const bg::TypeTraits& tr = bg::type_traits(t.type);
        uint64_t n = 1;
        for (int64_t d : t.ne) n *= static_cast<uint64_t>(d);
        EXPECT_EQ(t.n_elems, n) << t.name;
        EXPECT_EQ(t.n_bytes, n / tr.block_elems * tr.block_bytes) << t.name;
        EXPECT_EQ(t.offset % align, 0u) << t.name;
        EXPECT_EQ(t.file_offset, w.data_offset() + t.offset) << t.name;
    }

    TempDir dir("bg_gguf_test");
    std::string path = dir.file("all.gguf");
    std::vector<const void*> ptrs;
    for (const Bytes& d : data) ptrs.push_back(d.data());
    w.write_file(path, ptrs);

    const Bytes image = read_bytes(path);
    ASSERT_EQ(image.size(), w.total_size());
    const Bytes header = w.header_bytes();
    ASSERT_EQ(header.size(), w.data_offset());
    EXPECT_TRUE(std::equal(header.begin(), header.end(), image.begin()));

    Reader from_file = Reader::open(path);
    Reader from_mem = Reader::parse(image.data(), image.size());
    for (const Reader* r : {&from_file, &from_mem}) {
        EXPECT_EQ(r->version(), 3u);
        EXPECT_EQ(r->alignment(), align);
        EXPECT_EQ(r->data_offset(), w.data_offset());
        EXPECT_EQ(r->file_size(), image.size());
        ASSERT_EQ(r->kvs().size(), w.kvs().size());
        for (size_t i = 0; i < w.kvs().size(); ++i) {
            EXPECT_EQ(r->kvs()[i].key, w.kvs()[i].key);
            EXPECT_TRUE(r->kvs()[i].value == w.kvs()[i].value) << w.kvs()[i].key;
        }
        for (const KeyValue& kv : kvs) {
            ASSERT_NE(r->find(kv.key), nullptr) << kv.key;
            EXPECT_TRUE(*r->find(kv.key) == kv.value) << kv.key;
        }
        expect_same_infos(r->tensors(), w.tensors());
        for (const TensorSpec& s : every_tensor()) EXPECT_NE(r->tensor(s.name), nullptr) << s.name;
        EXPECT_EQ(r->tensor("absent"), nullptr);
        EXPECT_EQ(r->find("absent"), nullptr);
    }
    EXPECT_EQ(from_file.path(), path);

    // Tensor bytes sit at file_offset; everything between them is zero padding.
    std::vector<bool> covered(image.size(), false);
    for (size_t i = 0; i < data.size(); ++i) {
        const TensorInfo& t = from_file.tensors()[i];
        Bytes got(image.begin() + t.file_offset, image.begin() + t.file_offset + t.n_bytes);
        EXPECT_EQ(got, data[i]) << t.name;
        for (uint64_t k = t.file_offset; k < t.file_offset + t.n_bytes; ++k) covered[k] = true;
    }
    for (size_t k = header.size(); k < image.size(); ++k) {
        if (!covered[k]) {
            ASSERT_EQ(image[k], 0) << "padding byte " << k;
        }
    }
    // Also through pread, the way the engine reads tensors.
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    for (size_t i = 0; i < data.size(); ++i) {
        const TensorInfo& t = from_file.tensors()[i];
        Bytes got(t.n_bytes);
        ASSERT_EQ(::pread(fd, got.data(), got.size(), static_cast<off_t>(t.file_offset)),
                  static_cast<ssize_t>(got.size()));
        EXPECT_EQ(got, data[i]) << t.name;
    }
    ::close(fd);
}

TEST(GgufRoundTrip, EveryValueAndTensorTypeDefaultAlignment) { round_trip(0); }
TEST(GgufRoundTrip, EveryValueAndTensorTypeAlignment64) { round_trip(64); }
TEST(GgufRoundTrip, EveryValueAndTensorTypeAlignment1) { round_trip(1); }
TEST(GgufRoundTrip, EveryValueAndTensorTypeAlignment4096) { round_trip(4096); }

TEST(GgufRoundTrip, EmptyFile) {
    Writer w;
    TempDir dir("bg_gguf_test");
    std::string path = dir.file("empty.gguf");
    w.write_file(path, {});
    Reader r = Reader::open(path);
    EXPECT_TRUE(r.kvs().empty());
    EXPECT_TRUE(r.tensors().empty());
    EXPECT_EQ(r.alignment(), 32u);
    EXPECT_EQ(r.data_offset(), 32u);
    EXPECT_EQ(r.file_size(), 32u);
}

TEST(GgufRoundTrip, SetReplacesKeyAndAlignmentRelaysTensors) {
    Writer w;
    w.set("k", Value::u32(1));
    w.set("k", Value::str("replaced"));
    ASSERT_EQ(w.kvs().size(), 1u);
    EXPECT_EQ(w.kvs()[0].value.s, "replaced");
    w.add_tensor("a", {3}, GgmlType::F32);
    w.add_tensor("b", {3}, GgmlType::F32);
    EXPECT_EQ(w.tensors()[1].offset, 32u);
    w.set_alignment(128);
    EXPECT_EQ(w.tensors()[1].offset, 128u);
    EXPECT_EQ(w.data_offset(), w.header_bytes().size());
    EXPECT_EQ(w.data_offset() % 128, 0u);
    for (const TensorInfo& t : w.tensors()) EXPECT_EQ(t.file_offset, w.data_offset() + t.offset);
    EXPECT_EQ(w.total_size(), w.data_offset() + 256);

    const Bytes hdr = w.header_bytes();
    Bytes image = hdr;
    image.resize(w.total_size(), 0);
    Reader r = Reader::parse(image.data(), image.size());
    EXPECT_EQ(r.alignment(), 128u);
    EXPECT_EQ(r.get_u32("general.alignment"), 128u);
    EXPECT_EQ(r.get_str("k"), "replaced");
    expect_same_infos(r.tensors(), w.tensors());
}

TEST(GgufRoundTrip, WriterOffsetsAfterManyAddsCopiesAndConcurrentReads) {
    Writer w;
    w.set("general.name", Value::str("many"));
    for (int i = 0; i < 3000; ++i) {
        w.add_tensor("t." + std::to_string(i), {32, 1 + i % 3}, i % 2 ? GgmlType::Q8_0 : GgmlType::F32);
    }
    // Several threads asking at once right after the adds, as parallel writers would.
    std::vector<uint64_t> sums(4, 0);
    std::vector<std::thread> threads;
    for (size_t k = 0; k < sums.size(); ++k) {
        threads.emplace_back([&, k] {
            for (const TensorInfo& t : w.tensors()) sums[k] += t.file_offset;
        });
    }
    for (auto& t : threads) t.join();
    uint64_t want = 0;
    for (const TensorInfo& t : w.tensors()) {
        EXPECT_EQ(t.file_offset, w.data_offset() + t.offset);
        want += t.file_offset;
    }
    for (uint64_t s : sums) EXPECT_EQ(s, want);

    Writer copy = w;
    copy.add_tensor("extra", {8}, GgmlType::F32);
    EXPECT_EQ(copy.tensors()[5].file_offset, copy.data_offset() + copy.tensors()[5].offset);
    EXPECT_NE(copy.data_offset(), w.data_offset());
    EXPECT_EQ(w.tensors()[5].file_offset, w.data_offset() + w.tensors()[5].offset);

    Bytes image = w.header_bytes();
    image.resize(w.total_size(), 0);
    Reader r = Reader::parse(image.data(), image.size());
    expect_same_infos(r.tensors(), w.tensors());
}

TEST(GgufRoundTrip, LargeVocabularyThroughFileWindow) {
    // Larger than the reader's read window, so strings straddle window refills.
    std::vector<std::string> vocab;
    for (int i = 0; i < 50000; ++i) vocab.push_back("tok_" + std::to_string(i * 7919));
    vocab.push_back(std::string(200000, 'x'));  // one string bigger than the window
    Writer w;
    w.set("tokenizer.ggml.tokens", Value::array_str(vocab));
    TempDir dir("bg_gguf_test");
    std::string path = dir.file("vocab.gguf");
    w.write_file(path, {});
    Reader r = Reader::open(path);
    EXPECT_EQ(r.get_arr_str("tokenizer.ggml.tokens"), vocab);
}

// ---------------------------------------------------------------------------------------------
// Typed getters

TEST(GgufGetters, ConvertAndReject) {
    Writer w;
    w.set("u8", Value::u8(200));
    w.set("i32neg", Value::i32(-3));
    w.set("i32pos", Value::i32(70000));
    w.set("u64big", Value::u64(1ull << 40));
    w.set("u64huge", Value::u64(std::numeric_limits<uint64_t>::max()));
    w.set("f32", Value::f32(0.5f));
    w.set("f64", Value::f64(0.25));
    w.set("b", Value::boolean(true));
    w.set("s", Value::str("text"));
    w.set("au8", Value::array(ValueType::UINT8, {Value::u8(1), Value::u8(2)}));
    w.set("ai32", Value::array_i32({-1, 5}));
    w.set("af64", Value::array(ValueType::FLOAT64, {Value::f64(1.25)}));
    w.set("as", Value::array_str({"x", "y"}));
    Bytes image = w.header_bytes();
    Reader r = Reader::parse(image.data(), image.size());

    EXPECT_EQ(r.get_u64("u8"), 200u);
    EXPECT_EQ(r.get_u32("u8"), 200u);
    EXPECT_EQ(r.get_i64("u8"), 200);
    EXPECT_EQ(r.get_i64("i32neg"), -3);
    EXPECT_EQ(r.get_u32("i32pos"), 70000u);
    EXPECT_EQ(r.get_u64("u64big"), 1ull << 40);
    EXPECT_FLOAT_EQ(r.get_f32("f32"), 0.5f);
    EXPECT_DOUBLE_EQ(r.get_f64("f32"), 0.5);
    EXPECT_FLOAT_EQ(r.get_f32("f64"), 0.25f);
    EXPECT_TRUE(r.get_bool("b"));
    EXPECT_EQ(r.get_str("s"), "text");
    EXPECT_EQ(r.get_arr_u64("au8"), (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(r.get_arr_i64("ai32"), (std::vector<int64_t>{-1, 5}));
    EXPECT_EQ(r.get_arr_f32("af64"), (std::vector<float>{1.25f}));
    EXPECT_EQ(r.get_arr_str("as"), (std::vector<std::string>{"x", "y"}));

    error_of([&] { r.get_u64("nope"); }, "missing key 'nope'");
    error_of([&] { r.get_str("u8"); }, "key 'u8' has type uint8, expected string");
    error_of([&] { r.get_u64("s"); }, "key 's' has type string, expected uint64");
    error_of([&] { r.get_u64("b"); }, "has type bool, expected uint64");
    error_of([&] { r.get_f32("u8"); }, "has type uint8, expected float32");
    error_of([&] { r.get_bool("u8"); }, "has type uint8, expected bool");
    error_of([&] { r.get_u64("i32neg"); }, "key 'i32neg' value -3 does not fit in uint64");
    error_of([&] { r.get_u32("u64big"); }, "value 1099511627776 does not fit in uint32");
    error_of([&] { r.get_i64("u64huge"); }, "does not fit in int64");
    error_of([&] { r.get_arr_u64("ai32"); }, "key 'ai32' element 0 value -1 does not fit in uint64");
    error_of([&] { r.get_arr_u64("as"); }, "has type array of string, expected array of uint64");
    error_of([&] { r.get_arr_f32("ai32"); }, "has type array of int32, expected array of float32");
    error_of([&] { r.get_arr_str("s"); }, "has type string, expected array of string");
}

// Counts llama.cpp reads with get_key_or_arr: a scalar of any integer type, or one equal value
// per layer.
TEST(GgufGetters, ScalarOrUniformArray) {
    Writer w;
    w.set("u32", Value::u32(7));
    w.set("i64", Value::i64(7));
    w.set("same", Value::array_u32({7, 7, 7}));
    w.set("same64", Value::array_u64({7, 7}));
    w.set("varies", Value::array_u32({7, 7, 8}));
    w.set("empty", Value::array_u32({}));
    w.set("neg", Value::array_i32({-1, -1}));
    w.set("floats", Value::array_f32({7.0f}));
    w.set("s", Value::str("7"));
    Bytes image = w.header_bytes();
    Reader r = Reader::parse(image.data(), image.size());

    EXPECT_EQ(r.get_u64_or_uniform_arr("u32"), 7u);
    EXPECT_EQ(r.get_u64_or_uniform_arr("i64"), 7u);
    EXPECT_EQ(r.get_u64_or_uniform_arr("same"), 7u);
    EXPECT_EQ(r.get_u64_or_uniform_arr("same64"), 7u);
    error_of([&] { r.get_u64_or_uniform_arr("varies"); },
             "key 'varies' varies per layer (7 at element 0, 8 at element 2)");
    error_of([&] { r.get_u64_or_uniform_arr("empty"); }, "key 'empty' is an empty array");
    error_of([&] { r.get_u64_or_uniform_arr("neg"); }, "key 'neg' element 0 value -1 does not fit in uint64");
    error_of([&] { r.get_u64_or_uniform_arr("floats"); }, "has type array of float32, expected array of uint64");
    error_of([&] { r.get_u64_or_uniform_arr("s"); }, "key 's' has type string, expected uint64 or array of uint64");
    error_of([&] { r.get_u64_or_uniform_arr("nope"); }, "missing key 'nope'");
}

// ---------------------------------------------------------------------------------------------
// info --json

TEST(GgufJson, EveryKeyTypeValueAndTensor) {
    Writer w;
    w.set("u64", Value::u64(std::numeric_limits<uint64_t>::max()));
    w.set("i8", Value::i8(-5));
    w.set("f32", Value::f32(1e-6f));
    w.set("b", Value::boolean(true));
    w.set("s", Value::str("text"));
    std::vector<uint32_t> long_array(bg::gguf::kJsonListedElems + 1);
    for (size_t i = 0; i < long_array.size(); ++i) long_array[i] = static_cast<uint32_t>(i * 3);
    w.set("short", Value::array_u32(std::vector<uint32_t>(long_array.begin(), long_array.end() - 1)));
    w.set("long", Value::array_u32(long_array));
    w.set("nested", Value::array(ValueType::ARRAY, {Value::array_i32({-1, 2})}));
    w.add_tensor("t0", {32, 2}, GgmlType::Q8_0);
    w.add_tensor("t1", {3}, GgmlType::F32);
    Bytes image = w.header_bytes();
    image.resize(w.total_size(), 0);
    const nlohmann::json j = bg::gguf::header_json(Reader::parse(image.data(), image.size()));

    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["alignment"], 32);
    EXPECT_EQ(j["data_offset"], w.data_offset());
    const nlohmann::json& m = j["metadata"];
    ASSERT_EQ(m.size(), 8u);
    EXPECT_EQ(m[0], (nlohmann::json{{"key", "u64"}, {"type", "uint64"}, {"value", std::numeric_limits<uint64_t>::max()}}));
    EXPECT_EQ(m[1]["value"], -5);
    EXPECT_EQ(m[2]["type"], "float32");
    EXPECT_EQ(m[2]["value"].get<double>(), static_cast<double>(1e-6f));  // the float's exact value
    EXPECT_EQ(m[3]["value"], true);
    EXPECT_EQ(m[4]["value"], "text");
    EXPECT_EQ(m[5]["elem_type"], "uint32");
    EXPECT_EQ(m[5]["count"], bg::gguf::kJsonListedElems);
    EXPECT_EQ(m[5]["value"].size(), bg::gguf::kJsonListedElems);
    EXPECT_FALSE(m[5].contains("first"));
    EXPECT_EQ(m[6]["count"], bg::gguf::kJsonListedElems + 1);
    EXPECT_FALSE(m[6].contains("value"));
    EXPECT_EQ(m[6]["first"], (nlohmann::json{0, 3, 6, 9, 12, 15, 18, 21}));
    EXPECT_EQ(m[7]["elem_type"], "array");
    EXPECT_EQ(m[7]["value"][0], (nlohmann::json{{"elem_type", "int32"}, {"count", 2}, {"value", {-1, 2}}}));
    const nlohmann::json& t = j["tensors"];
    ASSERT_EQ(t.size(), 2u);
    EXPECT_EQ(t[0], (nlohmann::json{{"name", "t0"}, {"shape", {32, 2}}, {"type", "q8_0"}, {"type_id", 8}, {"offset", 0},
                                    {"file_offset", w.data_offset()}, {"bytes", 68}}));
    EXPECT_EQ(t[1]["offset"], 96);  // 68 rounded up to the alignment
    EXPECT_FALSE(bg::gguf::header_json(Reader::parse(image.data(), image.size()), false).contains("tensors"));
}

// A string may hold any bytes; the JSON replaces what is not UTF-8 instead of failing.
TEST(GgufJson, InvalidUtf8IsReplaced) {
    Writer w;
    w.set("bad\xff", Value::str(std::string("a\xc3(b", 4)));
    Bytes image = w.header_bytes();
    const nlohmann::json j = bg::gguf::header_json(Reader::parse(image.data(), image.size()));
    const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    EXPECT_NE(text.find("\"value\":\"a\xef\xbf\xbd(b\""), std::string::npos) << text;
}

// ---------------------------------------------------------------------------------------------
// Writer validation

TEST(GgufWriter, RejectsBadTensorsAndValues) {
    Writer w;
    w.add_tensor("ok", {32, 2}, GgmlType::Q8_0);
    error_of([&] { w.add_tensor("ok", {32}, GgmlType::F32); }, "duplicate tensor name 'ok'");
    error_of([&] { w.add_tensor("d0", {}, GgmlType::F32); }, "has n_dims 0");
    error_of([&] { w.add_tensor("d5", {1, 1, 1, 1, 1}, GgmlType::F32); }, "has n_dims 5");
    error_of([&] { w.add_tensor("z", {4, 0}, GgmlType::F32); }, "dimension 1 is 0");
    error_of([&] { w.add_tensor("neg", {-4}, GgmlType::F32); }, "dimension 0 is -4");
    error_of([&] { w.add_tensor("q", {33}, GgmlType::Q8_0); },
             "row of 33 elements is not a multiple of the q8_0 block size 32");
    error_of([&] { w.add_tensor("m", {16}, GgmlType::MXFP4); }, "mxfp4 block size 32");
    error_of([&] { w.add_tensor("t", {4}, static_cast<GgmlType>(2)); }, "unsupported type id 2");
    error_of([&] { w.add_tensor("big", {1ll << 32, 1ll << 32}, GgmlType::F32); },
             "element count overflows");
    error_of([&] { w.add_tensor("bytes", {1ll << 31, 1ll << 31}, GgmlType::F32); },
             "byte size overflows");
    EXPECT_EQ(w.tensors().size(), 1u);

    error_of([&] { w.set_alignment(0); }, "bad alignment 0");
    error_of([&] { w.set_alignment(3); }, "bad alignment 3");
    error_of([&] { w.set_alignment(1ull << 32); }, "bad alignment 4294967296");
    error_of([&] { w.set("general.alignment", Value::i32(64)); },
             "general.alignment has type int32, expected uint32");
    error_of([&] { w.set("mixed", Value::array(ValueType::UINT8, {Value::u8(1), Value::i8(1)})); },
             "key 'mixed' array element 1 has type int8, expected uint8");
    Value bad_bool = Value::boolean(true);
    bad_bool.u = 2;
    error_of([&] { w.set("bb", bad_bool); }, "key 'bb' bool value 2 is out of range");
    Value deep = Value::array_u32({1});
    for (int d = 0; d < 4; ++d) deep = Value::array(ValueType::ARRAY, {deep});
    error_of([&] { w.set("deep", deep); }, "nests arrays deeper than the limit of 4");
    EXPECT_TRUE(w.kvs().empty());

    TempDir dir("bg_gguf_test");
    error_of([&] { w.write_file(dir.file("x.gguf"), {}); }, "got 0 data pointers for 1 tensors");
    Bytes buf(w.tensors()[0].n_bytes);
    error_of([&] { w.write_file(dir.path() + "/no/such/dir/x.gguf", {buf.data()}); },
             "cannot create");
    error_of([&] { w.write_file(dir.file("x.gguf"), {nullptr}); }, "no data for tensor 'ok'");
}

// ---------------------------------------------------------------------------------------------
// Malformed files

TEST(GgufMalformed, SmallFileIsValid) {
    SmallFile f = small_file();
    Reader r = Reader::parse(f.image.data(), f.image.size());
    EXPECT_EQ(r.get_str("general.name"), "tiny");
    ASSERT_EQ(r.tensors().size(), 2u);
}

TEST(GgufMalformed, BadMagic) {
    SmallFile f = small_file();
    f.image[0] = 'X';
    expect_rejected(f.image, "bad magic");
    expect_rejected(Bytes{'G', 'G', 'U', 'F'}, "truncated file while reading header version");
}

TEST(GgufMalformed, UnsupportedVersions) {
    for (uint32_t v : {1u, 2u, 4u}) {
        SmallFile f = small_file();
        put_u32_at(f.image, 4, v);
        expect_rejected(f.image, "unsupported version " + std::to_string(v));
    }
    SmallFile f = small_file();
    put_u32_at(f.image, 4, 0x03000000);
    expect_rejected(f.image, "big-endian");
}

TEST(GgufMalformed, TruncatedAtEveryByte) {
    SmallFile f = small_file();
    Reader ok = Reader::parse(f.image.data(), f.image.size());
    const uint64_t data_offset = ok.data_offset();
    // Padding after the last tensor is optional, so every prefix up to the end of its data
    // must fail, and the ones past it must parse.
    uint64_t data_end = 0;
    for (const TensorInfo& t : ok.tensors()) data_end = std::max(data_end, t.file_offset + t.n_bytes);
    ASSERT_LT(data_end, f.image.size());
    for (size_t n = data_end; n <= f.image.size(); ++n) {
        EXPECT_NO_THROW(Reader::parse(f.image.data(), n)) << n;
    }
    TempDir dir("bg_gguf_test");
    std::string path = dir.file("prefix.gguf");
    for (size_t n = 0; n < data_end; ++n) {
        SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
        // Copy into an exact-size buffer so ASan sees any read past the prefix.
        Bytes prefix(f.image.begin(), f.image.begin() + static_cast<ptrdiff_t>(n));
        // Cut inside the header, a count may already be impossible for the bytes left; that
        // message says "truncated file" too.
        std::string want = n < data_offset ? "truncated file" : "past end of file";
        error_of([&] { Reader::parse(prefix.data(), prefix.size()); }, want);
        write_bytes(path, prefix.data(), prefix.size());
        error_of([&] { Reader::open(path); }, want);
    }
    error_of([&] { Reader::parse(nullptr, 0); }, "truncated file while reading header magic");
}

TEST(GgufMalformed, TruncationNamesWhatWasBeingRead) {
    Writer w;
    w.set("general.name", Value::str("names"));
    w.set("arr", Value::array_str({"abc", "defgh"}));
    const std::string long_a = "blk.0.ffn_gate_exps.weight.with.a.long.name";
    const std::string long_b = "blk.0.ffn_down_exps.weight.with.a.long.name";
    w.add_tensor(long_a, {32, 4}, GgmlType::F32);
    w.add_tensor(long_b, {32}, GgmlType::Q8_0);
    const Bytes image = w.header_bytes();
    auto cut_at = [&](size_t n) { return Bytes(image.begin(), image.begin() + static_cast<ptrdiff_t>(n)); };

    expect_rejected(cut_at(find_bytes(image, long_b) + 5),
                    "truncated file while reading tensor info 1 name (string length 43, only 5 bytes left)");
    expect_rejected(cut_at(find_bytes(image, long_b) - 3), "truncated file while reading tensor info 1 name");
    expect_rejected(cut_at(offset_field_pos(image, long_a, 2) + 3),
                    "truncated file while reading tensor info 0 ('" + long_a + "') offset");
    expect_rejected(cut_at(offset_field_pos(image, long_a, 2) - 4 - 2),
                    "truncated file while reading tensor info 0 ('" + long_a + "') dimensions");
    expect_rejected(cut_at(find_bytes(image, "defgh") + 2),
                    "truncated file while reading kv 1 ('arr') array element 1 (string length 5");
    expect_rejected(cut_at(find_bytes(image, "arr") + 2), "truncated file while reading kv 1 key");
    expect_rejected(cut_at(find_bytes(image, "arr") + 3 + 2),
                    "truncated file while reading kv 1 ('arr') value type");
    expect_rejected(cut_at(find_bytes(image, "arr") + 3 + 4 + 1),
                    "truncated file while reading kv 1 ('arr') array element type");
    expect_rejected(cut_at(find_bytes(image, "names") - 1),
                    "truncated file while reading kv 0 ('general.name') value");
    expect_rejected(cut_at(20), "truncated file while reading header kv count");
    expect_rejected(cut_at(2), "truncated file while reading header magic");
    expect_rejected(cut_at(image.size() - 1), "truncated file while reading the padding");
}

TEST(GgufMalformed, TruncatedDataSection) {
    SmallFile f = small_file();
    const TensorInfo& wb = f.w.tensors()[1];
    f.image.resize(wb.file_offset + wb.n_bytes - 1);
    expect_rejected(f.image, "tensor 'wb' data [offset " + std::to_string(wb.file_offset) + ", size " +
                                 std::to_string(wb.n_bytes) + "] ends past end of file (size " +
                                 std::to_string(f.image.size()) + ")");
    expect_rejected(f.image, "ends past end of file");
}

TEST(GgufMalformed, HugeStringLength) {
    Builder b;
    b.header(0, 1).u64(1ull << 62);
    b.zeros(64);
    expect_rejected(b.b, "kv 0 key string length 4611686018427387904 exceeds the limit");
    Builder c;
    c.header(0, 1).str("k").u32(uint32_t(ValueType::STRING)).u64(1000).zeros(40);
    expect_rejected(c.b, "truncated file while reading kv 0 ('k') value (string length 1000");
    ReaderLimits lim;
    lim.max_string_bytes = 4;
    expect_rejected(image_with_kv("k", value_bytes(uint32_t(ValueType::STRING),
                                                   {5, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c', 'd', 'e'})),
                    "string length 5 exceeds the limit of 4 bytes", lim);
    SmallFile f = small_file();
    size_t name_at = find_bytes(f.image, "wb");
    put_u64_at(f.image, name_at - 8, std::numeric_limits<uint64_t>::max());
    expect_rejected(f.image, "tensor info 1 name string length 18446744073709551615 exceeds");
}

TEST(GgufMalformed, HugeArrayCount) {
    Builder v;
    v.u32(uint32_t(ValueType::ARRAY)).u32(uint32_t(ValueType::UINT8)).u64(1ull << 40);
    expect_rejected(image_with_kv("arr", v.b),
                    "kv 0 ('arr') array count 1099511627776 exceeds the limit of 16777216");
    Builder w;
    w.u32(uint32_t(ValueType::ARRAY)).u32(uint32_t(ValueType::UINT64)).u64(1000);
    expect_rejected(image_with_kv("arr", w.b), "kv 0 ('arr') array count 1000 is impossible");
    // A Writer-made array whose count is then inflated.
    SmallFile f = small_file();
    size_t key_at = find_bytes(f.image, "tiny.sizes");
    put_u64_at(f.image, key_at + 10 + 4 + 4, 1ull << 23);
    expect_rejected(f.image, "array count 8388608 is impossible");
}

TEST(GgufMalformed, HugeKvCount) {
    SmallFile f = small_file();
    put_u64_at(f.image, 16, 1ull << 40);
    expect_rejected(f.image, "kv count 1099511627776 exceeds the limit of 65536");
    put_u64_at(f.image, 16, 60000);
    expect_rejected(f.image, "kv count 60000 is impossible");
}

TEST(GgufMalformed, HugeTensorCount) {
    SmallFile f = small_file();
    put_u64_at(f.image, 8, std::numeric_limits<uint64_t>::max());
    expect_rejected(f.image, "tensor count 18446744073709551615 exceeds the limit");
    put_u64_at(f.image, 8, 1000);
    expect_rejected(f.image, "tensor count 1000 is impossible");
    // Fits the bytes after the header but not what the metadata leaves.
    put_u64_at(f.image, 8, (f.image.size() - 24) / 32);
    expect_rejected(f.image, "is impossible");
}

TEST(GgufMalformed, BadDimensionCount) {
    expect_rejected(image_with({{"t", {}, 0, 0}}, 64), "tensor 't' has n_dims 0 (must be 1..4)");
    expect_rejected(image_with({{"t", {1, 1, 1, 1, 1}, 0, 0}}, 64), "tensor 't' has n_dims 5");
    SmallFile f = small_file();
    put_u32_at(f.image, find_bytes(f.image, "wa") + 2, 0x7fffffff);
    expect_rejected(f.image, "tensor 'wa' has n_dims 2147483647");
}

TEST(GgufMalformed, BadDimensions) {
    expect_rejected(image_with({{"t", {4, 0}, 0, 0}}, 64), "tensor 't' dimension 1 is 0");
    expect_rejected(image_with({{"t", {~0ull}, 0, 0}}, 64), "dimension 0 is -1");
    expect_rejected(image_with({{"t", {1ull << 32, 1ull << 32, 2}, 0, 0}}, 64),
                    "tensor 't' element count overflows");
    expect_rejected(image_with({{"t", {1ull << 32, 1ull << 31}, 0, 0}}, 64),
                    "element count overflows");
    expect_rejected(image_with({{"t", {1ull << 31, 1ull << 31}, 0, 0}}, 64),
                    "tensor 't' byte size overflows");
    expect_rejected(image_with({{"t", {1ull << 62}, 0, 0}}, 64), "byte size overflows");
    expect_rejected(image_with({{"t", {33}, 8, 0}}, 64),
                    "row of 33 elements is not a multiple of the q8_0 block size 32");
    expect_rejected(image_with({{"t", {160, 2}, 12, 0}}, 1024),
                    "row of 160 elements is not a multiple of the q4_K block size 256");
}

TEST(GgufMalformed, UnknownTypes) {
    expect_rejected(image_with_kv("k", value_bytes(13, {0})), "kv 0 ('k') has unknown value type 13");
    expect_rejected(image_with_kv("k", value_bytes(0xffffffff, {0})), "unknown value type 4294967295");
    Builder arr;
    arr.u32(uint32_t(ValueType::ARRAY)).u32(77).u64(1).u8(0);
    expect_rejected(image_with_kv("k", arr.b), "has unknown array element type 77");
    // A type ggml defines but the engine does not is named; an id ggml does not define is said so.
    expect_rejected(image_with({{"t", {4}, 2, 0}}, 64), "tensor 't' has unsupported type id 2 (q4_0)");
    expect_rejected(image_with({{"t", {4}, 1000, 0}}, 64), "unsupported type id 1000 (not a ggml type)");
    expect_rejected(image_with({{"t", {4}, 4, 0}}, 64), "unsupported type id 4 (not a ggml type)");  // retired
    SmallFile f = small_file();
    put_u32_at(f.image, offset_field_pos(f.image, "wb", 1) - 4, 29);
    expect_rejected(f.image, "tensor 'wb' has unsupported type id 29 (iq1_m)");
}

TEST(GgufMalformed, BadBool) {
    expect_rejected(image_with_kv("flag", value_bytes(uint32_t(ValueType::BOOL), {2})),
                    "kv 0 ('flag') value bool is 2 (must be 0 or 1)");
    Builder arr;
    arr.u32(uint32_t(ValueType::ARRAY)).u32(uint32_t(ValueType::BOOL)).u64(3).u8(1).u8(0).u8(255);
    expect_rejected(image_with_kv("flags", arr.b), "array element 2 bool is 255");
}

TEST(GgufMalformed, ArraysNestedTooDeep) {
    Builder v;
    v.u32(uint32_t(ValueType::ARRAY));
    for (int d = 0; d < 4; ++d) v.u32(uint32_t(ValueType::ARRAY)).u64(1);
    v.u32(uint32_t(ValueType::UINT8)).u64(1).u8(1);
    expect_rejected(image_with_kv("k", v.b), "nests arrays deeper than the limit of 4");
    ReaderLimits lim;
    lim.max_array_depth = 5;
    Bytes image = image_with_kv("k", v.b);
    Reader r = Reader::parse(image.data(), image.size(), lim);
    EXPECT_EQ(r.find("k")->items[0].items[0].items[0].items[0].items[0].u, 1u);
}

TEST(GgufMalformed, OffsetPastEnd) {
    expect_rejected(image_with({{"t", {4}, 0, 1024}}, 64), "tensor 't' data [offset");
    expect_rejected(image_with({{"t", {4}, 0, 1ull << 63}}, 64), "ends past end of file");
    expect_rejected(image_with({{"t", {4}, 0, ~0ull & ~31ull}}, 64), "ends past end of file");
    SmallFile f = small_file();
    put_u64_at(f.image, offset_field_pos(f.image, "wb", 1), 1ull << 20);
    expect_rejected(f.image, "tensor 'wb' data [offset");
}

TEST(GgufMalformed, MisalignedOffset) {
    expect_rejected(image_with({{"t", {4}, 0, 8}}, 64),
                    "tensor 't' offset 8 is not a multiple of the alignment 32");
    expect_rejected(image_with({{"t", {4}, 0, 64}}, 256, 128), "offset 64 is not a multiple of the alignment 128");
    SmallFile f = small_file();
    put_u64_at(f.image, offset_field_pos(f.image, "wb", 1), 33);
    expect_rejected(f.image, "tensor 'wb' offset 33 is not a multiple of the alignment 32");
}

TEST(GgufMalformed, DuplicateTensorNames) {
    expect_rejected(image_with({{"w", {4}, 0, 0}, {"w", {4}, 0, 32}}, 64),
                    "duplicate tensor name 'w' (tensors 0 and 1)");
    SmallFile f = small_file();
    f.image[find_bytes(f.image, "wb") + 1] = 'a';
    expect_rejected(f.image, "duplicate tensor name 'wa'");
}

TEST(GgufMalformed, DuplicateKeys) {
    Writer w;
    w.set("key.a", Value::u8(1));
    w.set("key.b", Value::str("x"));
    Bytes image = w.header_bytes();
    image[find_bytes(image, "key.b") + 4] = 'a';
    expect_rejected(image, "duplicate key 'key.a' (kv 0 and kv 1)");
    Builder b;
    b.header(0, 2).str("k").u32(uint32_t(ValueType::UINT8)).u8(1);
    b.str("k").u32(uint32_t(ValueType::STRING)).str("x").pad_to(32);
    expect_rejected(b.b, "duplicate key 'k' (kv 0 and kv 1)");
}

TEST(GgufMalformed, OverlappingTensors) {
    // 16 f32 = 64 bytes each; the second starts inside the first.
    expect_rejected(image_with({{"a", {16}, 0, 0}, {"b", {16}, 0, 32}}, 128),
                    "tensors 'a' [offset");
    expect_rejected(image_with({{"late", {16}, 0, 64}, {"early", {32}, 0, 0}}, 256),
                    "tensors 'early' [offset 128, size 128] and 'late' [offset 192, size 64] overlap");
    SmallFile f = small_file();
    put_u64_at(f.image, offset_field_pos(f.image, "wb", 1), 0);
    expect_rejected(f.image, "tensors 'wa'");
    expect_rejected(f.image, "and 'wb'");
    // Same offset, both orders.
    expect_rejected(image_with({{"x", {8}, 0, 0}, {"y", {8}, 0, 0}}, 64), "overlap");
}

TEST(GgufMalformed, BadAlignment) {
    for (uint32_t a : {0u, 3u, 48u}) {
        Builder b;
        b.header(0, 1).str("general.alignment").u32(uint32_t(ValueType::UINT32)).u32(a).pad_to(32);
        expect_rejected(b.b, "bad alignment " + std::to_string(a) + " in general.alignment");
    }
    expect_rejected(image_with_kv("general.alignment",
                                  value_bytes(uint32_t(ValueType::INT32), {32, 0, 0, 0})),
                    "general.alignment has type int32, expected uint32");
    Writer w;
    w.set_alignment(64);
    Bytes image = w.header_bytes();
    put_u32_at(image, find_bytes(image, "general.alignment") + 17 + 4, 0);
    expect_rejected(image, "bad alignment 0");
}

TEST(GgufMalformed, MetadataLimit) {
    std::vector<std::string> many(1000, "tok");
    Writer w;
    w.set("tokens", Value::array_str(many));
    Bytes image = w.header_bytes();
    ReaderLimits lim;
    lim.max_metadata_bytes = 4096;
    expect_rejected(image, "metadata exceeds the limit of 4096 bytes (while reading kv 0 ('tokens')", lim);
    Reader r = Reader::parse(image.data(), image.size());  // the defaults take it
    EXPECT_EQ(r.get_arr_str("tokens").size(), 1000u);
}

TEST(GgufMalformed, FileErrors) {
    TempDir dir("bg_gguf_test");
    error_of([&] { Reader::open(dir.file("missing.gguf")); }, "cannot open");
    error_of([&] { Reader::open(dir.path()); }, "is not a regular file");
}

// Random corruption must end in a clean bg::Error or a valid parse, never a crash (run under
// ASan/UBSan to also rule out silent undefined behaviour).
void fuzz_image(const Bytes& original, uint32_t seed, int iterations, bool through_file) {
    std::mt19937 rng(seed);
    TempDir dir("bg_gguf_test");
    const std::string path = dir.file("fuzz.gguf");
    int rejected = 0;
    for (int iter = 0; iter < iterations; ++iter) {
        Bytes image = original;
        int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            size_t at = rng() % image.size();
            switch (rng() % 3) {
                case 0: image[at] = static_cast<uint8_t>(rng()); break;
                case 1: image[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
                case 2: image[at] = (rng() % 2) ? 0xff : 0x00; break;
            }
        }
        if (rng() % 4 == 0) image.resize(rng() % image.size());
        try {
            if (through_file) {
                write_bytes(path, image.data(), image.size());
                Reader::open(path);
            } else {
                Reader r = Reader::parse(image.data(), image.size());
                for (const TensorInfo& t : r.tensors()) {
                    ASSERT_LE(t.file_offset + t.n_bytes, image.size());
                }
            }
        } catch (const bg::Error& e) {
            ++rejected;
            std::string msg = e.what();
            ASSERT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
            ASSERT_EQ(msg.find('\n'), std::string::npos) << msg;
        }
    }
    EXPECT_GT(rejected, iterations / 10);
}

TEST(GgufMalformed, RandomCorruptionNeverCrashes) {
    SmallFile f = small_file();
    fuzz_image(f.image, 12345, 20000, false);
    fuzz_image(f.image, 777, 300, true);

    // Every value type, nested arrays and every tensor type.
    Writer w;
    for (const KeyValue& kv : every_value()) w.set(kv.key, kv.value);
    for (const TensorSpec& t : every_tensor()) w.add_tensor(t.name, t.ne, t.type);
    Bytes image = w.header_bytes();
    image.resize(w.total_size(), 0);
    fuzz_image(image, 99, 20000, false);
}

}  // namespace
