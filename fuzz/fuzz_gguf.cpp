// Fuzz target: the GGUF v3 header reader on an in-memory image of a whole file.
//
// A rejected input must raise bg::Error with one line starting "gguf: "; an accepted one must
// satisfy what the reader promises its callers (every tensor inside the data section, aligned,
// sized for its type and shape, no two overlapping). Anything else — another exception, a
// sanitizer report, a broken promise — is a finding.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "util/check.h"

namespace {

void check_accepted(const bg::gguf::Reader& r, uint64_t size) {
    using bgfuzz::finding;
    if (r.file_size() != size) finding("file_size", "differs from the input size");
    if (r.alignment() == 0 || (r.alignment() & (r.alignment() - 1))) finding("alignment", "not a power of two");
    if (r.data_offset() > size || r.data_offset() % r.alignment()) finding("data_offset", "outside the file or unaligned");
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const bg::gguf::TensorInfo& t : r.tensors()) {
        if (r.tensor(t.name) != &t) finding("tensor index", t.name.c_str());
        if (t.ne.empty() || t.ne.size() > 4) finding("tensor dims", t.name.c_str());
        uint64_t n = 1;
        for (int64_t d : t.ne) {
            if (d < 1) finding("tensor dimension < 1", t.name.c_str());
            n *= static_cast<uint64_t>(d);  // cannot overflow: the reader checked
        }
        if (n != t.n_elems) finding("tensor n_elems", t.name.c_str());
        uint64_t row = 0;
        if (!bg::row_bytes_checked(t.type, t.ne[0], &row)) finding("tensor row", t.name.c_str());
        if (row * (n / static_cast<uint64_t>(t.ne[0])) != t.n_bytes) finding("tensor n_bytes", t.name.c_str());
        if (t.offset % r.alignment()) finding("tensor offset unaligned", t.name.c_str());
        if (t.file_offset != r.data_offset() + t.offset) finding("tensor file_offset", t.name.c_str());
        if (t.file_offset > size || t.n_bytes > size - t.file_offset) finding("tensor past end of file", t.name.c_str());
        ranges.emplace_back(t.file_offset, t.n_bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) finding("tensors overlap", "");
    for (const bg::gguf::KeyValue& kv : r.kvs())
        if (r.find(kv.key) != &kv.value) finding("kv index", kv.key.c_str());
}

// The typed getters take any key; a wrong type or range is an error, never a crash.
void exercise_getters(const bg::gguf::Reader& r) {
    for (const bg::gguf::KeyValue& kv : r.kvs()) {
        auto each = [&](auto&& f) {
            try {
                f();
            } catch (const bg::Error& e) {
                bgfuzz::check_error_message(e.what(), "gguf: ");
            }
        };
        each([&] { (void)r.get_u64(kv.key); });
        each([&] { (void)r.get_u32(kv.key); });
        each([&] { (void)r.get_i64(kv.key); });
        each([&] { (void)r.get_f64(kv.key); });
        each([&] { (void)r.get_f32(kv.key); });
        each([&] { (void)r.get_bool(kv.key); });
        each([&] { (void)r.get_str(kv.key); });
        each([&] { (void)r.get_arr_u64(kv.key); });
        each([&] { (void)r.get_arr_i64(kv.key); });
        each([&] { (void)r.get_arr_f32(kv.key); });
        each([&] { (void)r.get_arr_str(kv.key); });
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const bg::gguf::Reader r = bg::gguf::Reader::parse(data, size);
        check_accepted(r, size);
        exercise_getters(r);
    } catch (const bg::Error& e) {
        bgfuzz::check_error_message(e.what(), "gguf: ");
    }
    return 0;
}
