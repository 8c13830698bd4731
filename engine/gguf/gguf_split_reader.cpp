// Opening a model: one file, or the shards of a split one joined into one tensor table.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>

#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "gguf/printable.h"
#include "util/check.h"

namespace bg::gguf {

namespace {

using ull = unsigned long long;

// A split key's value: any integer type, in [0, max]; absent gives nullopt.
std::optional<uint64_t> split_key(const Reader& r, const char* key, uint64_t max, const std::string& where) {
    const Value* v = r.find(key);
    if (!v) return std::nullopt;
    switch (v->type) {
        case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
            if (v->u > max) fail("gguf: %s: %s is %llu, more than %llu", where.c_str(), key, static_cast<ull>(v->u), static_cast<ull>(max));
            return v->u;
        case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
            if (v->i < 0 || static_cast<uint64_t>(v->i) > max)
                fail("gguf: %s: %s is %lld, outside 0..%llu", where.c_str(), key, static_cast<long long>(v->i),
                     static_cast<ull>(max));
            return static_cast<uint64_t>(v->i);
        default:
            fail("gguf: %s: %s has type %s, expected an integer", where.c_str(), key, value_type_name(v->type));
    }
}

}  // namespace

// Joins the shards of a split model, whose first shard is already parsed. `load(i, limits)`
// parses the shard at 0-based position i under what is left of the limits; `name(i)` says
// which file that is in messages.
class ShardJoiner {
public:
    using Load = std::function<Reader(uint32_t, const ReaderLimits&)>;
    using Name = std::function<std::string(uint32_t)>;

    static Reader join(Reader first, uint64_t count, const ReaderLimits& limits, const Load& load, const Name& name) {
        const std::string first_name = name(0);
        const std::optional<uint64_t> no = split_key(first, kSplitNoKey, kMaxSplitCount, first_name);
        if (!no) fail("gguf: %s: split.count is %llu but %s is missing", first_name.c_str(), static_cast<ull>(count), kSplitNoKey);
        if (*no != 0)
            fail("gguf: %s is shard %llu of %llu (split.no %llu); a split model is opened by its first shard",
                 first_name.c_str(), static_cast<ull>(*no + 1), static_cast<ull>(count), static_cast<ull>(*no));
        const std::optional<uint64_t> total = split_key(first, kSplitTensorsCountKey, INT32_MAX, first_name);
        if (!total)
            fail("gguf: %s: split.count is %llu but %s is missing", first_name.c_str(), static_cast<ull>(count),
                 kSplitTensorsCountKey);

        Reader out = std::move(first);
        ReaderLimits left = limits;
        for (uint32_t i = 1; i < count; ++i) {
            left.max_metadata_bytes = limits.max_metadata_bytes - std::min(limits.max_metadata_bytes, out.metadata_bytes_);
            left.max_tensor_count = limits.max_tensor_count - std::min<uint64_t>(limits.max_tensor_count, out.tensors_.size());
            Reader shard = load(i, left);
            const std::string shard_name = name(i);
            const std::string where = strf("shard %u of %llu %s", i + 1, static_cast<ull>(count), shard_name.c_str());
            const std::optional<uint64_t> s_no = split_key(shard, kSplitNoKey, kMaxSplitCount, where);
            const std::optional<uint64_t> s_count = split_key(shard, kSplitCountKey, kMaxSplitCount, where);
            const std::optional<uint64_t> s_total = split_key(shard, kSplitTensorsCountKey, INT32_MAX, where);
            if (!s_no || !s_count || !s_total)
                fail("gguf: %s has no %s key: not a shard of a split model", where.c_str(),
                     !s_no ? kSplitNoKey : !s_count ? kSplitCountKey : kSplitTensorsCountKey);
            if (*s_no != i || *s_count != count || *s_total != *total)
                fail("gguf: %s is not shard %u of %llu of %s: it says it is shard %llu of %llu of a model of %llu "
                     "tensors, the first shard says %llu shards of %llu tensors (a shard of another split model, or "
                     "renamed)",
                     shard_name.c_str(), i + 1, static_cast<ull>(count), first_name.c_str(), static_cast<ull>(*s_no + 1),
                     static_cast<ull>(*s_count), static_cast<ull>(*s_total), static_cast<ull>(count),
                     static_cast<ull>(*total));
            out.metadata_bytes_ += shard.metadata_bytes_;
            Shard info = shard.shards_.at(0);
            out.tensors_.reserve(out.tensors_.size() + shard.tensors_.size());
            for (TensorInfo& t : shard.tensors_) {
                auto [it, fresh] = out.tensor_index_.emplace(t.name, out.tensors_.size());
                if (!fresh)
                    fail("gguf: tensor '%s' is in %s and again in %s", printable(t.name).c_str(),
                         name(out.tensors_[it->second].shard).c_str(), where.c_str());
                t.shard = i;
                out.tensors_.push_back(std::move(t));
            }
            out.shards_.push_back(std::move(info));
        }
        if (out.tensors_.size() != *total)
            fail("gguf: %s: split.tensors.count is %llu but the %llu shards hold %zu tensors", first_name.c_str(),
                 static_cast<ull>(*total), static_cast<ull>(count), out.tensors_.size());
        return out;
    }
};

namespace {

// A path as messages show it (strf, not operator+: gcc 12 warns falsely on "'" + string).
std::string quoted(const std::string& path) { return strf("'%s'", printable(path).c_str()); }

// The split count a parsed file declares: 1 for an unsplit file.
uint64_t declared_count(const Reader& r, const std::string& where) {
    const std::optional<uint64_t> count = split_key(r, kSplitCountKey, kMaxSplitCount, where);
    return count && *count > 1 ? *count : 1;
}

}  // namespace

Reader Reader::open(const std::string& path, const ReaderLimits& limits) {
    Reader first = open_file(path, limits);
    const std::string shown = quoted(path);
    const uint64_t count = declared_count(first, shown);
    if (count == 1) return first;
    const uint32_t n = static_cast<uint32_t>(count);
    const std::optional<uint64_t> no = split_key(first, kSplitNoKey, kMaxSplitCount, shown);
    if (!no) fail("gguf: %s: split.count is %u but %s is missing", shown.c_str(), n, kSplitNoKey);
    if (*no != 0) {
        // A later shard given instead of the first: say which file to give.
        const std::optional<std::string> p = *no < count ? split_prefix(path, static_cast<uint32_t>(*no), n) : std::nullopt;
        const std::string hint = p ? ", " + quoted(split_path(*p, 0, n)) : "";
        fail("gguf: %s is shard %llu of %u (split.no %llu); a split model is opened by its first shard%s", shown.c_str(),
             static_cast<ull>(*no + 1), n, static_cast<ull>(*no), hint.c_str());
    }
    const std::optional<std::string> prefix = split_prefix(path, 0, n);
    if (!prefix)
        fail("gguf: %s has split.count %u but is not named as its first shard ('<prefix>%s'), so its other shards "
             "cannot be found",
             shown.c_str(), n, split_path("", 0, n).c_str());
    std::vector<std::string> paths(n);
    for (uint32_t i = 0; i < n; ++i) paths[i] = i == 0 ? path : split_path(*prefix, i, n);
    auto name = [&](uint32_t i) { return quoted(paths[i]); };
    auto load = [&](uint32_t i, const ReaderLimits& left) {
        if (::access(paths[i].c_str(), F_OK) != 0 && errno == ENOENT)
            fail("gguf: shard %u of %u of %s is missing: no file %s", i + 1, n, shown.c_str(), name(i).c_str());
        return open_file(paths[i], left);
    };
    return ShardJoiner::join(std::move(first), count, limits, load, name);
}

Reader Reader::parse(const uint8_t* data, uint64_t size, const ReaderLimits& limits) {
    return parse_shards({Image{data, size}}, limits);
}

Reader Reader::parse_shards(const std::vector<Image>& images, const ReaderLimits& limits) {
    if (images.empty()) fail("gguf: no file given");
    Reader first = parse_image(images[0], limits);
    auto name = [](uint32_t i) { return strf("shard image %u", i + 1); };
    const uint64_t count = declared_count(first, name(0));
    if (images.size() > count)
        fail("gguf: %zu shard images given but the first declares %llu", images.size(), static_cast<ull>(count));
    if (count == 1) return first;
    auto load = [&](uint32_t i, const ReaderLimits& left) {
        if (i >= images.size())
            fail("gguf: shard %u of %llu is missing (%zu shard images given)", i + 1, static_cast<ull>(count), images.size());
        return parse_image(images[i], left);
    };
    return ShardJoiner::join(std::move(first), count, limits, load, name);
}

uint64_t Reader::total_file_size() const {
    uint64_t n = 0;
    for (const Shard& s : shards_) n += s.file_size;
    return n;
}

}  // namespace bg::gguf
