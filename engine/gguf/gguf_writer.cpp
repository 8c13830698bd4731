// GGUF v3 header builder and small-file writer.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>

#include "gguf/gguf.h"
#include "util/check.h"

namespace bg::gguf {

static_assert(std::endian::native == std::endian::little,
              "fields are copied straight into the little-endian file");

namespace {

using ull = unsigned long long;
using ll = long long;

constexpr uint64_t kFixedHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, tensor and kv counts
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::FLOAT64);

bool is_power_of_two(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

uint64_t value_bytes(const Value& v) {
    if (v.type == ValueType::STRING) return 8 + v.s.size();
    if (v.type != ValueType::ARRAY) {
        const uint64_t n = scalar_bytes(v.type);
        BG_CHECK(n > 0);  // a scalar of a known type (validate_value ran first)
        return n;
    }
    uint64_t n = 4 + 8;
    for (const Value& x : v.items) n += value_bytes(x);
    return n;
}

uint64_t kv_bytes(const std::string& key, const Value& v) {
    return 8 + key.size() + 4 + value_bytes(v);
}

uint64_t tensor_info_bytes(const TensorInfo& t) {
    return 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
}

// Rejects values the writer could not encode faithfully or the default reader would refuse,
// so a bad value fails here, naming its key, rather than in whoever reads the file.
void validate_value(const std::string& key, const Value& v, uint32_t depth) {
    const char* k = key.c_str();
    auto unsigned_max = [&](uint64_t max) {
        if (v.u > max) {
            fail("gguf: key '%s' %s value %llu is out of range", k, value_type_name(v.type),
                 static_cast<ull>(v.u));
        }
    };
    auto signed_range = [&](int64_t lo, int64_t hi) {
        if (v.i < lo || v.i > hi) {
            fail("gguf: key '%s' %s value %lld is out of range", k, value_type_name(v.type),
                 static_cast<ll>(v.i));
        }
    };
    if (static_cast<uint32_t>(v.type) > kMaxValueType) {
        fail("gguf: key '%s' has unknown value type %u", k, static_cast<uint32_t>(v.type));
    }
    switch (v.type) {
        case ValueType::UINT8: unsigned_max(UINT8_MAX); return;
        case ValueType::UINT16: unsigned_max(UINT16_MAX); return;
        case ValueType::UINT32: unsigned_max(UINT32_MAX); return;
        case ValueType::BOOL: unsigned_max(1); return;
        case ValueType::INT8: signed_range(INT8_MIN, INT8_MAX); return;
        case ValueType::INT16: signed_range(INT16_MIN, INT16_MAX); return;
        case ValueType::INT32: signed_range(INT32_MIN, INT32_MAX); return;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT32:
        case ValueType::FLOAT64:
        case ValueType::STRING: return;
        case ValueType::ARRAY: break;
    }
    const ReaderLimits defaults;
    if (depth >= defaults.max_array_depth) {
        fail("gguf: key '%s' nests arrays deeper than the limit of %u", k, defaults.max_array_depth);
    }
    if (static_cast<uint32_t>(v.elem_type) > kMaxValueType) {
        fail("gguf: key '%s' has unknown array element type %u", k,
             static_cast<uint32_t>(v.elem_type));
    }
    for (size_t j = 0; j < v.items.size(); ++j) {
        if (v.items[j].type != v.elem_type) {
            fail("gguf: key '%s' array element %zu has type %s, expected %s", k, j,
                 value_type_name(v.items[j].type), value_type_name(v.elem_type));
        }
        validate_value(key, v.items[j], depth + 1);
    }
}

// Serialises into a buffer already sized to the exact header length, which the running byte
// counts predict; overrunning it would mean those counts are wrong.
class Out {
public:
    explicit Out(std::vector<uint8_t>& b) : b_(b) {}

    size_t pos() const { return pos_; }

    void put_raw(const void* p, size_t n) {
        BG_CHECK(n <= b_.size() - pos_);
        if (n) std::memcpy(b_.data() + pos_, p, n);
        pos_ += n;
    }
    template <class T>
    void put(T v) {
        put_raw(&v, sizeof v);
    }
    void put_str(const std::string& s) {
        put<uint64_t>(s.size());
        put_raw(s.data(), s.size());
    }
    void put_value(const Value& v) {
        switch (v.type) {
            case ValueType::UINT8:
            case ValueType::BOOL: put(static_cast<uint8_t>(v.u)); return;
            case ValueType::UINT16: put(static_cast<uint16_t>(v.u)); return;
            case ValueType::UINT32: put(static_cast<uint32_t>(v.u)); return;
            case ValueType::UINT64: put(v.u); return;
            case ValueType::INT8: put(static_cast<int8_t>(v.i)); return;
            case ValueType::INT16: put(static_cast<int16_t>(v.i)); return;
            case ValueType::INT32: put(static_cast<int32_t>(v.i)); return;
            case ValueType::INT64: put(v.i); return;
            case ValueType::FLOAT32: put(static_cast<float>(v.f)); return;
            case ValueType::FLOAT64: put(v.f); return;
            case ValueType::STRING: put_str(v.s); return;
            case ValueType::ARRAY:
                put(static_cast<uint32_t>(v.elem_type));
                put<uint64_t>(v.items.size());
                for (const Value& x : v.items) put_value(x);
                return;
        }
        BG_CHECK(false);  // set() validated the type
    }

private:
    std::vector<uint8_t>& b_;
    size_t pos_ = 0;
};

void write_all(int fd, const std::string& path, const void* data, uint64_t n, uint64_t off) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1ull << 30));
        ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(off));
        if (w < 0) {
            if (errno == EINTR) continue;
            fail("gguf: write to '%s' failed at offset %llu: %s", path.c_str(),
                 static_cast<ull>(off), std::strerror(errno));
        }
        if (w == 0) {
            fail("gguf: write to '%s' made no progress at offset %llu", path.c_str(),
                 static_cast<ull>(off));
        }
        p += w;
        n -= static_cast<uint64_t>(w);
        off += static_cast<uint64_t>(w);
    }
}

void write_zeros(int fd, const std::string& path, uint64_t n, uint64_t off) {
    static const uint8_t kZeros[1 << 16] = {};
    while (n > 0) {
        uint64_t k = std::min<uint64_t>(n, sizeof kZeros);
        write_all(fd, path, kZeros, k, off);
        n -= k;
        off += k;
    }
}

}  // namespace

void Writer::set(const std::string& key, Value v) {
    validate_value(key, v, 0);
    bool is_alignment = key == "general.alignment";
    if (is_alignment) {
        if (v.type != ValueType::UINT32) {
            fail("gguf: general.alignment has type %s, expected uint32", value_type_name(v.type));
        }
        if (!is_power_of_two(v.u)) {
            fail("gguf: bad alignment %llu (must be a nonzero power of two)",
                 static_cast<ull>(v.u));
        }
    }
    uint64_t bytes = kv_bytes(key, v);
    auto it = kv_index_.find(key);
    if (it != kv_index_.end()) {
        KeyValue& kv = kvs_[it->second];
        kv_bytes_ -= kv_bytes(kv.key, kv.value);
        kv.value = std::move(v);
    } else {
        kv_index_.emplace(key, kvs_.size());
        kvs_.push_back({key, std::move(v)});
    }
    kv_bytes_ += bytes;
    if (is_alignment) {
        alignment_ = kvs_[kv_index_.at(key)].value.u;
        relayout();
    }
    file_offsets_.base.store(UINT64_MAX);
}

void Writer::set_alignment(uint64_t a) {
    if (!is_power_of_two(a) || a > UINT32_MAX) {
        fail("gguf: bad alignment %llu (must be a nonzero power of two that fits in uint32)",
             static_cast<ull>(a));
    }
    set("general.alignment", Value::u32(static_cast<uint32_t>(a)));
}

size_t Writer::add_tensor(const std::string& name, const std::vector<int64_t>& ne, GgmlType type) {
    const char* n = name.c_str();
    const uint32_t type_id = static_cast<uint32_t>(type);
    const TypeTraits* traits = type_traits(type_id);
    if (!traits) fail("gguf: tensor '%s' has unsupported type id %u", n, type_id);
    if (ne.empty() || ne.size() > 4) {
        fail("gguf: tensor '%s' has n_dims %zu (must be 1..4)", n, ne.size());
    }
    uint64_t n_elems = 1;
    bool overflow = false;
    for (size_t d = 0; d < ne.size(); ++d) {
        if (ne[d] < 1) {
            fail("gguf: tensor '%s' dimension %zu is %lld (must be >= 1)", n, d,
                 static_cast<ll>(ne[d]));
        }
        overflow |= __builtin_mul_overflow(n_elems, static_cast<uint64_t>(ne[d]), &n_elems);
    }
    if (overflow || n_elems > static_cast<uint64_t>(INT64_MAX)) {
        fail("gguf: tensor '%s' element count overflows", n);
    }
    if (ne[0] % traits->block_elems != 0) {
        fail("gguf: tensor '%s' row of %lld elements is not a multiple of the %s block size %lld",
             n, static_cast<ll>(ne[0]), traits->name, static_cast<ll>(traits->block_elems));
    }
    uint64_t n_bytes = 0;
    uint64_t blocks = n_elems / static_cast<uint64_t>(traits->block_elems);
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits->block_bytes), &n_bytes)) {
        fail("gguf: tensor '%s' byte size overflows", n);
    }
    if (tensor_index_.count(name)) fail("gguf: duplicate tensor name '%s'", n);

    uint64_t offset = align_up(data_bytes_, alignment_);
    uint64_t end = 0;
    if (offset < data_bytes_ || __builtin_add_overflow(offset, n_bytes, &end)) {
        fail("gguf: tensor '%s' data would end past 2^64 bytes", n);
    }

    TensorInfo t;
    t.name = name;
    t.ne = ne;
    t.type = type;
    t.offset = offset;
    t.n_elems = n_elems;
    t.n_bytes = n_bytes;
    info_bytes_ += tensor_info_bytes(t);
    data_bytes_ = end;
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(t));
    file_offsets_.base.store(UINT64_MAX);
    return tensors_.size() - 1;
}

void Writer::relayout() {
    data_bytes_ = 0;
    for (TensorInfo& t : tensors_) {
        t.offset = align_up(data_bytes_, alignment_);
        data_bytes_ = t.offset + t.n_bytes;
    }
    file_offsets_.base.store(UINT64_MAX);
}

const std::vector<TensorInfo>& Writer::tensors() const {
    const uint64_t base = data_offset();
    if (file_offsets_.base.load(std::memory_order_acquire) != base) {
        std::lock_guard<std::mutex> lock(file_offsets_.mu);
        if (file_offsets_.base.load(std::memory_order_relaxed) != base) {
            for (TensorInfo& t : tensors_) t.file_offset = base + t.offset;
            file_offsets_.base.store(base, std::memory_order_release);
        }
    }
    return tensors_;
}

uint64_t Writer::data_offset() const {
    return align_up(kFixedHeaderBytes + kv_bytes_ + info_bytes_, alignment_);
}

uint64_t Writer::total_size() const { return data_offset() + align_up(data_bytes_, alignment_); }

std::vector<uint8_t> Writer::header_bytes() const {
    std::vector<uint8_t> b(data_offset(), 0);  // the tail left zero is the padding
    Out out(b);
    out.put(kMagic);
    out.put(kVersion);
    out.put<uint64_t>(tensors_.size());
    out.put<uint64_t>(kvs_.size());
    for (const KeyValue& kv : kvs_) {
        out.put_str(kv.key);
        out.put(static_cast<uint32_t>(kv.value.type));
        out.put_value(kv.value);
    }
    for (const TensorInfo& t : tensors_) {
        out.put_str(t.name);
        out.put(static_cast<uint32_t>(t.ne.size()));
        for (int64_t n : t.ne) out.put<uint64_t>(static_cast<uint64_t>(n));
        out.put(static_cast<uint32_t>(t.type));
        out.put(t.offset);
    }
    BG_CHECK(b.size() - out.pos() < alignment_);
    return b;
}

void Writer::write_file(const std::string& path, const std::vector<const void*>& data) const {
    if (data.size() != tensors_.size()) {
        fail("gguf: write_file got %zu data pointers for %zu tensors", data.size(), tensors_.size());
    }
    for (size_t i = 0; i < data.size(); ++i) {
        if (!data[i]) fail("gguf: write_file got no data for tensor '%s'", tensors_[i].name.c_str());
    }
    const std::vector<TensorInfo>& infos = tensors();
    const std::vector<uint8_t> header = header_bytes();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("gguf: cannot create '%s': %s", path.c_str(), std::strerror(errno));
    try {
        write_all(fd, path, header.data(), header.size(), 0);
        uint64_t pos = header.size();
        for (size_t i = 0; i < infos.size(); ++i) {
            const TensorInfo& t = infos[i];
            write_zeros(fd, path, t.file_offset - pos, pos);
            write_all(fd, path, data[i], t.n_bytes, t.file_offset);
            pos = t.file_offset + t.n_bytes;
        }
        write_zeros(fd, path, total_size() - pos, pos);
    } catch (...) {
        // A half-written model file would only fail later, far from the cause.
        ::close(fd);
        ::unlink(path.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        int err = errno;
        ::unlink(path.c_str());
        fail("gguf: closing '%s' failed: %s", path.c_str(), std::strerror(err));
    }
}

}  // namespace bg::gguf
