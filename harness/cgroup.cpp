#include "cgroup.h"

#include <libcgroup.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace bgh {

namespace fs = std::filesystem;

namespace {

bool exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

std::string slurp(const std::string& p, bool* ok) {
    std::ifstream in(p);
    *ok = bool(in);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    return ss.str();
}

// Cgroup files take one write per value; a short or failed write is an error the kernel
// explains through errno (EINVAL for a bad value, EBUSY for a limit under current usage).
void write_value(const std::string& file, const std::string& value) {
    std::ofstream out(file, std::ios::out | std::ios::trunc);
    if (!out) throw CgroupError("cannot open " + file + " for writing: " + std::strerror(errno));
    out << value;
    out.flush();
    if (!out) throw CgroupError("cannot write \"" + value + "\" to " + file + ": " + std::strerror(errno));
}

const char* swap_file(CgroupLayout l) {
    return l == CgroupLayout::kV2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes";
}

// Active swap devices; without any, an unlimited swap file limits nothing anyway.
bool machine_has_swap() {
    bool ok = false;
    std::istringstream in(slurp("/proc/swaps", &ok));
    std::string line;
    int lines = 0;
    while (std::getline(in, line))
        if (!line.empty()) ++lines;
    return lines > 1;  // the first line is the header
}

std::string libcgroup_reason(int rc) {
    if (rc == ECGOTHER) return std::strerror(cgroup_get_last_errno());
    return cgroup_strerror(rc);
}

bool permission_problem(int rc) {
    if (rc == ECGROUPNOTOWNER || rc == ECGROUPNOTALLOWED) return true;
    if (rc != ECGOTHER) return false;
    const int e = cgroup_get_last_errno();
    return e == EACCES || e == EPERM || e == EROFS;
}

constexpr const char* kHowToFix =
    "run as root, or in a cgroup subtree delegated to you (--cgroup-parent), or pass --no-cgroup to run without a "
    "memory limit (recorded in the results)";

class LibCgroup final : public MemoryCgroup {
public:
    LibCgroup(std::string abs, CgroupLayout layout, const CgroupLimits& limits, struct cgroup* cg)
        : MemoryCgroup(std::move(abs), layout, limits, false), cg_(cg) {}
    ~LibCgroup() override {
        try {
            remove();
        } catch (...) {
        }
        if (cg_) cgroup_free(&cg_);
    }

    void set_limits(const std::vector<std::pair<std::string, std::string>>& files) {
        cgroup_free_controllers(cg_);
        struct cgroup_controller* ctl = cgroup_add_controller(cg_, "memory");
        if (!ctl) throw CgroupError("libcgroup: cannot add the memory controller to " + path_);
        for (const auto& [file, value] : files)
            if (int rc = cgroup_add_value_string(ctl, file.c_str(), value.c_str()))
                throw CgroupError("libcgroup: cannot stage " + file + " = " + value + ": " + libcgroup_reason(rc));
        if (int rc = cgroup_modify_cgroup(cg_))
            throw CgroupError("cannot set the limits of " + path_ + " (" + describe_files(files) + "): " + libcgroup_reason(rc));
        written_ = files;
    }

    void attach(pid_t pid) override {
        if (int rc = cgroup_attach_task_pid(cg_, pid))
            throw CgroupError("cannot move process " + std::to_string(pid) + " into " + path_ + ": " + libcgroup_reason(rc));
    }

    void remove() override {
        if (removed_) return;
        // Right after its last process dies (an OOM kill especially) the kernel may still call a
        // group busy for a moment; retry briefly before calling it a leak.
        int rc = 0;
        for (int i = 0; i < 50; ++i) {
            rc = cgroup_delete_cgroup(cg_, 0);
            if (rc == 0 || !exists(path_)) {
                removed_ = true;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        throw CgroupError("cannot remove " + path_ + ": " + libcgroup_reason(rc));
    }

private:
    static std::string describe_files(const std::vector<std::pair<std::string, std::string>>& files) {
        std::string s;
        for (const auto& [f, v] : files) s += (s.empty() ? "" : ", ") + f + " = " + v;
        return s;
    }
    struct cgroup* cg_;
    bool removed_ = false;
};

class FakeCgroup final : public MemoryCgroup {
public:
    FakeCgroup(std::string abs, CgroupLayout layout, const CgroupLimits& limits)
        : MemoryCgroup(std::move(abs), layout, limits, true) {}
    ~FakeCgroup() override {
        try {
            remove();
        } catch (...) {
        }
    }

    void set_limits(const std::vector<std::pair<std::string, std::string>>& files) {
        for (const auto& [file, value] : files) write_value(path_ + "/" + file, value);
        written_ = files;
    }

    void attach(pid_t pid) override {
        std::ofstream out(path_ + "/cgroup.procs", std::ios::app);
        out << pid << "\n";
        if (!out) throw CgroupError("cannot write to " + path_ + "/cgroup.procs");
    }

    void remove() override {
        if (removed_) return;
        std::error_code ec;
        fs::remove_all(path_, ec);
        if (ec) throw CgroupError("cannot remove " + path_ + ": " + ec.message());
        removed_ = true;
    }

private:
    bool removed_ = false;
};

std::string trim_slashes(std::string s) {
    while (!s.empty() && s.front() == '/') s.erase(s.begin());
    while (!s.empty() && s.back() == '/') s.pop_back();
    return s;
}

}  // namespace

const char* layout_name(CgroupLayout l) { return l == CgroupLayout::kV2 ? "v2" : "v1"; }

std::vector<std::pair<std::string, std::string>> limit_files(CgroupLayout layout, const CgroupLimits& limits,
                                                             bool have_swap_file) {
    const std::string bytes = std::to_string(limits.memory_bytes);
    std::vector<std::pair<std::string, std::string>> f;
    if (layout == CgroupLayout::kV2) {
        f.push_back({"memory.max", bytes});
        if (!limits.swap && have_swap_file) f.push_back({"memory.swap.max", "0"});
    } else {
        f.push_back({"memory.limit_in_bytes", bytes});
        // memory+swap equal to memory: not one byte may go to swap.
        if (!limits.swap && have_swap_file) f.push_back({"memory.memsw.limit_in_bytes", bytes});
    }
    return f;
}

uint64_t keyed_value(const std::string& text, const std::string& key) {
    std::istringstream in(text);
    std::string k;
    uint64_t v = 0;
    while (in >> k >> v)
        if (k == key) return v;
    return 0;
}

MemoryCgroup::MemoryCgroup(std::string path, CgroupLayout layout, const CgroupLimits& limits, bool fake)
    : path_(std::move(path)), layout_(layout), limits_(limits), fake_(fake) {}

MemoryCgroup::~MemoryCgroup() = default;

std::optional<std::string> MemoryCgroup::read(const std::string& file) const {
    bool ok = false;
    std::string s = slurp(path_ + "/" + file, &ok);
    if (!ok) return std::nullopt;
    return s;
}

void MemoryCgroup::sample() {
    const auto cur = read(layout_ == CgroupLayout::kV2 ? "memory.current" : "memory.usage_in_bytes");
    if (cur && !cur->empty()) sampled_peak_ = std::max<uint64_t>(sampled_peak_, std::strtoull(cur->c_str(), nullptr, 10));
}

CgroupUsage MemoryCgroup::usage() {
    CgroupUsage u;
    sample();
    const char* peak_file = layout_ == CgroupLayout::kV2 ? "memory.peak" : "memory.max_usage_in_bytes";
    const auto peak = read(peak_file);
    if (peak && !peak->empty() && std::isdigit(static_cast<unsigned char>((*peak)[0]))) {
        u.peak_bytes = std::strtoull(peak->c_str(), nullptr, 10);
        u.peak_source = peak_file;
    } else if (sampled_peak_ > 0) {
        // Kernels before 5.19 have no memory.peak; the harness samples memory.current instead.
        u.peak_bytes = sampled_peak_;
        u.peak_source = "sampled memory.current";
    }
    if (layout_ == CgroupLayout::kV2) {
        const std::string ev = read("memory.events").value_or("");
        u.oom_events = keyed_value(ev, "oom");
        u.oom_kills = keyed_value(ev, "oom_kill");
    } else {
        // v1 counts kills in memory.oom_control (kernel 4.13+); it has no separate OOM event
        // count, so a kill is the event.
        const std::string oc = read("memory.oom_control").value_or("");
        u.oom_kills = keyed_value(oc, "oom_kill");
        u.oom_events = u.oom_kills + keyed_value(oc, "under_oom");
    }
    return u;
}

nlohmann::json MemoryCgroup::describe() const {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [f, v] : written_) files[f] = v;
    return {{"layout", layout_name(layout_)},
            {"path", path_},
            {"fake", fake_},
            {"limit_bytes", limits_.memory_bytes},
            {"limit_mib", limits_.memory_bytes / 1048576.0},
            {"swap_allowed", limits_.swap},
            {"swap_limited", swap_limited_},
            {"swap_note", swap_note_},
            {"files_written", files}};
}

std::unique_ptr<MemoryCgroup> MemoryCgroup::create(const std::string& name, const CgroupLimits& limits,
                                                   const std::string& parent) {
    static std::once_flag once;
    static int init_rc = 0;
    std::call_once(once, [] { init_rc = cgroup_init(); });
    if (init_rc)
        throw CgroupError("libcgroup cannot start: " + libcgroup_reason(init_rc) + " (no cgroup file system mounted?); " +
                          kHowToFix);
    char* mp = nullptr;
    if (cgroup_get_subsys_mount_point("memory", &mp) || !mp)
        throw CgroupError(std::string("the memory controller is not mounted on this machine; ") + kHowToFix);
    const std::string mount = mp;
    std::free(mp);
    struct statfs sf;
    if (::statfs(mount.c_str(), &sf) != 0)
        throw CgroupError("cannot stat the memory hierarchy at " + mount + ": " + std::strerror(errno));
    const CgroupLayout layout = sf.f_type == CGROUP2_SUPER_MAGIC ? CgroupLayout::kV2 : CgroupLayout::kV1;

    const std::string par = trim_slashes(parent);
    const std::string par_abs = par.empty() ? mount : mount + "/" + par;
    if (!exists(par_abs)) throw CgroupError("no cgroup " + par_abs + " to create the group in (--cgroup-parent)");
    if (layout == CgroupLayout::kV2) {
        // A v2 child gets memory.* files only when its parent hands the controller down.
        bool ok = false;
        const std::string avail = slurp(par_abs + "/cgroup.controllers", &ok);
        if (ok && (" " + avail + " ").find(" memory") == std::string::npos)
            throw CgroupError("the memory controller is not available in " + par_abs + " (cgroup.controllers: " + avail +
                              "); " + kHowToFix);
        const std::string sub = slurp(par_abs + "/cgroup.subtree_control", &ok);
        if (ok && sub.find("memory") == std::string::npos) {
            try {
                write_value(par_abs + "/cgroup.subtree_control", "+memory");
            } catch (const CgroupError& e) {
                throw CgroupError(std::string("cannot enable the memory controller for children of ") + par_abs + ": " +
                                  e.what() + "; " + kHowToFix);
            }
        }
    }

    const std::string rel = par.empty() ? name : par + "/" + name;
    struct cgroup* cg = cgroup_new_cgroup(rel.c_str());
    if (!cg) throw CgroupError("libcgroup: cannot describe cgroup " + rel);
    if (!cgroup_add_controller(cg, "memory")) {
        cgroup_free(&cg);
        throw CgroupError("libcgroup: cannot add the memory controller to " + rel);
    }
    // Created bare first, then limited: which limit files exist is known only once the group
    // does (swap accounting may be compiled out).
    if (int rc = cgroup_create_cgroup(cg, 0)) {
        // libcgroup does not always say "permission denied" when that is the cause (v2 reports
        // a missing group), so every failure carries the ways out.
        const std::string why = libcgroup_reason(rc) + (permission_problem(rc) ? " (no permission)" : "");
        cgroup_free(&cg);
        throw CgroupError("cannot create memory cgroup " + mount + "/" + rel + ": " + why + "; " + kHowToFix);
    }
    auto g = std::make_unique<LibCgroup>(mount + "/" + rel, layout, limits, cg);
    const bool have_swap = exists(g->path() + "/" + swap_file(layout));
    g->set_limits(limit_files(layout, limits, have_swap));
    g->swap_limited_ = !limits.swap && have_swap;
    if (limits.swap) g->swap_note_ = "swap allowed by the scenario";
    else if (have_swap) g->swap_note_ = std::string(swap_file(layout)) + " set: no swap";
    else if (!machine_has_swap()) g->swap_note_ = std::string("no ") + swap_file(layout) + " (no swap accounting), but the machine has no active swap";
    else g->swap_note_ = std::string("no ") + swap_file(layout) + " (no swap accounting): swap may back this group";
    return g;
}

std::unique_ptr<MemoryCgroup> MemoryCgroup::create_fake(const std::string& root, CgroupLayout layout,
                                                        const std::string& name, const CgroupLimits& limits) {
    const std::string abs = root + "/" + trim_slashes(name);
    std::error_code ec;
    if (fs::exists(abs)) throw CgroupError("cgroup " + abs + " already exists");
    fs::create_directories(abs, ec);
    if (ec) throw CgroupError("cannot create memory cgroup " + abs + ": " + ec.message());
    // The files the kernel would provide in a new group, with a new group's contents.
    std::vector<std::pair<std::string, std::string>> kernel_files;
    if (layout == CgroupLayout::kV2) {
        write_value(fs::path(abs).parent_path().string() + "/cgroup.subtree_control", "+memory");
        kernel_files = {{"cgroup.procs", ""},          {"memory.max", "max\n"},  {"memory.swap.max", "max\n"},
                        {"memory.current", "0\n"},     {"memory.peak", "0\n"},
                        {"memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"}};
    } else {
        kernel_files = {{"cgroup.procs", ""},
                        {"tasks", ""},
                        {"memory.limit_in_bytes", "9223372036854771712\n"},
                        {"memory.memsw.limit_in_bytes", "9223372036854771712\n"},
                        {"memory.usage_in_bytes", "0\n"},
                        {"memory.max_usage_in_bytes", "0\n"},
                        {"memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}};
    }
    for (const auto& [f, v] : kernel_files) write_value(abs + "/" + f, v);
    auto g = std::make_unique<FakeCgroup>(abs, layout, limits);
    g->set_limits(limit_files(layout, limits, true));
    g->swap_limited_ = !limits.swap;
    g->swap_note_ = limits.swap ? "swap allowed by the scenario" : std::string(swap_file(layout)) + " set: no swap";
    return g;
}

}  // namespace bgh
