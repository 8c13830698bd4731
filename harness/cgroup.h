// A memory cgroup that holds one engine run: created with a hard limit and swap off, the engine
// placed in it before it starts, its peak and OOM events read afterwards, then removed.
//
// The real one goes through libcgroup against whatever the machine mounts (cgroup v2:
// memory.max and memory.swap.max = 0; v1: memory.limit_in_bytes and memory.memsw.limit_in_bytes
// equal). A fake one lays the same files out in plain folders under a root of the caller's
// choice, so both layouts can be tested on any machine; it limits nothing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

enum class CgroupLayout { kV1, kV2 };
const char* layout_name(CgroupLayout l);

struct CgroupError : std::runtime_error {
    explicit CgroupError(const std::string& what) : std::runtime_error(what) {}
};

struct CgroupLimits {
    uint64_t memory_bytes = 0;
    bool swap = false;  // false: no swap may back the group's memory
};

struct CgroupUsage {
    std::optional<uint64_t> peak_bytes;  // high-water mark of the group's memory
    std::string peak_source;             // the file it came from, or "sampled memory.current"
    uint64_t oom_events = 0;             // times the limit was hit and reclaim could not help
    uint64_t oom_kills = 0;              // processes the kernel killed for it
};

// The files that set `limits`, in the order the kernel accepts them (v1 refuses a memsw limit
// below the memory limit, so the memory limit goes first). `have_swap_file` says whether the
// kernel offers the swap file at all (no swap accounting: it does not).
std::vector<std::pair<std::string, std::string>> limit_files(CgroupLayout layout, const CgroupLimits& limits,
                                                             bool have_swap_file);
// The value after `key` in "key value" lines (memory.events, memory.oom_control); 0 if absent.
uint64_t keyed_value(const std::string& text, const std::string& key);

class MemoryCgroup {
public:
    virtual ~MemoryCgroup();
    MemoryCgroup(const MemoryCgroup&) = delete;
    MemoryCgroup& operator=(const MemoryCgroup&) = delete;

    // A new group `name` under `parent` (a path inside the memory hierarchy, "" = its root),
    // through libcgroup. Throws CgroupError with the reason (not mounted, no permission, ...).
    static std::unique_ptr<MemoryCgroup> create(const std::string& name, const CgroupLimits& limits,
                                                const std::string& parent = "");
    // The same in plain folders under `root`, which stands for the hierarchy's mount point.
    static std::unique_ptr<MemoryCgroup> create_fake(const std::string& root, CgroupLayout layout,
                                                     const std::string& name, const CgroupLimits& limits);

    // Moves process `pid` into the group.
    virtual void attach(pid_t pid) = 0;
    // Reads the current usage and remembers the largest seen, for kernels without a peak file.
    void sample();
    CgroupUsage usage();
    // Deletes the group (it must be empty); safe to call twice. The destructor calls it too.
    virtual void remove() = 0;

    const std::string& path() const { return path_; }
    CgroupLayout layout() const { return layout_; }
    const CgroupLimits& limits() const { return limits_; }
    bool swap_limited() const { return swap_limited_; }
    bool fake() const { return fake_; }
    // Layout, path, limits as written, and why swap is or is not limited, for the results.
    nlohmann::json describe() const;

protected:
    MemoryCgroup(std::string path, CgroupLayout layout, const CgroupLimits& limits, bool fake);
    std::optional<std::string> read(const std::string& file) const;

    std::string path_;
    CgroupLayout layout_;
    CgroupLimits limits_;
    bool fake_;
    bool swap_limited_ = false;
    std::string swap_note_;
    std::vector<std::pair<std::string, std::string>> written_;
    uint64_t sampled_peak_ = 0;
};

}  // namespace bgh
