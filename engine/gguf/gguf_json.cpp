#include "gguf/gguf_json.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace bg::gguf {

namespace {

using json = nlohmann::json;

json scalar_json(const Value& v) {
    switch (v.type) {
        case ValueType::UINT8:
        case ValueType::UINT16:
        case ValueType::UINT32:
        case ValueType::UINT64: return json(v.u);
        case ValueType::INT8:
        case ValueType::INT16:
        case ValueType::INT32:
        case ValueType::INT64: return json(v.i);
        case ValueType::FLOAT32:
        case ValueType::FLOAT64: return json(v.f);
        case ValueType::BOOL: return json(v.u != 0);
        case ValueType::STRING: return json(v.s);
        case ValueType::ARRAY: break;
    }
    return json();
}

// {"elem_type", "count", "value" | "first"} of an array value.
json array_fields(const Value& v) {
    json out = {{"elem_type", value_type_name(v.elem_type)}, {"count", v.items.size()}};
    const bool whole = v.items.size() <= kJsonListedElems;
    const size_t n = whole ? v.items.size() : std::min(v.items.size(), kJsonFirstElems);
    json items = json::array();
    for (size_t i = 0; i < n; ++i) items.push_back(value_json(v.items[i]));
    out[whole ? "value" : "first"] = std::move(items);
    return out;
}

}  // namespace

json value_json(const Value& v) { return v.type == ValueType::ARRAY ? array_fields(v) : scalar_json(v); }

json header_json(const Reader& r, bool with_tensors) {
    json metadata = json::array();
    for (const KeyValue& kv : r.kvs()) {
        json e = {{"key", kv.key}, {"type", value_type_name(kv.value.type)}};
        if (kv.value.type == ValueType::ARRAY) e.update(array_fields(kv.value));
        else e["value"] = scalar_json(kv.value);
        metadata.push_back(std::move(e));
    }
    json out = {{"file", r.path()},
                {"version", r.version()},
                {"alignment", r.alignment()},
                {"data_offset", r.data_offset()},
                {"file_size", r.file_size()},
                {"metadata", std::move(metadata)}};
    if (r.is_split()) {
        json shards = json::array();
        for (const Shard& s : r.shards())
            shards.push_back({{"path", s.path},
                              {"file_size", s.file_size},
                              {"data_offset", s.data_offset},
                              {"alignment", s.alignment},
                              {"tensor_count", s.tensor_count},
                              {"tensor_bytes", s.tensor_bytes}});
        out["shards"] = std::move(shards);
    }
    if (!with_tensors) return out;
    json tensors = json::array();
    for (const TensorInfo& t : r.tensors()) {
        tensors.push_back({{"name", t.name},
                           {"shape", t.ne},
                           {"type", type_name(t.type)},
                           {"type_id", static_cast<uint32_t>(t.type)},
                           {"offset", t.offset},
                           {"file_offset", t.file_offset},
                           {"bytes", t.n_bytes}});
        if (r.is_split()) tensors.back()["shard"] = t.shard;
    }
    out["tensors"] = std::move(tensors);
    return out;
}

}  // namespace bg::gguf
