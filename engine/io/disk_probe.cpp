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

    // Batches: each the reads of one decode layer's Engram rows, in one submission.
    res.batch_reads = std::min<uint64_t>(cfg.batch_reads, ops.size());
    if (file_bytes > 0 && res.batch_reads > 0 && cfg.batches > 0) {
        drop_page_cache(path);
        std::vector<ReadOp*> batch(res.batch_reads), done(res.batch_reads);
        std::vector<double> ms(cfg.batches);
        for (double& m : ms) {
            for (uint64_t i = 0; i < res.batch_reads; ++i) {
                ops[i] = ReadOp{};
                ops[i].dst = scratch.data();
                ops[i].offset = blocks > 0 ? rng.below(blocks) * detail::kAlign : 0;
                ops[i].bytes = std::min<uint64_t>(detail::kAlign, file_bytes - ops[i].offset);
                batch[i] = &ops[i];
            }
            const auto t0 = std::chrono::steady_clock::now();
            reader->submit(batch.data(), batch.size());
            for (uint64_t got = 0; got < res.batch_reads;) {
                const size_t n = reader->poll(done.data(), done.size(), true);
                for (size_t i = 0; i < n; ++i)
                    if (done[i]->error != 0)
                        fail("disk probe: read of %llu bytes at offset %llu failed: %s",
                             (unsigned long long)done[i]->bytes, (unsigned long long)done[i]->offset,
                             std::strerror(done[i]->error));
                got += n;
            }
            m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
        std::sort(ms.begin(), ms.end());
        res.batch_ms_median = ms[ms.size() / 2];
        res.batch_ms_p90 = ms[std::min(ms.size() - 1, ms.size() * 9 / 10)];
    }
    return res;
}

}  // namespace bg::io
