// The input format of fuzz_gguf_split: the images of a split model's shards, each a
// little-endian uint32 length then that many bytes (cut short at the end of the input). Bytes
// after the last whole length (fewer than 4) are dropped; at most kMaxShardImages images are
// read, the last taking every byte left. Shared by the target and the seed writer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace bgfuzz {

constexpr size_t kMaxShardImages = 8;

struct ShardImage {
    const uint8_t* data;
    uint64_t size;
};

inline std::vector<ShardImage> decode_shard_images(const uint8_t* data, size_t size) {
    std::vector<ShardImage> out;
    size_t at = 0;
    while (size - at >= 4) {
        uint32_t n;
        std::memcpy(&n, data + at, 4);
        at += 4;
        const size_t take = out.size() + 1 == kMaxShardImages ? size - at : std::min<size_t>(n, size - at);
        out.push_back({data + at, take});
        at += take;
    }
    return out;
}

inline std::vector<uint8_t> encode_shard_images(const std::vector<std::vector<uint8_t>>& images) {
    std::vector<uint8_t> out;
    for (const std::vector<uint8_t>& im : images) {
        const uint32_t n = static_cast<uint32_t>(im.size());
        const auto* p = reinterpret_cast<const uint8_t*>(&n);
        out.insert(out.end(), p, p + 4);
        out.insert(out.end(), im.begin(), im.end());
    }
    return out;
}

}  // namespace bgfuzz
