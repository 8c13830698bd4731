#include "page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "gguf/gguf.h"
#include "util/check.h"

namespace bgh {

std::vector<std::string> model_files(const std::string& path) {
    try {
        const bg::gguf::Reader r = bg::gguf::Reader::open(path);
        std::vector<std::string> files;
        for (const bg::gguf::Shard& s : r.shards()) files.push_back(s.path);
        return files;
    } catch (const bg::Error&) {
        return {path};  // not a model this reader takes: the engine will say why; evict the file anyway
    }
}

namespace {

std::optional<std::string> evict_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
    // Dirty pages (a model just generated) survive DONTNEED; write them back first.
    ::fdatasync(fd);
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) return "posix_fadvise(DONTNEED) on " + path + ": " + std::strerror(rc);
    return std::nullopt;
}

// Pages of the file in the page cache, and pages in all; false when it cannot be measured.
bool count_cached(const std::string& path, uint64_t* resident_out, uint64_t* pages_out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    if (::fstat(fd, &st) != 0 || st.st_size == 0) {
        ::close(fd);
        return false;
    }
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    const uint64_t window = 1ull << 30;
    const uint64_t size = uint64_t(st.st_size);
    uint64_t resident = 0, pages = 0;
    std::vector<unsigned char> vec;
    for (uint64_t off = 0; off < size; off += window) {
        const size_t len = size_t(std::min<uint64_t>(window, size - off));
        void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, off_t(off));
        if (p == MAP_FAILED) {
            ::close(fd);
            return false;
        }
        const size_t n = (len + page - 1) / page;
        vec.assign(n, 0);
        const int rc = ::mincore(p, len, vec.data());
        ::munmap(p, len);
        if (rc != 0) {
            ::close(fd);
            return false;
        }
        for (unsigned char v : vec) resident += v & 1;
        pages += n;
    }
    ::close(fd);
    *resident_out += resident;
    *pages_out += pages;
    return true;
}

}  // namespace

std::optional<std::string> evict_page_cache(const std::vector<std::string>& paths) {
    std::optional<std::string> first_error;
    for (const std::string& p : paths) {
        std::optional<std::string> e = evict_file(p);
        if (e && !first_error) first_error = std::move(e);
    }
    return first_error;
}

std::optional<double> cached_percent(const std::vector<std::string>& paths) {
    uint64_t resident = 0, pages = 0;
    for (const std::string& p : paths)
        if (!count_cached(p, &resident, &pages)) return std::nullopt;
    return pages ? 100.0 * double(resident) / double(pages) : 0.0;
}

}  // namespace bgh
