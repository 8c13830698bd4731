// Disk tier: reads of exact byte ranges of the model's files, through io_uring with O_DIRECT
// (default) or plain pread (`--io pread`, for comparison). A reader opens each file of the
// model once (every shard of a split model) and a read names its file by index.
//
// Real GGUF data is not 4 KiB aligned, so each request is served by reading its aligned cover
// into the reader's own aligned bounce buffers (registered with the ring) and copying out the
// exact bytes. A request larger than read_bytes is split into pieces; at most queue_depth
// pieces are in flight. Records are caller-owned: submit() links the caller's ReadOp into an
// intrusive queue, so nothing is allocated per read. Short reads are resubmitted for the rest,
// EINTR/EAGAIN are retried, and any other error completes the op with its errno (the message
// names the file offset).
//
// One thread uses a Reader at a time (submit and poll from the same thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/named_enum.h"

namespace bg::io {
enum class IoEngine { kUring, kPread };
}  // namespace bg::io

namespace bg {
template <>
struct EnumNames<io::IoEngine> {
    static constexpr NamedValue<io::IoEngine> kNames[] = {{io::IoEngine::kUring, "uring"}, {io::IoEngine::kPread, "pread"}};
    static constexpr const char* kWhat = "--io";
};
}  // namespace bg

namespace bg::io {

struct IoConfig {
    IoEngine engine = IoEngine::kUring;
    uint32_t queue_depth = 64;        // pieces in flight at most
    uint32_t read_bytes = 1u << 20;   // largest piece (multiple of 4096)
    bool direct = true;               // O_DIRECT; falls back to buffered only if the FS refuses
};

// Test-only fault injection, applied to piece completions in the order they complete.
struct FaultPlan {
    uint32_t short_read_every = 0;  // every Nth completion delivers only half its bytes
    uint32_t eintr_every = 0;       // every Nth completion reports -EINTR (nothing read)
    uint32_t eagain_every = 0;      // every Nth completion reports -EAGAIN
    int64_t eio_at = -1;            // the Nth completion (0-based) reports -EIO
    uint32_t delay_us = 0;          // extra latency per piece
};

// One read, owned by the caller for as long as it is in flight.
struct ReadOp {
    // in
    uint32_t file = 0;        // which of the reader's files: an index into the paths it opened
    uint64_t offset = 0;      // exact offset in that file
    uint64_t bytes = 0;
    uint8_t* dst = nullptr;   // receives exactly `bytes` (any alignment)
    uint64_t tag = 0;         // for the caller
    // out (valid once poll returned it)
    int32_t error = 0;        // 0, or the errno that stopped it
    // reader-private
    uint64_t next_piece = 0;  // bytes of the range already handed to pieces
    uint64_t done = 0;        // bytes delivered
    uint32_t pieces_in_flight = 0;
    ReadOp* link = nullptr;
};

struct ReaderStats {
    uint64_t ops = 0;             // ReadOps completed
    uint64_t pieces = 0;          // device reads issued (resubmissions included)
    uint64_t bytes_requested = 0; // exact bytes delivered to callers
    uint64_t bytes_read = 0;      // bytes the device read (aligned covers)
    uint64_t short_reads = 0;     // resubmitted after a short read
    uint64_t retries = 0;         // resubmitted after EINTR/EAGAIN
    uint64_t errors = 0;          // ops completed with an error
};

class Reader {
public:
    // Opens every file of `paths` (at least one) for reading as the config says. Throws
    // bg::Error with the reason, naming the file.
    static std::unique_ptr<Reader> open(const std::vector<std::string>& paths, const IoConfig& cfg,
                                        const FaultPlan& faults = {});
    static std::unique_ptr<Reader> open(const std::string& path, const IoConfig& cfg, const FaultPlan& faults = {}) {
        return open(std::vector<std::string>{path}, cfg, faults);
    }
    virtual ~Reader() = default;

    // Queues op (its file must be one of the reader's and its range inside that file: else
    // bg::Error). Never blocks.
    virtual void submit(ReadOp* op) = 0;
    // Queues ops[0..n) as submit(op) each would, handed to the kernel together where the engine
    // can (io_uring: one system call for the batch, not one each). Should any range be bad, none
    // is queued (bg::Error).
    virtual void submit(ReadOp* const* ops, size_t n) = 0;
    // Returns up to `max` ops completed since the last call, in completion order. With
    // wait = true and ops pending, blocks until at least one completes.
    virtual size_t poll(ReadOp** out, size_t max, bool wait) = 0;
    // Ops submitted and not yet returned by poll.
    virtual uint64_t pending() const = 0;
    virtual ReaderStats stats() const = 0;
    virtual uint32_t file_count() const = 0;
    virtual uint64_t file_size(uint32_t file) const = 0;
    virtual const std::string& path(uint32_t file) const = 0;
    virtual const IoConfig& config() const = 0;
    virtual const char* engine_name() const = 0;  // "io_uring+O_DIRECT", "pread", ...
};

// Convenience for one blocking read of `bytes` at `offset` of file `file` through a reader:
// throws bg::Error naming the file, the offset and the errno on failure. The reader must have
// nothing else pending (poll could hand back another caller's op), else bg::Error.
void read_blocking(Reader& r, uint32_t file, uint8_t* dst, uint64_t bytes, uint64_t offset);

// Raw disk bandwidth with the same reader settings, for the harness's ratios (SPEC §5).
struct ProbeConfig {
    IoConfig io;
    uint64_t seq_bytes = 1ull << 30;   // read sequentially from offset 0 (capped at file size)
    uint64_t rand_reads = 20000;       // 4 KiB reads at random aligned offsets
    // Batches of batch_reads random 4 KiB reads handed over together, each waited for before the
    // next: the latency of a decode token's Engram rows (24 a layer on DeepSeek-V4.1-Flash).
    uint64_t batch_reads = 24;
    uint64_t batches = 200;
    uint64_t seed = 1;
};
struct ProbeResult {
    double seq_gb_s = 0;      // GB = 1e9 bytes
    double seq_seconds = 0;
    uint64_t seq_bytes = 0;
    double rand_iops = 0;
    double rand_gb_s = 0;
    double batch_ms_median = 0;  // one batch (ProbeConfig::batch_reads), submit to the last read's landing
    double batch_ms_p90 = 0;
    uint64_t batch_reads = 0;  // as run: at most the queue depth
    std::string engine;
};
ProbeResult probe_disk(const std::string& path, const ProbeConfig& cfg);

}  // namespace bg::io
