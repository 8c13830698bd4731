// io_uring engine: aligned covers read into registered bounce buffers, exact bytes copied out.
#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "io/reader_impl.h"
#include "util/check.h"

namespace bg::io::detail {

namespace {

class UringReader final : public Reader {
public:
    UringReader(const std::vector<std::string>& paths, const IoConfig& cfg, const FaultPlan& faults);
    ~UringReader() override { close_all(); }
    UringReader(const UringReader&) = delete;
    UringReader& operator=(const UringReader&) = delete;

    void submit(ReadOp* op) override;
    void submit(ReadOp* const* ops, size_t n) override;
    size_t poll(ReadOp** out, size_t max, bool wait) override;
    uint64_t pending() const override { return pending_; }
    ReaderStats stats() const override { return stats_; }
    uint32_t file_count() const override { return static_cast<uint32_t>(files_.size()); }
    uint64_t file_size(uint32_t file) const override { return files_.at(file).bytes; }
    const std::string& path(uint32_t file) const override { return files_.at(file).path; }
    const IoConfig& config() const override { return cfg_; }
    const char* engine_name() const override { return name_.c_str(); }

private:
    // One device read in progress; slot i always uses bounce buffer i, so a piece needs no
    // buffer bookkeeping of its own.
    struct Piece {
        ReadOp* op = nullptr;
        int fd = -1;               // of op's file
        uint64_t cover_start = 0;  // file offset held by the buffer's first byte (aligned)
        uint64_t cover_end = 0;    // aligned, clipped to the file's aligned end
        uint64_t want_start = 0;   // the exact bytes this piece owes its op
        uint64_t want_end = 0;
        uint64_t read_pos = 0;     // where the next device read for this piece starts (aligned)
    };

    // Opens one file, with O_DIRECT if `direct` and its filesystem takes it (f.direct says).
    void open_file(OpenFile& f, bool direct);
    void close_all();
    void start_pieces();
    void prep(uint32_t slot);
    void flush();
    void reap();
    void on_result(uint32_t slot, int64_t res);
    void fail_op(ReadOp* op, int err);
    void release(uint32_t slot);
    void maybe_finish(ReadOp* op);
    uint32_t kernel_in_flight() const { return in_flight_ - io_uring_sq_ready(&ring_); }
    uint8_t* buffer(uint32_t slot) const { return buffers_ + static_cast<size_t>(slot) * cfg_.read_bytes; }

    IoConfig cfg_;
    FaultInjector faults_;
    std::string name_;
    std::vector<OpenFile> files_;
    io_uring ring_{};
    bool ring_ready_ = false;
    bool fixed_ = false;
    uint8_t* buffers_ = nullptr;
    std::unique_ptr<Piece[]> pieces_;
    std::unique_ptr<uint32_t[]> free_slots_;
    uint32_t n_free_ = 0;
    // Pieces owned by the ring: prepared SQEs not yet submitted plus reads the kernel holds.
    uint32_t in_flight_ = 0;
    OpFifo waiting_;   // ops with bytes not yet handed to a piece
    OpFifo finished_;  // completed ops that poll has not returned yet
    uint64_t pending_ = 0;
    ReaderStats stats_;
};

UringReader::UringReader(const std::vector<std::string>& paths, const IoConfig& cfg, const FaultPlan& faults)
    : cfg_(cfg), faults_(faults) {
    try {
        std::string notes;
        files_.reserve(paths.size());
        uint32_t refused = 0;
        for (const std::string& path : paths) {
            files_.push_back(OpenFile{path, -1, 0, false});
            open_file(files_.back(), cfg.direct);
            refused += cfg.direct && !files_.back().direct;
            files_.back().bytes = file_bytes_of(files_.back().fd, path);
        }
        if (refused > 0) {
            cfg_.direct = false;
            notes = files_.size() == 1 ? " (O_DIRECT refused by the filesystem)"
                                       : strf(" (O_DIRECT refused by the filesystem for %u of %zu files)", refused,
                                              files_.size());
        }
        const std::string& path = files_[0].path;  // names the reader in start-up errors

        const uint32_t qd = cfg_.queue_depth;
        const size_t total = static_cast<size_t>(qd) * cfg_.read_bytes;
        buffers_ = static_cast<uint8_t*>(std::aligned_alloc(kAlign, total));
        if (!buffers_) fail("cannot allocate %zu bytes of io buffers for %s", total, path.c_str());
        pieces_ = std::make_unique<Piece[]>(qd);
        free_slots_ = std::make_unique<uint32_t[]>(qd);
        for (uint32_t i = 0; i < qd; ++i) free_slots_[i] = qd - 1 - i;
        n_free_ = qd;

        // The SQ never holds more than queue_depth entries (one per piece at most), and the CQ
        // is twice the SQ, so neither can overflow.
        int ret = io_uring_queue_init(qd, &ring_, IORING_SETUP_COOP_TASKRUN);
        if (ret == -EINVAL) ret = io_uring_queue_init(qd, &ring_, 0);  // kernels before 5.19
        if (ret < 0)
            fail("io_uring is unavailable for %s: %s (try --io pread)", path.c_str(), std::strerror(-ret));
        ring_ready_ = true;

        std::vector<iovec> iov(qd);
        for (uint32_t i = 0; i < qd; ++i) iov[i] = {buffer(i), cfg_.read_bytes};
        ret = io_uring_register_buffers(&ring_, iov.data(), qd);
        fixed_ = ret == 0;
        if (!fixed_) notes += strf(" (buffers not registered: %s)", std::strerror(-ret));
        name_ = std::string(cfg_.direct ? "io_uring+O_DIRECT" : "io_uring buffered") + notes;
    } catch (...) {
        close_all();
        throw;
    }
}

void UringReader::open_file(OpenFile& f, bool direct) {
    if (direct) {
        f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (f.fd < 0 && errno != EINVAL) fail("cannot open %s: %s", f.path.c_str(), std::strerror(errno));
        if (f.fd >= 0) {
            // Some filesystems accept O_DIRECT at open and refuse it only at the first read,
            // so one aligned read decides before any caller's op can fail with EINVAL.
            void* probe = std::aligned_alloc(kAlign, kAlign);
            if (!probe) fail("%s: out of memory", f.path.c_str());
            const ssize_t n = ::pread(f.fd, probe, kAlign, 0);
            const int err = errno;
            std::free(probe);
            if (!(n < 0 && err == EINVAL)) {
                f.direct = true;
                return;
            }
            ::close(f.fd);
            f.fd = -1;
        }
    }
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) fail("cannot open %s: %s", f.path.c_str(), std::strerror(errno));
    f.direct = false;
}

void UringReader::close_all() {
    if (ring_ready_) {
        // The kernel may still be writing into the bounce buffers; they stay allocated until
        // every submitted read has reported. Prepared but unsubmitted SQEs die with the ring.
        uint32_t outstanding = kernel_in_flight();
        while (outstanding > 0) {
            io_uring_cqe* cqe = nullptr;
            const int ret = io_uring_wait_cqe(&ring_, &cqe);
            if (ret == -EINTR) continue;
            if (ret < 0) break;
            io_uring_cqe_seen(&ring_, cqe);
            --outstanding;
        }
        io_uring_queue_exit(&ring_);
        ring_ready_ = false;
    }
    std::free(buffers_);
    buffers_ = nullptr;
    for (OpenFile& f : files_)
        if (f.fd >= 0) ::close(f.fd);
    files_.clear();
}

void UringReader::submit(ReadOp* op) { submit(&op, 1); }

void UringReader::submit(ReadOp* const* ops, size_t n) {
    // Every op is checked before any is queued: a bad one leaves the reader as it was.
    for (size_t i = 0; i < n; ++i) check_range(ops[i], files_);
    for (size_t i = 0; i < n; ++i) {
        ReadOp* op = ops[i];
        reset_op(op);
        ++pending_;
        if (op->bytes == 0) {
            ++stats_.ops;
            finished_.push(op);
            continue;
        }
        waiting_.push(op);
    }
    start_pieces();
    flush();
}

size_t UringReader::poll(ReadOp** out, size_t max, bool wait) {
    size_t n = 0;
    for (;;) {
        reap();
        start_pieces();
        flush();
        while (n < max && !finished_.empty()) out[n++] = finished_.pop();
        if (n > 0 || !wait || max == 0 || pending_ == 0) break;
        BG_CHECK(in_flight_ > 0);
        if (kernel_in_flight() == 0) {
            // The kernel refused the SQEs for now (EAGAIN/EBUSY): waiting for a completion
            // would hang, so back off and submit again.
            ::usleep(50);
            continue;
        }
        io_uring_cqe* cqe = nullptr;
        const int ret = io_uring_wait_cqe(&ring_, &cqe);
        if (ret < 0 && ret != -EINTR) fail("io_uring wait on %s failed: %s", files_[0].path.c_str(), std::strerror(-ret));
    }
    pending_ -= n;
    return n;
}

void UringReader::start_pieces() {
    while (n_free_ > 0 && !waiting_.empty()) {
        ReadOp* op = waiting_.front();
        const uint32_t slot = free_slots_[--n_free_];
        Piece& p = pieces_[slot];
        const uint64_t lo = op->offset + op->next_piece;
        const OpenFile& f = files_[op->file];
        p.op = op;
        p.fd = f.fd;
        p.cover_start = align_down(lo);
        p.want_start = lo;
        p.want_end = std::min(op->offset + op->bytes, p.cover_start + cfg_.read_bytes);
        p.cover_end = std::min(align_up(p.want_end), align_up(f.bytes));
        p.read_pos = p.cover_start;
        op->next_piece += p.want_end - lo;
        ++op->pieces_in_flight;
        ++in_flight_;
        if (op->next_piece == op->bytes) waiting_.pop();
        prep(slot);
    }
}

void UringReader::prep(uint32_t slot) {
    if (faults_.delay_us()) ::usleep(faults_.delay_us());
    const Piece& p = pieces_[slot];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    BG_CHECK(sqe != nullptr);  // one SQE per piece at most, and pieces <= SQ entries
    uint8_t* dst = buffer(slot) + (p.read_pos - p.cover_start);
    const unsigned len = static_cast<unsigned>(p.cover_end - p.read_pos);
    if (fixed_) io_uring_prep_read_fixed(sqe, p.fd, dst, len, p.read_pos, static_cast<int>(slot));
    else io_uring_prep_read(sqe, p.fd, dst, len, p.read_pos);
    io_uring_sqe_set_data64(sqe, slot);
    ++stats_.pieces;
}

void UringReader::flush() {
    while (io_uring_sq_ready(&ring_) > 0) {
        const int ret = io_uring_submit(&ring_);
        if (ret == -EINTR) continue;
        if (ret == -EAGAIN || ret == -EBUSY) return;  // resources short for now; poll tries again
        if (ret < 0) fail("io_uring submit on %s failed: %s", files_[0].path.c_str(), std::strerror(-ret));
        if (ret == 0) return;
    }
}

void UringReader::reap() {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
        const uint32_t slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
        const int64_t res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        BG_CHECK(slot < cfg_.queue_depth && pieces_[slot].op != nullptr);
        on_result(slot, faults_.apply(res));
    }
}

void UringReader::on_result(uint32_t slot, int64_t res) {
    Piece& p = pieces_[slot];
    ReadOp* op = p.op;
    if (op->error != 0 || res < 0) {
        if (op->error == 0 && (res == -EINTR || res == -EAGAIN)) {
            ++stats_.retries;
            prep(slot);
            return;
        }
        // An op that has failed takes no more reads; its pieces just drain.
        if (res < 0 && res != -EINTR && res != -EAGAIN) fail_op(op, static_cast<int>(-res));
        release(slot);
        maybe_finish(op);
        return;
    }
    stats_.bytes_read += static_cast<uint64_t>(res);
    const uint64_t valid_end = p.read_pos + static_cast<uint64_t>(res);
    if (valid_end >= p.want_end) {
        // Also the normal end of an O_DIRECT read at EOF: short, but everything owed is there.
        std::memcpy(op->dst + (p.want_start - op->offset), buffer(slot) + (p.want_start - p.cover_start),
                    p.want_end - p.want_start);
        op->done += p.want_end - p.want_start;
        release(slot);
        maybe_finish(op);
        return;
    }
    if (res == 0) {
        // End of file before the bytes owed: the file shrank since it was opened.
        fail_op(op, EIO);
        release(slot);
        maybe_finish(op);
        return;
    }
    // O_DIRECT needs an aligned restart; the bytes before it are already in the buffer. A read
    // that ends off a 4 KiB boundary, or gains no aligned ground, stopped at the end of the
    // file: it shrank below the bytes owed since it was opened.
    const uint64_t restart = align_down(valid_end);
    if (restart <= p.read_pos || restart != valid_end) {
        fail_op(op, EIO);
        release(slot);
        maybe_finish(op);
        return;
    }
    ++stats_.short_reads;
    p.read_pos = restart;
    prep(slot);
}

void UringReader::fail_op(ReadOp* op, int err) {
    if (op->error != 0) return;
    op->error = err;
    if (op->next_piece < op->bytes) {
        // Only the head of the queue can have pieces both issued and still to issue.
        BG_CHECK(waiting_.front() == op);
        waiting_.pop();
    }
}

void UringReader::release(uint32_t slot) {
    Piece& p = pieces_[slot];
    --p.op->pieces_in_flight;
    p.op = nullptr;
    free_slots_[n_free_++] = slot;
    --in_flight_;
}

void UringReader::maybe_finish(ReadOp* op) {
    if (op->pieces_in_flight != 0) return;
    if (op->error == 0 && op->done != op->bytes) return;
    ++stats_.ops;
    if (op->error != 0) ++stats_.errors;
    else stats_.bytes_requested += op->bytes;
    finished_.push(op);
}

}  // namespace

std::unique_ptr<Reader> make_uring_reader(const std::vector<std::string>& paths, const IoConfig& cfg,
                                          const FaultPlan& faults) {
    return std::make_unique<UringReader>(paths, cfg, faults);
}

}  // namespace bg::io::detail
