#include "util/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/check.h"

namespace bg {

void pread_exact(int fd, void* dst, uint64_t bytes, uint64_t offset, const char* what) {
    uint8_t* p = static_cast<uint8_t*>(dst);
    uint64_t done = 0;
    while (done < bytes) {
        const ssize_t n = ::pread(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0)
            fail("%s: read at offset %llu failed: %s", what, static_cast<unsigned long long>(offset + done),
                 std::strerror(errno));
        if (n == 0)
            fail("%s: file ended at offset %llu (truncated while running?)", what,
                 static_cast<unsigned long long>(offset + done));
        done += static_cast<uint64_t>(n);
    }
}

}  // namespace bg

#include <fcntl.h>

#include <fstream>
#include <sstream>

namespace bg {

std::string read_file(const std::string& path, const char* what) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("%s: cannot open '%s'", what, path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void write_file_atomic(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            fail("cannot write '%s': %s", tmp.c_str(), std::strerror(err));
        }
        done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        ::unlink(tmp.c_str());
        fail("cannot flush '%s': %s", tmp.c_str(), std::strerror(errno));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        fail("cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(), std::strerror(errno));
    }
}

}  // namespace bg
