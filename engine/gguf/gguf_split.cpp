// Split naming, the --split-max-size argument, and the shard plan of a split write.
#include "gguf/gguf_split.h"

#include <cctype>

#include "gguf/printable.h"
#include "util/check.h"

namespace bg::gguf {

namespace {

using ull = unsigned long long;

std::string split_suffix(uint32_t split_no, uint32_t split_count) {
    return strf("-%05u-of-%05u.gguf", split_no + 1, split_count);
}

uint64_t pad32(uint64_t n) { return (n + kDefaultAlignment - 1) / kDefaultAlignment * kDefaultAlignment; }

}  // namespace

std::string split_path(const std::string& prefix, uint32_t split_no, uint32_t split_count) {
    return prefix + split_suffix(split_no, split_count);
}

std::optional<std::string> split_prefix(const std::string& path, uint32_t split_no, uint32_t split_count) {
    const std::string suffix = split_suffix(split_no, split_count);
    if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
        return std::nullopt;
    return path.substr(0, path.size() - suffix.size());
}

uint64_t parse_split_max_size(const std::string& text) {
    const std::string shown = printable(text);
    size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    const std::string unit = text.substr(digits);
    uint64_t scale = 0;
    if (unit.empty()) scale = 1;
    else if (unit == "K") scale = 1000;
    else if (unit == "M") scale = 1000 * 1000;
    else if (unit == "G") scale = 1000 * 1000 * 1000;
    if (digits == 0 || scale == 0)
        fail("--split-max-size '%s': expected a positive number of bytes, optionally with the suffix K, M or G "
             "(1e3, 1e6, 1e9 bytes)",
             shown.c_str());
    uint64_t n = 0;
    for (size_t i = 0; i < digits; ++i) {
        if (__builtin_mul_overflow(n, uint64_t{10}, &n) || __builtin_add_overflow(n, uint64_t(text[i] - '0'), &n))
            fail("--split-max-size '%s' is too large", shown.c_str());
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(n, scale, &bytes)) fail("--split-max-size '%s' is too large", shown.c_str());
    if (bytes == 0) fail("--split-max-size '%s' must be positive", shown.c_str());
    return bytes;
}

std::vector<Writer> split_writer(const Writer& whole, uint64_t max_shard_bytes) {
    BG_CHECK(max_shard_bytes > 0);
    const std::vector<TensorInfo>& tensors = whole.tensors();
    // first[k]: index of the first tensor of shard k.
    std::vector<size_t> first = {0};
    uint64_t shard_bytes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const uint64_t n = pad32(tensors[i].n_bytes);
        uint64_t next = 0;
        const bool over = __builtin_add_overflow(shard_bytes, n, &next) || next > max_shard_bytes;
        if (over && i > first.back()) {
            first.push_back(i);
            shard_bytes = n;
        } else {
            shard_bytes = over ? n : next;
        }
    }
    if (first.size() > kMaxSplitCount)
        fail("gguf: splitting at %llu bytes per shard needs %zu shards, more than the %llu split.count can hold",
             static_cast<ull>(max_shard_bytes), first.size(), static_cast<ull>(kMaxSplitCount));
    if (tensors.size() > static_cast<uint64_t>(INT32_MAX))
        fail("gguf: %zu tensors do not fit split.tensors.count (int32)", tensors.size());

    const uint32_t count = static_cast<uint32_t>(first.size());
    std::vector<Writer> shards(count);
    for (uint32_t k = 0; k < count; ++k) {
        Writer& s = shards[k];
        if (k == 0) {
            for (const KeyValue& kv : whole.kvs()) s.set(kv.key, kv.value);
        } else if (whole.alignment() != kDefaultAlignment) {
            // gguf-split leaves the other shards at the default alignment; a file that asks for
            // another keeps it in every shard, so each shard's offsets stay what they mean.
            s.set_alignment(whole.alignment());
        }
        s.set(kSplitNoKey, Value::u16(static_cast<uint16_t>(k)));
        s.set(kSplitCountKey, Value::u16(static_cast<uint16_t>(count)));
        s.set(kSplitTensorsCountKey, Value::i32(static_cast<int32_t>(tensors.size())));
        const size_t end = k + 1 < count ? first[k + 1] : tensors.size();
        for (size_t i = first[k]; i < end; ++i) s.add_tensor(tensors[i].name, tensors[i].ne, tensors[i].type);
    }
    return shards;
}

}  // namespace bg::gguf
