// Writes a variant of a GGUF file: keys set, replaced or removed, tensors added, removed or
// stored in another type; every other key and tensor is copied unchanged (tensor bytes
// byte-identical). Tests use it to make the files a real converter or quantizer could write
// (per-layer arrays of another length, MTP layers, keys make-model does not write) from a
// synthetic model, without a second generator.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/ggml_types.h"

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
    // Appended after the copied tensors; `bytes` must be exactly the tensor's size.
    GgufEdit& add_tensor(const std::string& name, std::vector<int64_t> ne, bg::GgmlType type,
                         std::vector<uint8_t> bytes) {
        added_.push_back({name, std::move(ne), type, std::move(bytes)});
        return *this;
    }
    GgufEdit& remove_tensor(const std::string& name) {
        dropped_.insert(name);
        return *this;
    }
    // Keeps the tensor's place and shape; stores `bytes` (its data in the new type) instead.
    GgufEdit& retype_tensor(const std::string& name, bg::GgmlType type, std::vector<uint8_t> bytes) {
        retyped_[name] = {name, {}, type, std::move(bytes)};
        return *this;
    }
    // The same, from the tensor's elements as floats, quantised to `type` row by row.
    GgufEdit& retype(const std::string& name, bg::GgmlType type, const std::vector<float>& values) {
        const bg::gguf::TensorInfo& t = info(name);
        const int64_t cols = t.ne[0];
        const uint64_t rows = t.n_elems / static_cast<uint64_t>(cols), rb = bg::row_bytes(type, cols);
        if (values.size() != t.n_elems) throw std::runtime_error("gguf_edit: wrong value count for " + name);
        std::vector<uint8_t> bytes(rows * rb);
        for (uint64_t r = 0; r < rows; ++r) bg::quantize_row(type, values.data() + r * cols, bytes.data() + r * rb, cols);
        return retype_tensor(name, type, std::move(bytes));
    }

    // The elements of a source tensor, dequantised.
    std::vector<float> values(const std::string& name) const {
        const bg::gguf::TensorInfo& t = info(name);
        const std::vector<uint8_t> raw = bytes_of(t);
        const int64_t cols = t.ne[0];
        const uint64_t rows = t.n_elems / static_cast<uint64_t>(cols), rb = bg::row_bytes(t.type, cols);
        std::vector<float> out(t.n_elems);
        for (uint64_t r = 0; r < rows; ++r) bg::dequantize_row(t.type, raw.data() + r * rb, out.data() + r * cols, cols);
        return out;
    }

    void write(const std::string& dst) const {
        bg::gguf::Writer w;  // its set() of general.alignment also sets where tensor data goes
        // A split source becomes one file, so its split keys are dropped.
        for (const auto& kv : reader_.kvs())
            if (!removed_.count(kv.key) && !set_.count(kv.key) && !(reader_.is_split() && kv.key.rfind("split.", 0) == 0))
                w.set(kv.key, kv.value);
        for (const auto& [k, v] : set_) w.set(k, v);

        std::vector<std::vector<uint8_t>> data;
        for (const auto& t : reader_.tensors()) {
            if (dropped_.count(t.name)) continue;
            auto it = retyped_.find(t.name);
            if (it != retyped_.end()) {
                w.add_tensor(t.name, t.ne, it->second.type);
                data.push_back(it->second.bytes);
                continue;
            }
            w.add_tensor(t.name, t.ne, t.type);
            data.push_back(bytes_of(t));
        }
        for (const auto& a : added_) {
            w.add_tensor(a.name, a.ne, a.type);
            data.push_back(a.bytes);
        }
        std::vector<const void*> ptrs;
        const auto& infos = w.tensors();
        for (size_t i = 0; i < data.size(); ++i) {
            if (data[i].size() != infos[i].n_bytes)
                throw std::runtime_error("gguf_edit: tensor '" + infos[i].name + "' needs " +
                                         std::to_string(infos[i].n_bytes) + " bytes, got " +
                                         std::to_string(data[i].size()));
            ptrs.push_back(data[i].data());
        }
        // Tests running side by side may write the same variant: each writes its own file and
        // renames it into place, so a reader never sees one half written.
        const std::string tmp = dst + ".tmp." + std::to_string(::getpid());
        w.write_file(tmp, ptrs);
        if (std::rename(tmp.c_str(), dst.c_str()) != 0) throw std::runtime_error("gguf_edit: cannot rename " + tmp);
    }

private:
    struct NewTensor {
        std::string name;
        std::vector<int64_t> ne;
        bg::GgmlType type;
        std::vector<uint8_t> bytes;
    };

    const bg::gguf::TensorInfo& info(const std::string& name) const {
        const bg::gguf::TensorInfo* t = reader_.tensor(name);
        if (!t) throw std::runtime_error("gguf_edit: no tensor " + name);
        return *t;
    }

    std::vector<uint8_t> bytes_of(const bg::gguf::TensorInfo& t) const {
        std::vector<uint8_t> b(t.n_bytes);
        const std::string& file = reader_.shards().at(t.shard).path;  // a split source: the tensor's shard
        const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw std::runtime_error("gguf_edit: cannot open " + file);
        const ssize_t got = ::pread(fd, b.data(), b.size(), static_cast<off_t>(t.file_offset));
        ::close(fd);
        if (got != static_cast<ssize_t>(b.size())) throw std::runtime_error("gguf_edit: short read of " + t.name);
        return b;
    }

    std::string src_;
    bg::gguf::Reader reader_;
    std::map<std::string, bg::gguf::Value> set_;
    std::set<std::string> removed_, dropped_;
    std::vector<NewTensor> added_;
    std::map<std::string, NewTensor> retyped_;
};

}  // namespace bgtest
