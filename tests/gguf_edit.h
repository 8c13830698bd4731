// Rewrites a GGUF file with a few changes: keys set, replaced or removed, tensors added,
// removed or re-typed; every other key and tensor is copied unchanged (tensor bytes byte-identical). Tests
// use it to make variants of a synthetic model without a second generator.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace bgtest {

class GgufEdit {
public:
    explicit GgufEdit(std::string src) : src_(std::move(src)) {}

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

    void write(const std::string& dst) const {
        const bg::gguf::Reader r = bg::gguf::Reader::open(src_);
        bg::gguf::Writer w;
        for (const auto& kv : r.kvs())
            if (!removed_.count(kv.key) && !set_.count(kv.key)) w.set(kv.key, kv.value);
        for (const auto& [k, v] : set_) w.set(k, v);

        std::vector<std::vector<uint8_t>> data;
        const int fd = ::open(src_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw std::runtime_error("gguf_edit: cannot open " + src_);
        for (const auto& t : r.tensors()) {
            if (dropped_.count(t.name)) continue;
            auto it = retyped_.find(t.name);
            if (it != retyped_.end()) {
                w.add_tensor(t.name, t.ne, it->second.type);
                data.push_back(it->second.bytes);
                continue;
            }
            w.add_tensor(t.name, t.ne, t.type);
            std::vector<uint8_t> b(t.n_bytes);
            if (::pread(fd, b.data(), b.size(), static_cast<off_t>(t.file_offset)) != static_cast<ssize_t>(b.size())) {
                ::close(fd);
                throw std::runtime_error("gguf_edit: short read of " + t.name);
            }
            data.push_back(std::move(b));
        }
        ::close(fd);
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
        w.write_file(dst, ptrs);
    }

private:
    struct NewTensor {
        std::string name;
        std::vector<int64_t> ne;
        bg::GgmlType type;
        std::vector<uint8_t> bytes;
    };
    std::string src_;
    std::map<std::string, bg::gguf::Value> set_;
    std::set<std::string> removed_, dropped_;
    std::vector<NewTensor> added_;
    std::map<std::string, NewTensor> retyped_;
};

}  // namespace bgtest
