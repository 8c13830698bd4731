// Fuzz target: the GGUF reader joining the shards of a split model (llama.cpp's gguf-split
// layout), from in-memory images of each shard (input format: shard_images.h).
//
// A rejected input must raise bg::Error with one line starting "gguf: "; an accepted one must
// keep the reader's promises for a split model: every shard image is used, in order, and holds
// the split keys of the first; the tensor table is every shard's tensors, as many as
// split.tensors.count, no name twice; each tensor lies inside its own shard's data section,
// aligned to that shard's alignment, sized for its type and shape, and disjoint from the other
// tensors of its shard. Anything else is a finding.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "shard_images.h"
#include "util/check.h"

namespace {

void check_accepted(const bg::gguf::Reader& r, const std::vector<bgfuzz::ShardImage>& images) {
    using bgfuzz::finding;
    const auto& shards = r.shards();
    if (shards.empty() || shards.size() > images.size()) finding("shards", "more than the images given");
    if (shards.size() != images.size()) finding("shards", "an image was not used");
    if (r.file_size() != images[0].size) finding("file_size", "differs from the first image");
    uint64_t total = 0;
    for (size_t k = 0; k < shards.size(); ++k) {
        const bg::gguf::Shard& s = shards[k];
        if (s.file_size != images[k].size) finding("shard file_size", "differs from its image");
        if (s.alignment == 0 || (s.alignment & (s.alignment - 1))) finding("shard alignment", "not a power of two");
        if (s.data_offset > s.file_size || s.data_offset % s.alignment) finding("shard data_offset", "outside or unaligned");
        total += s.file_size;
    }
    if (r.total_file_size() != total) finding("total_file_size", "not the sum of the shards");
    if (shards.size() > 1) {
        uint64_t want = 0;
        try {
            want = r.get_u64(bg::gguf::kSplitTensorsCountKey);
        } catch (const bg::Error&) {
            finding("split model", "split.tensors.count unreadable after acceptance");
        }
        if (want != r.tensors().size()) finding("split.tensors.count", "differs from the tensors read");
    }
    std::vector<uint64_t> per_shard(shards.size(), 0), bytes(shards.size(), 0);
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(shards.size());
    std::set<std::string> names;
    uint32_t last_shard = 0;
    for (const bg::gguf::TensorInfo& t : r.tensors()) {
        if (!names.insert(t.name).second) finding("tensor name twice", t.name.c_str());
        if (r.tensor(t.name) != &t) finding("tensor index", t.name.c_str());
        if (t.shard >= shards.size()) finding("tensor shard out of range", t.name.c_str());
        if (t.shard < last_shard) finding("tensors out of shard order", t.name.c_str());
        last_shard = t.shard;
        const bg::gguf::Shard& s = shards[t.shard];
        uint64_t n = 1;
        for (int64_t d : t.ne) {
            if (d < 1) finding("tensor dimension < 1", t.name.c_str());
            n *= static_cast<uint64_t>(d);  // cannot overflow: the reader checked
        }
        if (t.ne.empty() || t.ne.size() > 4 || n != t.n_elems) finding("tensor shape", t.name.c_str());
        uint64_t row = 0;
        if (!bg::row_bytes_checked(t.type, t.ne[0], &row)) finding("tensor row", t.name.c_str());
        if (row * (n / static_cast<uint64_t>(t.ne[0])) != t.n_bytes) finding("tensor n_bytes", t.name.c_str());
        if (t.offset % s.alignment) finding("tensor offset unaligned for its shard", t.name.c_str());
        if (t.file_offset != s.data_offset + t.offset) finding("tensor file_offset", t.name.c_str());
        if (t.file_offset > s.file_size || t.n_bytes > s.file_size - t.file_offset)
            finding("tensor past the end of its shard", t.name.c_str());
        ++per_shard[t.shard];
        bytes[t.shard] += t.n_bytes;
        ranges[t.shard].emplace_back(t.file_offset, t.n_bytes);
    }
    for (size_t k = 0; k < shards.size(); ++k) {
        if (per_shard[k] != shards[k].tensor_count) finding("shard tensor_count", "differs from its tensors");
        if (bytes[k] != shards[k].tensor_bytes) finding("shard tensor_bytes", "differs from its tensors");
        std::sort(ranges[k].begin(), ranges[k].end());
        for (size_t i = 1; i < ranges[k].size(); ++i)
            if (ranges[k][i - 1].first + ranges[k][i - 1].second > ranges[k][i].first) finding("tensors overlap", "");
    }
    for (const bg::gguf::KeyValue& kv : r.kvs())
        if (r.find(kv.key) != &kv.value) finding("kv index", kv.key.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::vector<bgfuzz::ShardImage> images = bgfuzz::decode_shard_images(data, size);
    std::vector<bg::gguf::Image> in;
    for (const bgfuzz::ShardImage& im : images) in.push_back({im.data, im.size});
    try {
        const bg::gguf::Reader r = bg::gguf::Reader::parse_shards(in);
        check_accepted(r, images);
    } catch (const bg::Error& e) {
        bgfuzz::check_error_message(e.what(), "gguf: ");
    }
    return 0;
}
