#include "machine.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace bgh {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    return ss.str();
}

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(i);
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// /proc/meminfo "MemTotal:  24576000 kB" as bytes.
uint64_t meminfo_bytes(const std::string& key) {
    std::istringstream in(read_text("/proc/meminfo"));
    std::string k, unit;
    uint64_t v = 0;
    while (in >> k >> v) {
        std::getline(in, unit);
        if (k == key + ":") return v * 1024;
    }
    return 0;
}

json cpu_description() {
    std::istringstream in(read_text("/proc/cpuinfo"));
    std::string line, model;
    std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
    std::string phys;
    while (std::getline(in, line)) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string k = trim(line.substr(0, colon)), v = trim(line.substr(colon + 1));
        if (k == "model name" && model.empty()) model = v;
        if (k == "physical id") phys = v;
        if (k == "core id") cores.insert({phys, v});
    }
    json j = {{"model", model.empty() ? json(nullptr) : json(model)},
              {"logical_cores", std::thread::hardware_concurrency()},
              {"online_cores", sysconf(_SC_NPROCESSORS_ONLN)}};
    j["physical_cores"] = cores.empty() ? json(nullptr) : json(cores.size());
    return j;
}

// The mount, file system and block device under `path`, matched through the device number
// the kernel gives the file (so bind mounts and overlays name the real thing).
json disk_description(const std::string& path) {
    json j = {{"file", path}};
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
        j["note"] = "file not found";
        return j;
    }
    const unsigned maj = major(st.st_dev), min = minor(st.st_dev);
    const std::string devno = std::to_string(maj) + ":" + std::to_string(min);
    std::error_code ec;
    const std::string real = fs::weakly_canonical(path, ec).string();
    std::istringstream mi(read_text("/proc/self/mountinfo"));
    std::string line, best_mount;
    while (std::getline(mi, line)) {
        std::istringstream f(line);
        std::string id, parent, dev, root, mount;
        f >> id >> parent >> dev >> root >> mount;
        if (dev != devno) continue;
        if (real.rfind(mount, 0) != 0 || mount.size() < best_mount.size()) continue;
        std::string tok;
        while (f >> tok && tok != "-") {
        }
        std::string fstype, source;
        f >> fstype >> source;
        best_mount = mount;
        j["mount_point"] = mount;
        j["file_system"] = fstype;
        j["source"] = source;
    }
    j["device_number"] = devno;
    const std::string sys = "/sys/dev/block/" + devno;
    if (fs::exists(sys, ec)) {
        fs::path dev = fs::canonical(sys, ec);
        std::string name = dev.filename().string();
        // A partition's disk is the folder above it; model and queue live with the disk.
        if (fs::exists(dev / "partition", ec)) dev = dev.parent_path();
        j["partition"] = name;
        j["device"] = dev.filename().string();
        const std::string model = trim(read_text((dev / "device/model").string()));
        j["device_model"] = model.empty() ? json(nullptr) : json(model);
        const std::string rot = trim(read_text((dev / "queue/rotational").string()));
        if (!rot.empty()) j["rotational"] = rot == "1";
        const std::string size = trim(read_text((dev / "size").string()));
        if (!size.empty()) j["device_bytes"] = std::strtoull(size.c_str(), nullptr, 10) * 512;
    } else {
        j["device"] = nullptr;
        j["device_note"] = "no block device behind this file system";
    }
    return j;
}

std::optional<json> json_in(const std::string& text) {
    const auto b = text.find('{');
    const auto e = text.rfind('}');
    if (b == std::string::npos || e == std::string::npos || e < b) return std::nullopt;
    try {
        return json::parse(text.substr(b, e - b + 1));
    } catch (...) {
        return std::nullopt;
    }
}

std::string last_line(const std::string& s) {
    std::string t = trim(s);
    const auto nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace

std::optional<std::string> capture(const std::vector<std::string>& argv, bool merge_stderr, int* exit_code) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + shell_quote(a);
    cmd += merge_stderr ? " 2>&1" : " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return std::nullopt;
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int st = ::pclose(p);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (exit_code) *exit_code = code;
    if (code != 0 && !merge_stderr) return std::nullopt;
    return out;
}

std::vector<std::string> list_gpus() {
    std::vector<std::string> gpus;
    const auto out = capture({"nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"});
    if (!out) return gpus;
    std::istringstream in(*out);
    std::string line;
    while (std::getline(in, line))
        if (!trim(line).empty()) gpus.push_back(trim(line));
    return gpus;
}

namespace {

// Runs one of the engine's probes (args[1], printing one JSON object) and records its figure
// `key` as m[field] and its whole output as m[probe_field]; where it fails, m[note_field] says why.
void record_probe(json& m, const std::vector<std::string>& args, const char* key, const char* field,
                  const char* probe_field, const char* note_field) {
    int code = 0;
    const auto out = capture(args, true, &code);
    const auto j = out ? json_in(*out) : std::nullopt;
    if (code == 0 && j && j->contains(key)) {
        m[field] = (*j)[key];
        m[probe_field] = *j;
    } else {
        m[note_field] = args[1] + " failed: " + (out ? last_line(*out) : std::string("could not run"));
    }
}

}  // namespace

json describe_machine(const MachineProbe& p) {
    json m;
    struct utsname u;
    if (::uname(&u) == 0) {
        m["hostname"] = u.nodename;
        m["kernel"] = std::string(u.sysname) + " " + u.release;
        m["arch"] = u.machine;
    }
    m["cpu"] = cpu_description();
    m["ram_bytes"] = meminfo_bytes("MemTotal");
    m["ram_gib"] = meminfo_bytes("MemTotal") / double(1ull << 30);
    m["swap_bytes"] = meminfo_bytes("SwapTotal");

    const auto gpus = list_gpus();
    if (gpus.empty()) {
        m["gpu"] = nullptr;
        m["gpu_note"] = "nvidia-smi lists no GPU";
    } else {
        json list = json::array();
        for (const auto& g : gpus) {
            std::vector<std::string> f;
            std::stringstream ss(g);
            std::string x;
            while (std::getline(ss, x, ',')) f.push_back(trim(x));
            json e = {{"name", f.size() > 0 ? f[0] : g}};
            if (f.size() > 1) e["driver"] = f[1];
            if (f.size() > 2) e["memory_mib"] = std::strtoull(f[2].c_str(), nullptr, 10);
            list.push_back(e);
        }
        m["gpu"] = list[0];
        m["gpus"] = list;
    }

    m["disk"] = disk_description(p.model_path);

    m["raw_disk_gb_s"] = nullptr;
    if (!p.probe_disk) {
        m["raw_disk_note"] = "not probed (--no-probe)";
    } else {
        std::vector<std::string> a = {p.engine_path, "probe-disk", p.model_path, "--json"};
        a.insert(a.end(), p.disk_probe_flags.begin(), p.disk_probe_flags.end());
        record_probe(m, a, "seq_gb_s", "raw_disk_gb_s", "raw_disk_probe", "raw_disk_note");
    }

    // With the host probe too, the pinned rate comes from the run of probe-pcie below, which
    // measures it alone first, as the plain run does.
    m["pinned_pcie_gb_s"] = nullptr;
    if (gpus.empty())
        m["pinned_pcie_note"] = "no GPU";
    else if (!p.probe_pcie)
        m["pinned_pcie_note"] = "not probed (--no-probe)";
    else if (!p.probe_host)
        record_probe(m, {p.engine_path, "probe-pcie", "--json"}, "pinned_gb_s", "pinned_pcie_gb_s", "pcie_probe",
                     "pinned_pcie_note");

    // What the host's cores can read of its memory, all at once: with the pinned copy rate, what
    // bounds a decode step's host-resident experts (computed where they lie, or copied).
    m["host_read_gb_s"] = nullptr;
    if (!p.probe_host)
        m["host_read_note"] = "not probed (--no-probe)";
    else
        record_probe(m, {p.engine_path, "probe-host", "--json"}, "read_gb_s", "host_read_gb_s", "host_read_probe",
                     "host_read_note");
    // Both at once: the cores reading host memory while pinned copies run. The two paths share
    // the host's memory, so the probes taken apart may add up to more than they give together.
    m["pcie_and_host_read_gb_s"] = nullptr;
    if (gpus.empty())
        m["pcie_and_host_read_note"] = "no GPU";
    else if (!p.probe_pcie || !p.probe_host)
        m["pcie_and_host_read_note"] = "not probed (--no-probe)";
    else {
        record_probe(m, {p.engine_path, "probe-pcie", "--with-host-reads", "--json"}, "together_sum_gb_s",
                     "pcie_and_host_read_gb_s", "pcie_and_host_read_probe", "pcie_and_host_read_note");
        if (m.contains("pcie_and_host_read_probe") && m["pcie_and_host_read_probe"].contains("pinned_gb_s")) {
            m["pinned_pcie_gb_s"] = m["pcie_and_host_read_probe"]["pinned_gb_s"];
            // Named, not copied: the one run's output is in pcie_and_host_read_probe.
            m["pinned_pcie_from"] = "pcie_and_host_read_probe";
        } else {
            m["pinned_pcie_note"] = m.value("pcie_and_host_read_note", std::string("probe-pcie failed"));
        }
    }
    return m;
}

json engine_build(const std::string& engine_path) {
    int code = 0;
    const auto out = capture({engine_path, "version", "--json"}, true, &code);
    const auto j = out && code == 0 ? json_in(*out) : std::nullopt;
    if (j && j->is_object() && j->contains("commit")) return *j;
    return {{"commit", nullptr},
            {"dirty", nullptr},
            {"note", "the engine did not report the commit it was built from (`version --json`: " +
                         (out ? last_line(*out) : std::string("could not run")) + ")"}};
}

}  // namespace bgh
