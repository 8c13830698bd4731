// Raw disk bandwidth through the same reader the engine uses, so ratios against it compare
// like with like.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "io/reader.h"
#include "io/reader_impl.h"
#include "util/check.h"
#include "util/rng.h"

namespace bg::io {

namespace {

// Evicts the file from the page cache so a buffered engine measures the disk, not memory.
// Dirty pages survive DONTNEED, hence the flush first.
void drop_page_cache(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open %s: %s", path.c_str(), std::strerror(errno));
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// Keeps every op of `ops` in flight until `next` has no more ranges; returns the seconds taken.
// next(op) sets op->offset and op->bytes and returns false when the work is done.
template <class Next>
double keep_queue_full(Reader& r, std::vector<ReadOp>& ops, Next next) {
    std::vector<ReadOp*> done(ops.size());
    const auto t0 = std::chrono::steady_clock::now();
    for (ReadOp& op : ops) {
        if (!next(&op)) break;
        r.submit(&op);
    }
    while (r.pending() > 0) {
        const size_t n = r.poll(done.data(), done.size(), true);
        for (size_t i = 0; i < n; ++i) {
            ReadOp* op = done[i];
            if (op->error != 0)
                fail("disk probe: read of %llu bytes at offset %llu failed: %s", (unsigned long long)op->bytes,
                     (unsigned long long)op->offset, std::strerror(op->error));
            if (next(op)) r.submit(op);
        }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ProbeResult probe_disk(const std::string& path, const ProbeConfig& cfg) {
    auto reader = Reader::open(path, cfg.io);
    ProbeResult res;
    res.engine = reader->engine_name();
    const uint64_t file_bytes = reader->file_size(0);
    const uint64_t read_bytes = cfg.io.read_bytes;

    // Every op writes into the same scratch: the contents are thrown away, and per-op
    // buffers would cost queue_depth x read_size of memory for nothing.
    std::vector<uint8_t> scratch(read_bytes);
    std::vector<ReadOp> ops(cfg.io.queue_depth);
    for (ReadOp& op : ops) op.dst = scratch.data();

    drop_page_cache(path);
    const uint64_t seq_total = std::min(cfg.seq_bytes, file_bytes);
    uint64_t seq_next = 0;
    res.seq_seconds = keep_queue_full(*reader, ops, [&](ReadOp* op) {
        if (seq_next >= seq_total) return false;
        op->offset = seq_next;
        op->bytes = std::min(read_bytes, seq_total - seq_next);
        seq_next += op->bytes;
        return true;
    });
    res.seq_bytes = seq_total;
    if (seq_total > 0 && res.seq_seconds > 0) res.seq_gb_s = seq_total / res.seq_seconds / 1e9;

    drop_page_cache(path);
    const uint64_t blocks = file_bytes / detail::kAlign;
    Rng rng(cfg.seed);
    uint64_t rand_left = file_bytes > 0 ? cfg.rand_reads : 0;
    uint64_t rand_bytes = 0;
    const double rand_seconds = keep_queue_full(*reader, ops, [&](ReadOp* op) {
        if (rand_left == 0) return false;
        --rand_left;
        // A file under 4 KiB has one short block at offset 0.
        op->offset = blocks > 0 ? rng.below(blocks) * detail::kAlign : 0;
        op->bytes = std::min<uint64_t>(detail::kAlign, file_bytes - op->offset);
        rand_bytes += op->bytes;
        return true;
    });
    if (rand_bytes > 0 && rand_seconds > 0) {
        res.rand_iops = static_cast<double>(file_bytes > 0 ? cfg.rand_reads : 0) / rand_seconds;
        res.rand_gb_s = rand_bytes / rand_seconds / 1e9;
    }
    return res;
}

}  // namespace bg::io
