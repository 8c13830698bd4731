// "Cold" must mean cold: before a run whose first pass is cold, the model file's pages are
// dropped from the page cache, and how much of the file is still cached afterwards is measured
// and recorded beside the result.
#pragma once

#include <optional>
#include <string>

namespace bgh {

// Writes back and drops the file's cached pages (fdatasync, then POSIX_FADV_DONTNEED).
// Returns an error text, or nullopt on success.
std::optional<std::string> evict_page_cache(const std::string& path);

// Percentage of the file's pages in the page cache now (mincore over 1 GiB windows); nullopt
// when it cannot be measured.
std::optional<double> cached_percent(const std::string& path);

}  // namespace bgh
