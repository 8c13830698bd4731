// Split models as llama.cpp's gguf-split writes them (tools/gguf-split/gguf-split.cpp; read by
// src/llama-model-loader.cpp).
//
// Each shard is a whole GGUF file with its own header, metadata, tensor infos and data. The
// first carries the model's metadata; every shard carries split.no (0-based, uint16),
// split.count (uint16) and split.tensors.count (the model's tensors in all shards, int32).
// Tensors are spread over the shards in the model's order, none cut. Shard i of n is named
// "<prefix>-<i+1, 5 digits>-of-<n, 5 digits>.gguf", and a model is opened by its first shard.
// A split.count of 0 (what gguf-split --merge leaves) or 1 is an unsplit file.
//
// Reader::open checks what llama.cpp checks (the first file is shard 0 and named as shard 1,
// each shard's split.no is its position, the tensor total equals split.tensors.count, no
// tensor name twice) and more: every shard has the first shard's split.count and
// split.tensors.count, so a shard of another split model is refused rather than read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace bg::gguf {

constexpr const char* kSplitNoKey = "split.no";
constexpr const char* kSplitCountKey = "split.count";
constexpr const char* kSplitTensorsCountKey = "split.tensors.count";
constexpr uint64_t kMaxSplitCount = UINT16_MAX;  // split.count is a uint16

// llama_split_path: the path of shard `split_no` (0-based) of `split_count`.
std::string split_path(const std::string& prefix, uint32_t split_no, uint32_t split_count);
// llama_split_prefix: the prefix of `path` if it is named as shard `split_no` of `split_count`
// (a non-empty prefix), else nothing.
std::optional<std::string> split_prefix(const std::string& path, uint32_t split_no, uint32_t split_count);

// --split-max-size: a positive byte count, bare or with a decimal suffix K (1e3), M (1e6) or
// G (1e9). gguf-split takes M and G with these meanings; bare bytes and K are for small models.
// Throws bg::Error naming the text otherwise.
uint64_t parse_split_max_size(const std::string& text);

// Splits a model's header the way gguf-split --split-max-size does: tensors in order, a new shard
// whenever the tensors' bytes so far, each padded to 32 as gguf-split counts them, would pass
// max_shard_bytes (metadata not counted; a tensor larger than that gets a shard of its own).
// Shard 0 holds every key of `whole`, then the split keys; the others hold only the split keys
// (and general.alignment where `whole` sets one other than the default). Tensor i of `whole` is
// tensor i of the concatenated shards, with the same type and shape. Throws bg::Error when more
// than kMaxSplitCount shards would be needed.
std::vector<Writer> split_writer(const Writer& whole, uint64_t max_shard_bytes);

}  // namespace bg::gguf
