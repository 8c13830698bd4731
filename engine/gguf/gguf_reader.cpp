// GGUF v3 header parser. The input is untrusted: every length is checked against the bytes
// that are actually left before anything is allocated for it, and every failure is one line.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <numeric>

#include "gguf/gguf.h"
#include "gguf/printable.h"
#include "util/check.h"

namespace bg::gguf {

static_assert(std::endian::native == std::endian::little,
              "fields are copied straight from the little-endian file");

namespace {

using ull = unsigned long long;
using ll = long long;

constexpr uint64_t kNone = UINT64_MAX;
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::FLOAT64);

// Smallest possible encodings, used to prove that a count cannot fit in the bytes left.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, value type, a u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset

uint64_t min_encoded_bytes(ValueType t) {
    if (t == ValueType::STRING) return 8;  // the length prefix
    if (t == ValueType::ARRAY) return 12;  // element type and count
    return scalar_bytes(t);
}

uint64_t saturating_mul(uint64_t a, uint64_t b) {
    uint64_t p = 0;
    return __builtin_mul_overflow(a, b, &p) ? UINT64_MAX : p;
}


std::string shape_text(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t d = 0; d < ne.size(); ++d) s += strf(d ? ", %lld" : "%lld", static_cast<ll>(ne[d]));
    return s + "]";
}

// What is being read, rendered only when something goes wrong so the hot path (a 129k-entry
// vocabulary) formats nothing.
struct Where {
    const char* part = "header";
    uint64_t index = kNone;
    const std::string* name = nullptr;
    const char* field = "";
    uint64_t elem = kNone;
};

std::string describe(const Where& w) {
    std::string s = w.part;
    if (w.index != kNone) s += strf(" %llu", static_cast<ull>(w.index));
    if (w.name) s += " ('" + printable(*w.name) + "')";
    if (w.elem != kNone) s += strf(" array element %llu", static_cast<ull>(w.elem));
    if (*w.field) s += std::string(" ") + w.field;
    return s;
}

// Bounded reader over either a memory image or a file read with pread through a small window.
class Cursor {
public:
    Cursor(const uint8_t* mem, uint64_t size) : mem_(mem), size_(size) {}
    Cursor(int fd, uint64_t size) : fd_(fd), size_(size), window_(kWindowBytes) {}

    uint64_t pos() const { return pos_; }
    uint64_t size() const { return size_; }
    uint64_t left() const { return size_ - pos_; }

    void read(void* dst, uint64_t n, const Where& w) {
        if (n > left()) {
            fail("gguf: truncated file while reading %s (%llu bytes needed at offset %llu, %llu left)",
                 describe(w).c_str(), static_cast<ull>(n), static_cast<ull>(pos_),
                 static_cast<ull>(left()));
        }
        if (n == 0) return;
        if (mem_) {
            std::memcpy(dst, mem_ + pos_, n);
            pos_ += n;
        } else {
            read_file(static_cast<uint8_t*>(dst), n, w);
        }
    }

    template <class T>
    T get(const Where& w) {
        T v;
        read(&v, sizeof v, w);
        return v;
    }

private:
    static constexpr size_t kWindowBytes = 1 << 16;

    void read_file(uint8_t* dst, uint64_t n, const Where& w) {
        while (n > 0) {
            if (pos_ >= window_pos_ && pos_ < window_pos_ + window_len_) {
                uint64_t k = std::min(n, window_pos_ + window_len_ - pos_);
                std::memcpy(dst, window_.data() + (pos_ - window_pos_), k);
                dst += k;
                n -= k;
                pos_ += k;
            } else if (n >= window_.size()) {
                pread_full(dst, n, pos_, w);
                pos_ += n;
                n = 0;
            } else {
                uint64_t len = std::min<uint64_t>(window_.size(), size_ - pos_);
                pread_full(window_.data(), len, pos_, w);
                window_pos_ = pos_;
                window_len_ = len;
            }
        }
    }

    void pread_full(uint8_t* dst, uint64_t n, uint64_t off, const Where& w) {
        while (n > 0) {
            size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1ull << 30));
            ssize_t r = ::pread(fd_, dst, chunk, static_cast<off_t>(off));
            if (r < 0) {
                if (errno == EINTR) continue;
                fail("gguf: read error at offset %llu while reading %s: %s", static_cast<ull>(off),
                     describe(w).c_str(), std::strerror(errno));
            }
            if (r == 0) {
                fail("gguf: truncated file while reading %s (file shrank below %llu bytes while "
                     "being read)",
                     describe(w).c_str(), static_cast<ull>(off + 1));
            }
            dst += r;
            n -= static_cast<uint64_t>(r);
            off += static_cast<uint64_t>(r);
        }
    }

    const uint8_t* mem_ = nullptr;
    int fd_ = -1;
    uint64_t size_ = 0;
    uint64_t pos_ = 0;
    std::vector<uint8_t> window_;
    uint64_t window_pos_ = 0;
    uint64_t window_len_ = 0;
};

}  // namespace

std::string printable(const std::string& s) {
    constexpr size_t kMaxShown = 120;
    std::string out;
    for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
            out += strf("\\x%02x", c);
        } else {
            out += static_cast<char>(c);
        }
    }
    if (s.size() > kMaxShown) out += "...";
    return out;
}

class ReaderImpl {
public:
    ReaderImpl(Cursor& cur, const ReaderLimits& limits, Reader& out)
        : cur_(cur), lim_(limits), r_(out) {}

    void run() {
        r_.file_size_ = cur_.size();
        read_header();
        read_kvs();
        take_alignment();
        read_tensor_infos();
        place_data();
        r_.metadata_bytes_ = metadata_bytes_;
        Shard one;
        one.path = r_.path_;
        one.file_size = r_.file_size_;
        one.data_offset = r_.data_offset_;
        one.alignment = r_.alignment_;
        one.tensor_count = r_.tensors_.size();
        for (const TensorInfo& t : r_.tensors_) one.tensor_bytes += t.n_bytes;
        r_.shards_ = {std::move(one)};
    }

private:
    // Counts what the parsed metadata will occupy in memory (which is what a hostile file
    // would try to inflate), charged before the matching allocation.
    void charge(uint64_t bytes, const Where& w) {
        if (__builtin_add_overflow(metadata_bytes_, bytes, &metadata_bytes_) ||
            metadata_bytes_ > lim_.max_metadata_bytes) {
            fail("gguf: metadata exceeds the limit of %llu bytes (while reading %s)",
                 static_cast<ull>(lim_.max_metadata_bytes), describe(w).c_str());
        }
    }

    std::string read_string(const Where& w) {
        uint64_t len = cur_.get<uint64_t>(w);
        if (len > lim_.max_string_bytes) {
            fail("gguf: %s string length %llu exceeds the limit of %llu bytes", describe(w).c_str(),
                 static_cast<ull>(len), static_cast<ull>(lim_.max_string_bytes));
        }
        if (len > cur_.left()) {
            fail("gguf: truncated file while reading %s (string length %llu, only %llu bytes left)",
                 describe(w).c_str(), static_cast<ull>(len), static_cast<ull>(cur_.left()));
        }
        charge(len, w);
        std::string s(len, '\0');
        cur_.read(s.data(), len, w);
        return s;
    }

    ValueType read_value_type(const Where& w, const char* what) {
        uint32_t t = cur_.get<uint32_t>(w);
        if (t > kMaxValueType) {
            Where owner = w;  // the message names the type itself, not the field again
            owner.field = "";
            fail("gguf: %s has unknown %s %u", describe(owner).c_str(), what, t);
        }
        return static_cast<ValueType>(t);
    }

    void read_value(Value& v, ValueType t, const Where& w, uint32_t depth) {
        v.type = t;
        switch (t) {
            case ValueType::UINT8: v.u = cur_.get<uint8_t>(w); return;
            case ValueType::UINT16: v.u = cur_.get<uint16_t>(w); return;
            case ValueType::UINT32: v.u = cur_.get<uint32_t>(w); return;
            case ValueType::UINT64: v.u = cur_.get<uint64_t>(w); return;
            case ValueType::INT8: v.i = cur_.get<int8_t>(w); return;
            case ValueType::INT16: v.i = cur_.get<int16_t>(w); return;
            case ValueType::INT32: v.i = cur_.get<int32_t>(w); return;
            case ValueType::INT64: v.i = cur_.get<int64_t>(w); return;
            case ValueType::FLOAT32: v.f = cur_.get<float>(w); return;
            case ValueType::FLOAT64: v.f = cur_.get<double>(w); return;
            case ValueType::BOOL: {
                uint8_t b = cur_.get<uint8_t>(w);
                if (b > 1) fail("gguf: %s bool is %u (must be 0 or 1)", describe(w).c_str(), b);
                v.u = b;
                return;
            }
            case ValueType::STRING: v.s = read_string(w); return;
            case ValueType::ARRAY: read_array(v, w, depth); return;
        }
        BG_CHECK(false);  // read_value_type admits only the enumerated types
    }

    void read_array(Value& v, Where w, uint32_t depth) {
        if (depth >= lim_.max_array_depth) {
            fail("gguf: %s nests arrays deeper than the limit of %u", describe(w).c_str(),
                 lim_.max_array_depth);
        }
        w.field = "array element type";
        v.elem_type = read_value_type(w, "array element type");
        w.field = "array count";
        uint64_t count = cur_.get<uint64_t>(w);
        if (count > lim_.max_array_elems) {
            fail("gguf: %s %llu exceeds the limit of %llu", describe(w).c_str(),
                 static_cast<ull>(count), static_cast<ull>(lim_.max_array_elems));
        }
        uint64_t min_bytes = min_encoded_bytes(v.elem_type);
        if (count > cur_.left() / min_bytes) {
            fail("gguf: %s %llu is impossible: the %llu bytes left hold at most %llu %s elements "
                 "(truncated file or corrupt count)",
                 describe(w).c_str(), static_cast<ull>(count), static_cast<ull>(cur_.left()),
                 static_cast<ull>(cur_.left() / min_bytes), value_type_name(v.elem_type));
        }
        charge(saturating_mul(count, sizeof(Value)), w);
        v.items.resize(count);
        w.field = "";
        for (uint64_t j = 0; j < count; ++j) {
            w.elem = j;
            read_value(v.items[j], v.elem_type, w, depth + 1);
        }
    }

    void read_header() {
        Where w;
        w.field = "magic";
        uint32_t magic = cur_.get<uint32_t>(w);
        if (magic != kMagic) {
            fail("gguf: bad magic 0x%08x (expected 0x%08x, \"GGUF\"): not a GGUF file", magic,
                 kMagic);
        }
        w.field = "version";
        uint32_t version = cur_.get<uint32_t>(w);
        if (version == __builtin_bswap32(kVersion)) {
            fail("gguf: unsupported version %u (a big-endian GGUF file; only little-endian "
                 "version %u is supported)",
                 version, kVersion);
        }
        if (version != kVersion) {
            fail("gguf: unsupported version %u (only version %u is supported)", version, kVersion);
        }
        r_.version_ = version;
        w.field = "tensor count";
        tensor_count_ = cur_.get<uint64_t>(w);
        w.field = "kv count";
        kv_count_ = cur_.get<uint64_t>(w);

        if (kv_count_ > lim_.max_kv_count) {
            fail("gguf: kv count %llu exceeds the limit of %llu", static_cast<ull>(kv_count_),
                 static_cast<ull>(lim_.max_kv_count));
        }
        if (kv_count_ > cur_.left() / kMinKvBytes) {
            fail("gguf: kv count %llu is impossible: the %llu bytes left hold at most %llu kvs "
                 "(truncated file or corrupt header)",
                 static_cast<ull>(kv_count_), static_cast<ull>(cur_.left()),
                 static_cast<ull>(cur_.left() / kMinKvBytes));
        }
        if (tensor_count_ > lim_.max_tensor_count) {
            fail("gguf: tensor count %llu exceeds the limit of %llu",
                 static_cast<ull>(tensor_count_), static_cast<ull>(lim_.max_tensor_count));
        }
    }

    void read_kvs() {
        Where w0;
        w0.part = "kv";
        charge(saturating_mul(kv_count_, sizeof(KeyValue)), w0);
        r_.kvs_.reserve(kv_count_);
        r_.kv_index_.reserve(kv_count_);
        for (uint64_t i = 0; i < kv_count_; ++i) {
            Where w;
            w.part = "kv";
            w.index = i;
            w.field = "key";
            KeyValue kv;
            kv.key = read_string(w);
            auto [it, fresh] = r_.kv_index_.emplace(kv.key, r_.kvs_.size());
            if (!fresh) {
                fail("gguf: duplicate key '%s' (kv %llu and kv %llu)", printable(kv.key).c_str(),
                     static_cast<ull>(it->second), static_cast<ull>(i));
            }
            w.name = &kv.key;
            w.field = "value type";
            ValueType t = read_value_type(w, "value type");
            w.field = "value";
            read_value(kv.value, t, w, 0);
            r_.kvs_.push_back(std::move(kv));
        }
    }

    void take_alignment() {
        const Value* a = r_.find("general.alignment");
        if (!a) return;
        if (a->type != ValueType::UINT32) {
            fail("gguf: general.alignment has type %s, expected uint32", value_type_name(a->type));
        }
        if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
            fail("gguf: bad alignment %llu in general.alignment (must be a nonzero power of two)",
                 static_cast<ull>(a->u));
        }
        r_.alignment_ = a->u;
    }

    void read_tensor_infos() {
        // Checked here rather than with the header counts so that a file cut short inside the
        // metadata is reported as the truncation it is.
        if (tensor_count_ > cur_.left() / kMinTensorInfoBytes) {
            fail("gguf: tensor count %llu is impossible: the %llu bytes left after the metadata "
                 "hold at most %llu tensor infos (truncated file or corrupt header)",
                 static_cast<ull>(tensor_count_), static_cast<ull>(cur_.left()),
                 static_cast<ull>(cur_.left() / kMinTensorInfoBytes));
        }
        Where w0;
        w0.part = "tensor info";
        charge(saturating_mul(tensor_count_, sizeof(TensorInfo)), w0);
        r_.tensors_.reserve(tensor_count_);
        r_.tensor_index_.reserve(tensor_count_);
        for (uint64_t i = 0; i < tensor_count_; ++i) read_tensor_info(i);
    }

    void read_tensor_info(uint64_t i) {
        Where w;
        w.part = "tensor info";
        w.index = i;
        w.field = "name";
        TensorInfo t;
        t.name = read_string(w);
        auto [it, fresh] = r_.tensor_index_.emplace(t.name, r_.tensors_.size());
        if (!fresh) {
            fail("gguf: duplicate tensor name '%s' (tensors %llu and %llu)",
                 printable(t.name).c_str(), static_cast<ull>(it->second), static_cast<ull>(i));
        }
        std::string shown = printable(t.name);
        const char* name = shown.c_str();
        w.name = &t.name;

        w.field = "n_dims";
        uint32_t n_dims = cur_.get<uint32_t>(w);
        if (n_dims == 0 || n_dims > lim_.max_dims) {
            fail("gguf: tensor '%s' has n_dims %u (must be 1..%u)", name, n_dims, lim_.max_dims);
        }
        charge(uint64_t{n_dims} * sizeof(int64_t), w);
        w.field = "dimensions";
        t.ne.reserve(n_dims);
        uint64_t n_elems = 1;
        bool overflow = false;
        for (uint32_t d = 0; d < n_dims; ++d) {
            int64_t n = static_cast<int64_t>(cur_.get<uint64_t>(w));
            if (n < 1) {
                fail("gguf: tensor '%s' dimension %u is %lld (must be >= 1)", name, d,
                     static_cast<ll>(n));
            }
            t.ne.push_back(n);
            overflow |= __builtin_mul_overflow(n_elems, static_cast<uint64_t>(n), &n_elems);
        }
        // Element counts are int64 elsewhere in the engine, so anything above that overflows too.
        if (overflow || n_elems > static_cast<uint64_t>(INT64_MAX)) {
            fail("gguf: tensor '%s' element count overflows (shape %s)", name,
                 shape_text(t.ne).c_str());
        }
        t.n_elems = n_elems;

        w.field = "type";
        uint32_t type_id = cur_.get<uint32_t>(w);
        const TypeTraits* traits = type_traits(type_id);
        if (!traits) {
            const char* known = ggml_type_name_any(type_id);
            fail("gguf: tensor '%s' has unsupported type id %u (%s)", name, type_id,
                 known ? known : "not a ggml type");
        }
        t.type = static_cast<GgmlType>(type_id);
        if (t.ne[0] % traits->block_elems != 0) {
            fail("gguf: tensor '%s' row of %lld elements is not a multiple of the %s block size %lld",
                 name, static_cast<ll>(t.ne[0]), traits->name,
                 static_cast<ll>(traits->block_elems));
        }
        uint64_t blocks = n_elems / static_cast<uint64_t>(traits->block_elems);
        if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits->block_bytes), &t.n_bytes)) {
            fail("gguf: tensor '%s' byte size overflows (shape %s, type %s)", name,
                 shape_text(t.ne).c_str(), traits->name);
        }

        w.field = "offset";
        t.offset = cur_.get<uint64_t>(w);
        if (t.offset % r_.alignment_ != 0) {
            fail("gguf: tensor '%s' offset %llu is not a multiple of the alignment %llu", name,
                 static_cast<ull>(t.offset), static_cast<ull>(r_.alignment_));
        }
        r_.tensors_.push_back(std::move(t));
    }

    void place_data() {
        uint64_t header_end = cur_.pos();
        uint64_t padded = 0;
        if (__builtin_add_overflow(header_end, r_.alignment_ - 1, &padded) ||
            padded / r_.alignment_ * r_.alignment_ > cur_.size()) {
            fail("gguf: truncated file while reading the padding before the data section (header "
                 "ends at %llu, alignment %llu, file size %llu)",
                 static_cast<ull>(header_end), static_cast<ull>(r_.alignment_),
                 static_cast<ull>(cur_.size()));
        }
        r_.data_offset_ = padded / r_.alignment_ * r_.alignment_;
        uint64_t data_bytes = cur_.size() - r_.data_offset_;

        for (TensorInfo& t : r_.tensors_) {
            if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
                uint64_t start = 0;
                if (__builtin_add_overflow(r_.data_offset_, t.offset, &start)) {
                    fail("gguf: tensor '%s' data [data offset %llu, size %llu] ends past end of "
                         "file (size %llu)",
                         printable(t.name).c_str(), static_cast<ull>(t.offset),
                         static_cast<ull>(t.n_bytes), static_cast<ull>(cur_.size()));
                }
                fail("gguf: tensor '%s' data [offset %llu, size %llu] ends past end of file "
                     "(size %llu)",
                     printable(t.name).c_str(), static_cast<ull>(start),
                     static_cast<ull>(t.n_bytes), static_cast<ull>(cur_.size()));
            }
            t.file_offset = r_.data_offset_ + t.offset;
        }

        std::vector<size_t> order(r_.tensors_.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return r_.tensors_[a].offset < r_.tensors_[b].offset;
        });
        for (size_t k = 1; k < order.size(); ++k) {
            const TensorInfo& a = r_.tensors_[order[k - 1]];
            const TensorInfo& b = r_.tensors_[order[k]];
            // Both lie inside the file, so the sum cannot overflow.
            if (a.offset + a.n_bytes > b.offset) {
                fail("gguf: tensors '%s' [offset %llu, size %llu] and '%s' [offset %llu, size "
                     "%llu] overlap",
                     printable(a.name).c_str(), static_cast<ull>(a.file_offset),
                     static_cast<ull>(a.n_bytes), printable(b.name).c_str(),
                     static_cast<ull>(b.file_offset), static_cast<ull>(b.n_bytes));
            }
        }
    }

    Cursor& cur_;
    const ReaderLimits& lim_;
    Reader& r_;
    uint64_t tensor_count_ = 0;
    uint64_t kv_count_ = 0;
    uint64_t metadata_bytes_ = 0;
};

Reader Reader::parse_image(const Image& image, const ReaderLimits& limits) {
    Cursor cur(image.data, image.data ? image.size : 0);
    Reader r;
    ReaderImpl(cur, limits, r).run();
    return r;
}

Reader Reader::open_file(const std::string& path, const ReaderLimits& limits) {
    std::string shown = printable(path);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("gguf: cannot open '%s': %s", shown.c_str(), std::strerror(errno));
    struct FdCloser {
        int fd;
        ~FdCloser() { ::close(fd); }
    } closer{fd};

    struct stat st {};
    if (::fstat(fd, &st) != 0) fail("gguf: cannot stat '%s': %s", shown.c_str(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("gguf: '%s' is not a regular file", shown.c_str());

    Cursor cur(fd, static_cast<uint64_t>(st.st_size));
    Reader r;
    r.path_ = path;
    try {
        ReaderImpl(cur, limits, r).run();
    } catch (const Error& e) {
        // Name the file, keeping the "gguf: " prefix every message starts with.
        std::string what = e.what();
        const std::string prefix = "gguf: ";
        if (what.compare(0, prefix.size(), prefix) == 0) what.erase(0, prefix.size());
        throw Error(prefix + "'" + shown + "': " + what);
    }
    return r;
}

const Value* Reader::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* Reader::tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---- typed getters ----

namespace {

std::string type_text(const Value& v) {
    if (v.type != ValueType::ARRAY) return value_type_name(v.type);
    return std::string("array of ") + value_type_name(v.elem_type);
}

const Value& need(const Reader& r, const std::string& key) {
    const Value* v = r.find(key);
    if (!v) fail("gguf: missing key '%s'", printable(key).c_str());
    return *v;
}

[[noreturn]] void wrong_type(const std::string& key, const Value& v, const char* expected) {
    fail("gguf: key '%s' has type %s, expected %s", printable(key).c_str(), type_text(v).c_str(),
         expected);
}

bool is_unsigned(ValueType t) {
    return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
           t == ValueType::UINT64;
}
bool is_signed(ValueType t) {
    return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
           t == ValueType::INT64;
}
bool is_integer(ValueType t) { return is_unsigned(t) || is_signed(t); }
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

std::string int_text(const Value& v) {
    return is_unsigned(v.type) ? strf("%llu", static_cast<ull>(v.u)) : strf("%lld", static_cast<ll>(v.i));
}

// Converts an integer value of any width and signedness into [lo, hi], or fails naming it.
__int128 fit_integer(const std::string& key, const Value& v, __int128 lo, __int128 hi,
                     const char* target, uint64_t elem) {
    __int128 x = is_unsigned(v.type) ? static_cast<__int128>(v.u) : static_cast<__int128>(v.i);
    if (x < lo || x > hi) {
        std::string where = elem == kNone ? "" : strf(" element %llu", static_cast<ull>(elem));
        fail("gguf: key '%s'%s value %s does not fit in %s", printable(key).c_str(), where.c_str(),
             int_text(v).c_str(), target);
    }
    return x;
}

const Value& need_array(const Reader& r, const std::string& key, bool (*elem_ok)(ValueType),
                        const char* expected) {
    const Value& v = need(r, key);
    if (v.type != ValueType::ARRAY || !elem_ok(v.elem_type)) wrong_type(key, v, expected);
    return v;
}

}  // namespace

uint64_t Reader::get_u64(const std::string& key) const {
    const Value& v = need(*this, key);
    if (!is_integer(v.type)) wrong_type(key, v, "uint64");
    return static_cast<uint64_t>(fit_integer(key, v, 0, UINT64_MAX, "uint64", kNone));
}

uint32_t Reader::get_u32(const std::string& key) const {
    const Value& v = need(*this, key);
    if (!is_integer(v.type)) wrong_type(key, v, "uint32");
    return static_cast<uint32_t>(fit_integer(key, v, 0, UINT32_MAX, "uint32", kNone));
}

int64_t Reader::get_i64(const std::string& key) const {
    const Value& v = need(*this, key);
    if (!is_integer(v.type)) wrong_type(key, v, "int64");
    return static_cast<int64_t>(fit_integer(key, v, INT64_MIN, INT64_MAX, "int64", kNone));
}

double Reader::get_f64(const std::string& key) const {
    const Value& v = need(*this, key);
    if (!is_float(v.type)) wrong_type(key, v, "float64");
    return v.f;
}

float Reader::get_f32(const std::string& key) const {
    const Value& v = need(*this, key);
    if (!is_float(v.type)) wrong_type(key, v, "float32");
    return static_cast<float>(v.f);
}

bool Reader::get_bool(const std::string& key) const {
    const Value& v = need(*this, key);
    if (v.type != ValueType::BOOL) wrong_type(key, v, "bool");
    return v.u != 0;
}

std::string Reader::get_str(const std::string& key) const {
    const Value& v = need(*this, key);
    if (v.type != ValueType::STRING) wrong_type(key, v, "string");
    return v.s;
}

uint64_t Reader::get_u64_or_uniform_arr(const std::string& key) const {
    const Value& v = need(*this, key);
    if (v.type != ValueType::ARRAY) {
        if (!is_integer(v.type)) wrong_type(key, v, "uint64 or array of uint64");
        return get_u64(key);
    }
    const std::vector<uint64_t> all = get_arr_u64(key);
    if (all.empty()) fail("gguf: key '%s' is an empty array, expected one value per layer", printable(key).c_str());
    for (size_t j = 1; j < all.size(); ++j)
        if (all[j] != all[0])
            fail("gguf: key '%s' varies per layer (%llu at element 0, %llu at element %zu); only one value "
                 "for every layer is supported",
                 printable(key).c_str(), static_cast<ull>(all[0]), static_cast<ull>(all[j]), j);
    return all[0];
}

std::vector<uint64_t> Reader::get_arr_u64(const std::string& key) const {
    const Value& v = need_array(*this, key, is_integer, "array of uint64");
    std::vector<uint64_t> out;
    out.reserve(v.items.size());
    for (size_t j = 0; j < v.items.size(); ++j) {
        out.push_back(static_cast<uint64_t>(fit_integer(key, v.items[j], 0, UINT64_MAX, "uint64", j)));
    }
    return out;
}

std::vector<int64_t> Reader::get_arr_i64(const std::string& key) const {
    const Value& v = need_array(*this, key, is_integer, "array of int64");
    std::vector<int64_t> out;
    out.reserve(v.items.size());
    for (size_t j = 0; j < v.items.size(); ++j) {
        out.push_back(
            static_cast<int64_t>(fit_integer(key, v.items[j], INT64_MIN, INT64_MAX, "int64", j)));
    }
    return out;
}

std::vector<float> Reader::get_arr_f32(const std::string& key) const {
    const Value& v = need_array(*this, key, is_float, "array of float32");
    std::vector<float> out;
    out.reserve(v.items.size());
    for (const Value& x : v.items) out.push_back(static_cast<float>(x.f));
    return out;
}

std::vector<std::string> Reader::get_arr_str(const std::string& key) const {
    const Value& v = need_array(
        *this, key, [](ValueType t) { return t == ValueType::STRING; }, "array of string");
    std::vector<std::string> out;
    out.reserve(v.items.size());
    for (const Value& x : v.items) out.push_back(x.s);
    return out;
}

}  // namespace bg::gguf
