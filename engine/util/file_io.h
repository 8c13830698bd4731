// Plain blocking file reads with the retries every caller needs.
#pragma once

#include <cstdint>

namespace bg {

// Reads exactly `bytes` at `offset`, retrying EINTR/EAGAIN and short reads; throws bg::Error
// "<what>: read at offset N failed: <reason>" or "...file ended at offset N" otherwise.
void pread_exact(int fd, void* dst, uint64_t bytes, uint64_t offset, const char* what);

}  // namespace bg

#include <string>

namespace bg {

// The whole file at `path`; throws bg::Error "<what>: cannot open '<path>'" when it cannot.
std::string read_file(const std::string& path, const char* what);

// Writes `text` to `path` atomically: a temporary file in the same folder, fsync, rename.
// An interrupted write never leaves a truncated file at `path`.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace bg
