#include "page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace bgh {

std::optional<std::string> evict_page_cache(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
    // Dirty pages (a model just generated) survive DONTNEED; write them back first.
    ::fdatasync(fd);
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) return "posix_fadvise(DONTNEED) on " + path + ": " + std::strerror(rc);
    return std::nullopt;
}

std::optional<double> cached_percent(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    struct stat st;
    if (::fstat(fd, &st) != 0 || st.st_size == 0) {
        ::close(fd);
        return std::nullopt;
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
            return std::nullopt;
        }
        const size_t n = (len + page - 1) / page;
        vec.assign(n, 0);
        const int rc = ::mincore(p, len, vec.data());
        ::munmap(p, len);
        if (rc != 0) {
            ::close(fd);
            return std::nullopt;
        }
        for (unsigned char v : vec) resident += v & 1;
        pages += n;
    }
    ::close(fd);
    return pages ? 100.0 * double(resident) / double(pages) : 0.0;
}

}  // namespace bgh
