// GGUF v3 reader and writer.
//
// The reader treats the file as hostile: every read is bounds-checked against the bytes left,
// string and array lengths are capped, element counts and byte sizes are overflow-checked, and
// every tensor must lie inside the file's data section. Any violation is a bg::Error whose
// message is one line naming the problem (e.g. "gguf: tensor 'blk.0.attn_q_a.weight' data
// [offset 123, size 456] ends past end of file (size 400)").
//
// A model split by llama.cpp's gguf-split is read as one: Reader::open takes the first shard,
// finds the others by llama.cpp's naming (gguf_split.h) and checks that they belong together;
// each tensor records the shard that holds its bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/ggml_types.h"

namespace bg::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
    BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);
// Bytes of one encoded scalar of this type; 0 for STRING and ARRAY, whose size depends on content.
uint64_t scalar_bytes(ValueType t);

// One metadata value. Scalars live in the field matching their type class; arrays hold their
// elements in `items` (nested arrays allowed).
struct Value {
    ValueType type = ValueType::UINT8;
    ValueType elem_type = ValueType::UINT8;  // meaningful when type == ARRAY
    uint64_t u = 0;        // UINT8/16/32/64 and BOOL (0/1)
    int64_t i = 0;         // INT8/16/32/64
    double f = 0.0;        // FLOAT32/64
    std::string s;         // STRING
    std::vector<Value> items;  // ARRAY

    static Value u8(uint8_t v);   static Value i8(int8_t v);
    static Value u16(uint16_t v); static Value i16(int16_t v);
    static Value u32(uint32_t v); static Value i32(int32_t v);
    static Value u64(uint64_t v); static Value i64(int64_t v);
    static Value f32(float v);    static Value f64(double v);
    static Value boolean(bool v); static Value str(std::string v);
    static Value array(ValueType elem_type, std::vector<Value> items);
    static Value array_u64(const std::vector<uint64_t>& v);
    static Value array_u32(const std::vector<uint32_t>& v);
    static Value array_i32(const std::vector<int32_t>& v);
    static Value array_f32(const std::vector<float>& v);
    static Value array_str(const std::vector<std::string>& v);

    bool operator==(const Value& o) const;
};

struct KeyValue {
    std::string key;
    Value value;
};

struct TensorInfo {
    std::string name;
    std::vector<int64_t> ne;   // ggml dimension order: ne[0] is the contiguous dimension
    GgmlType type = GgmlType::F32;
    uint64_t offset = 0;       // relative to the data section, as stored in the file
    uint64_t n_elems = 0;
    uint64_t n_bytes = 0;
    uint64_t file_offset = 0;  // absolute in its shard's file: that shard's data_offset + offset
    uint32_t shard = 0;        // the file holding the bytes: an index into Reader::shards()
};

// One file of a model: the whole model, or one shard of a split one.
struct Shard {
    std::string path;           // empty for an in-memory image
    uint64_t file_size = 0;
    uint64_t data_offset = 0;
    uint64_t alignment = kDefaultAlignment;
    uint64_t tensor_count = 0;  // tensors whose bytes this file holds
    uint64_t tensor_bytes = 0;  // their bytes, padding excluded
};

// Limits applied while parsing untrusted files; the defaults are generous for real models
// (a 129,280-entry vocabulary, thousands of tensors) and small enough to stop a hostile file
// from asking for gigabytes.
struct ReaderLimits {
    uint64_t max_string_bytes = 1ull << 20;      // 1 MiB per string
    uint64_t max_array_elems = 1ull << 24;       // 16 M elements per array
    uint64_t max_kv_count = 1ull << 16;
    uint64_t max_tensor_count = 1ull << 20;
    uint64_t max_metadata_bytes = 256ull << 20;  // all metadata together
    uint32_t max_dims = 4;
    uint32_t max_array_depth = 4;
};

// An in-memory image of one file.
struct Image {
    const uint8_t* data = nullptr;
    uint64_t size = 0;
};

class Reader {
public:
    // Parses the header of the file at `path`: a whole model, or the first shard of a split one
    // (split.count > 1), whose other shards are then found by llama.cpp's naming, parsed and
    // checked to belong together (gguf_split.h). Throws bg::Error (one line, naming the file)
    // on any problem.
    static Reader open(const std::string& path, const ReaderLimits& limits = {});
    // Parses an in-memory image of a whole file (used by tests and the fuzzer); one holding the
    // keys of a first shard of several fails as a split model whose other shards are missing.
    static Reader parse(const uint8_t* data, uint64_t size, const ReaderLimits& limits = {});
    // Parses in-memory images of a split model's shards, first shard first (tests, the fuzzer).
    static Reader parse_shards(const std::vector<Image>& shards, const ReaderLimits& limits = {});

    // Of the file at path(): the whole model, or the first shard of a split one.
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    uint64_t file_size() const { return file_size_; }
    const std::string& path() const { return path_; }

    // Every file of the model, in split.no order (one for an unsplit model), and their bytes.
    const std::vector<Shard>& shards() const { return shards_; }
    bool is_split() const { return shards_.size() > 1; }
    uint64_t total_file_size() const;

    // The model's metadata (the first shard's) and the tensors of every shard, shard by shard.
    const std::vector<KeyValue>& kvs() const { return kvs_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }

    // nullptr when absent.
    const Value* find(const std::string& key) const;
    const TensorInfo* tensor(const std::string& name) const;

    // Typed getters: throw bg::Error "gguf: missing key 'k'" or "gguf: key 'k' has type T,
    // expected U" (any integer type converts when the value fits; floats accept F32/F64).
    uint64_t get_u64(const std::string& key) const;
    uint32_t get_u32(const std::string& key) const;
    int64_t get_i64(const std::string& key) const;
    double get_f64(const std::string& key) const;
    float get_f32(const std::string& key) const;
    bool get_bool(const std::string& key) const;
    std::string get_str(const std::string& key) const;
    // A count that may be stored once or once per layer (llama.cpp's get_key_or_arr keys, e.g.
    // attention.head_count): a scalar integer, or a non-empty integer array whose elements are
    // all equal; anything else throws bg::Error naming the key.
    uint64_t get_u64_or_uniform_arr(const std::string& key) const;
    std::vector<uint64_t> get_arr_u64(const std::string& key) const;
    std::vector<int64_t> get_arr_i64(const std::string& key) const;
    std::vector<float> get_arr_f32(const std::string& key) const;
    std::vector<std::string> get_arr_str(const std::string& key) const;

private:
    // One file on its own, split keys not followed (gguf_reader.cpp).
    static Reader open_file(const std::string& path, const ReaderLimits& limits);
    static Reader parse_image(const Image& image, const ReaderLimits& limits);

    std::string path_;
    uint32_t version_ = 0;
    uint64_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    uint64_t file_size_ = 0;
    uint64_t metadata_bytes_ = 0;  // charged against ReaderLimits::max_metadata_bytes
    std::vector<Shard> shards_;
    std::vector<KeyValue> kvs_;
    std::vector<TensorInfo> tensors_;
    // Name -> index, so lookups stay cheap for files with tens of thousands of tensors.
    std::unordered_map<std::string, size_t> kv_index_;
    std::unordered_map<std::string, size_t> tensor_index_;
    friend class ReaderImpl;
    friend class ShardJoiner;
};

// Builds a GGUF v3 header. Tensor data is laid out in the order tensors are added, each
// starting at a multiple of the alignment. The caller writes the data itself (make-model
// writes it in parallel with large aligned pwrite calls) or through write_file for small files.
class Writer {
public:
    void set(const std::string& key, Value v);  // replaces an existing key
    // Adds a tensor; returns its index. Throws bg::Error for a duplicate name, a bad shape or a
    // row that is not a whole number of blocks.
    size_t add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type);

    const std::vector<KeyValue>& kvs() const { return kvs_; }
    // Tensor infos with offset, n_elems, n_bytes and file_offset filled in (valid after any add).
    const std::vector<TensorInfo>& tensors() const;

    uint64_t alignment() const { return alignment_; }
    void set_alignment(uint64_t a);  // power of two; also stored as general.alignment

    // Serialised header including padding up to the data section.
    std::vector<uint8_t> header_bytes() const;
    uint64_t data_offset() const;    // == header_bytes().size()
    uint64_t total_size() const;     // data_offset + data bytes (last tensor padded)

    // Writes a whole file: header, then each tensor's bytes from `data[i]` (n_bytes each).
    void write_file(const std::string& path, const std::vector<const void*>& data) const;

private:
    void relayout();  // recomputes offsets after the alignment changes

    // Every add grows the header and so moves every tensor's file_offset; refreshing them on
    // each add made adding n tensors O(n^2), so tensors() refreshes them once, on demand, and
    // the lock keeps concurrent const callers (parallel writers) race-free.
    struct FileOffsetsState {
        std::mutex mu;
        std::atomic<uint64_t> base{UINT64_MAX};  // data_offset the file offsets hold, or stale
        FileOffsetsState() = default;
        FileOffsetsState(const FileOffsetsState&) {}
        FileOffsetsState& operator=(const FileOffsetsState&) {
            base.store(UINT64_MAX);
            return *this;
        }
    };

    uint64_t alignment_ = kDefaultAlignment;
    uint64_t data_bytes_ = 0;
    // Serialised sizes kept up to date on every change, so data_offset() is O(1).
    uint64_t kv_bytes_ = 0;
    uint64_t info_bytes_ = 0;
    std::vector<KeyValue> kvs_;
    mutable std::vector<TensorInfo> tensors_;
    mutable FileOffsetsState file_offsets_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace bg::gguf
