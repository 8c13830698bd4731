// A GGUF header as JSON (`betelgeuse info --json`): every metadata key with its GGUF type and
// value, and the tensor table, for tools and for checking our files against other GGUF readers.
//
//   {"file", "version", "alignment", "data_offset", "file_size",
//    "metadata": [{"key", "type", "value"}                      scalars (uint64 as exact integers)
//                 {"key", "type": "array", "elem_type", "count",
//                  "value": [...]  (count <= kJsonListedElems) or "first": [first kJsonFirstElems]}],
//    "tensors": [{"name", "shape" (ggml order, ne0 first), "type", "type_id",
//                 "offset" (from the data section, as stored), "file_offset", "bytes"}]}
//
// For a split model: the first shard's header fields and metadata, every shard's tensors, each
// with "shard" (its index in "shards", "file_offset" within that shard's file), and
// "shards": [{"path", "file_size", "data_offset", "alignment", "tensor_count", "tensor_bytes"}].
//
// Metadata and tensors keep the file's order. Elements of nested arrays are themselves
// {"elem_type", "count", "value" | "first"} objects.
#pragma once

#include <cstddef>

#include <nlohmann/json_fwd.hpp>

#include "gguf/gguf.h"

namespace bg::gguf {

// Arrays up to this many elements are listed whole; longer ones (a vocabulary, a token map)
// are summarised by their count and first elements, so the JSON stays small.
constexpr size_t kJsonListedElems = 64;
constexpr size_t kJsonFirstElems = 8;

nlohmann::json value_json(const Value& v);
nlohmann::json header_json(const Reader& r, bool with_tensors = true);

}  // namespace bg::gguf
