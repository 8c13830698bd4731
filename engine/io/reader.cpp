#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/reader.h"
#include "io/reader_impl.h"
#include "util/check.h"

namespace bg::io {

namespace detail {

void check_range(const ReadOp* op, const std::vector<OpenFile>& files) {
    if (op->file >= files.size())
        fail("read of %llu bytes at offset %llu names file %u, but the reader has %zu", (unsigned long long)op->bytes,
             (unsigned long long)op->offset, op->file, files.size());
    const OpenFile& f = files[op->file];
    // Written as a subtraction so a huge offset + bytes cannot wrap past the check.
    if (op->offset > f.bytes || op->bytes > f.bytes - op->offset)
        fail("read of %llu bytes at offset %llu is past the end of %s (%llu bytes)",
             (unsigned long long)op->bytes, (unsigned long long)op->offset, f.path.c_str(),
             (unsigned long long)f.bytes);
    if (op->bytes > 0 && op->dst == nullptr)
        fail("read of %llu bytes at offset %llu of %s has no destination", (unsigned long long)op->bytes,
             (unsigned long long)op->offset, f.path.c_str());
}

uint64_t file_bytes_of(int fd, const std::string& path) {
    const off_t end = ::lseek(fd, 0, SEEK_END);
    if (end < 0) fail("cannot size %s: %s", path.c_str(), std::strerror(errno));
    return static_cast<uint64_t>(end);
}

}  // namespace detail

std::unique_ptr<Reader> Reader::open(const std::vector<std::string>& paths, const IoConfig& cfg,
                                     const FaultPlan& faults) {
    if (paths.empty()) fail("io reader opened with no file");
    if (cfg.queue_depth < 1 || cfg.queue_depth > 4096)
        fail("io queue depth must be 1..4096, got %u", cfg.queue_depth);
    if (cfg.read_bytes < detail::kAlign || cfg.read_bytes % detail::kAlign != 0)
        fail("io read size must be a multiple of 4096 and at least 4096, got %u", cfg.read_bytes);
    switch (cfg.engine) {
        case IoEngine::kUring: return detail::make_uring_reader(paths, cfg, faults);
        case IoEngine::kPread: return detail::make_pread_reader(paths, cfg, faults);
    }
    BG_CHECK_MSG(false, "an io engine without a reader");
    return nullptr;
}

void read_blocking(Reader& r, uint32_t file, uint8_t* dst, uint64_t bytes, uint64_t offset) {
    // poll() hands back whichever ops finish first, so another caller's op could be
    // swallowed here; only an idle reader can serve a blocking read.
    if (r.pending() != 0)
        fail("blocking read at offset %llu on a reader with %llu reads pending", (unsigned long long)offset,
             (unsigned long long)r.pending());
    ReadOp op;
    op.file = file;
    op.offset = offset;
    op.bytes = bytes;
    op.dst = dst;
    r.submit(&op);
    ReadOp* got = nullptr;
    while (r.poll(&got, 1, true) == 0) {
    }
    BG_CHECK(got == &op);
    if (op.error != 0)
        fail("read of %llu bytes at offset %llu of %s failed: %s", (unsigned long long)bytes, (unsigned long long)offset,
             r.path(file).c_str(), std::strerror(op.error));
}

}  // namespace bg::io
