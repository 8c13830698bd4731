// "Cold" must mean cold: before a run whose first pass is cold, the model's pages (every shard of
// a split model) are dropped from the page cache, and how much of them is still cached afterwards
// is measured and recorded beside the result.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace bgh {

// Every file of the model at `path`: its shards when it is the first shard of a split GGUF model,
// else the file itself.
std::vector<std::string> model_files(const std::string& path);

// Writes back and drops the files' cached pages (fdatasync, then POSIX_FADV_DONTNEED).
// Returns the first error text, or nullopt on success.
std::optional<std::string> evict_page_cache(const std::vector<std::string>& paths);

// Percentage of the files' pages in the page cache now, all files together (mincore over 1 GiB
// windows); nullopt when it cannot be measured.
std::optional<double> cached_percent(const std::vector<std::string>& paths);

}  // namespace bgh
