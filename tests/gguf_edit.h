// Writes a variant of a GGUF file: keys set, replaced or removed, tensors added or stored in
// another type, every other tensor copied byte for byte. Tests use it to make the files a real
// converter or quantizer could write (per-layer arrays of another length, MTP layers, keys
// llama.cpp reads that make-model does not write) from a synthetic model.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/ggml_types.h"
#include "util/file_io.h"

namespace bgtest {

class GgufEdit {
public:
    explicit GgufEdit(std::string src) : src_(std::move(src)), reader_(bg::gguf::Reader::open(src_)) {}

    const bg::gguf::Reader& source() const { return reader_; }

    GgufEdit& set(const std::string& key, bg::gguf::Value v) {
        removed_.erase(key);
        set_[key] = std::move(v);
        return *this;
    }
    GgufEdit& remove(const std::string& key) {
        set_.erase(key);
        removed_.insert(key);
        return *this;
    }
    // A new tensor after the existing ones; `data` holds its bytes in `type`.
    GgufEdit& add_tensor(const std::string& name, std::vector<int64_t> ne, bg::GgmlType type, std::vector<uint8_t> data) {
        added_.push_back({name, std::move(ne), type, std::move(data)});
        return *this;
    }
    // An existing tensor stored as `values` (its elements, as floats) quantised to `type`.
    GgufEdit& retype(const std::string& name, bg::GgmlType type, const std::vector<float>& values) {
        const bg::gguf::TensorInfo* t = reader_.tensor(name);
        const int64_t cols = t->ne[0];
        const uint64_t rows = t->n_elems / static_cast<uint64_t>(cols), rb = bg::row_bytes(type, cols);
        std::vector<uint8_t> bytes(rows * rb);
        for (uint64_t r = 0; r < rows; ++r) bg::quantize_row(type, values.data() + r * cols, bytes.data() + r * rb, cols);
        retyped_[name] = {type, std::move(bytes)};
        return *this;
    }

    // The elements of a source tensor, dequantised.
    std::vector<float> values(const std::string& name) const {
        const bg::gguf::TensorInfo* t = reader_.tensor(name);
        const std::vector<uint8_t> raw = bytes(*t);
        const int64_t cols = t->ne[0];
        const uint64_t rows = t->n_elems / static_cast<uint64_t>(cols), rb = bg::row_bytes(t->type, cols);
        std::vector<float> out(t->n_elems);
        for (uint64_t r = 0; r < rows; ++r) bg::dequantize_row(t->type, raw.data() + r * rb, out.data() + r * cols, cols);
        return out;
    }

    void write(const std::string& path) const {
        bg::gguf::Writer w;
        // general.alignment decides where tensor data starts, so it goes through the writer's
        // own setting rather than as a plain key.
        for (const bg::gguf::KeyValue& kv : reader_.kvs()) {
            if (kv.key == "general.alignment") {
                w.set_alignment(kv.value.u);
                continue;
            }
            if (removed_.count(kv.key)) continue;
            const auto s = set_.find(kv.key);
            w.set(kv.key, s == set_.end() ? kv.value : s->second);
        }
        for (const auto& [k, v] : set_)
            if (!reader_.find(k)) w.set(k, v);
        std::vector<std::vector<uint8_t>> data;
        for (const bg::gguf::TensorInfo& t : reader_.tensors()) {
            const auto r = retyped_.find(t.name);
            if (r != retyped_.end()) {
                w.add_tensor(t.name, t.ne, r->second.first);
                data.push_back(r->second.second);
            } else {
                w.add_tensor(t.name, t.ne, t.type);
                data.push_back(bytes(t));
            }
        }
        for (const Added& a : added_) {
            w.add_tensor(a.name, a.ne, a.type);
            data.push_back(a.data);
        }
        std::vector<const void*> ptrs;
        for (const auto& d : data) ptrs.push_back(d.data());
        w.write_file(path, ptrs);
    }

private:
    struct Added {
        std::string name;
        std::vector<int64_t> ne;
        bg::GgmlType type;
        std::vector<uint8_t> data;
    };

    std::vector<uint8_t> bytes(const bg::gguf::TensorInfo& t) const {
        std::vector<uint8_t> out(t.n_bytes);
        const int fd = ::open(src_.c_str(), O_RDONLY | O_CLOEXEC);
        bg::pread_exact(fd, out.data(), t.n_bytes, t.file_offset, "gguf_edit");
        ::close(fd);
        return out;
    }

    std::string src_;
    bg::gguf::Reader reader_;
    std::map<std::string, bg::gguf::Value> set_;
    std::set<std::string> removed_;
    std::vector<Added> added_;
    std::map<std::string, std::pair<bg::GgmlType, std::vector<uint8_t>>> retyped_;
};

}  // namespace bgtest
