// pread engine: the synchronous, buffered baseline the io_uring engine is measured against.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/reader_impl.h"
#include "util/check.h"

namespace bg::io::detail {

namespace {

class PreadReader final : public Reader {
public:
    PreadReader(const std::string& path, const IoConfig& cfg, const FaultPlan& faults)
        : path_(path), cfg_(cfg), faults_(faults) {
        // The page cache does the alignment work here, so there are no bounce buffers.
        cfg_.direct = false;
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) fail("cannot open %s: %s", path.c_str(), std::strerror(errno));
        const off_t end = ::lseek(fd_, 0, SEEK_END);
        if (end < 0) {
            const int err = errno;
            ::close(fd_);
            fail("cannot size %s: %s", path.c_str(), std::strerror(err));
        }
        file_bytes_ = static_cast<uint64_t>(end);
    }
    ~PreadReader() override { ::close(fd_); }
    PreadReader(const PreadReader&) = delete;
    PreadReader& operator=(const PreadReader&) = delete;

    void submit(ReadOp* op) override {
        check_range(op, file_bytes_, path_);
        reset_op(op);
        ++pending_;
        waiting_.push(op);
    }

    // The reads happen here, even with wait = false: a caller that only ever polls without
    // waiting must still see its ops finish.
    size_t poll(ReadOp** out, size_t max, bool) override {
        size_t n = 0;
        while (n < max && !waiting_.empty()) {
            ReadOp* op = waiting_.pop();
            read_op(op);
            ++stats_.ops;
            if (op->error != 0) ++stats_.errors;
            else stats_.bytes_requested += op->bytes;
            out[n++] = op;
        }
        pending_ -= n;
        return n;
    }

    uint64_t pending() const override { return pending_; }
    ReaderStats stats() const override { return stats_; }
    uint64_t file_size() const override { return file_bytes_; }
    const IoConfig& config() const override { return cfg_; }
    const char* engine_name() const override { return "pread (buffered)"; }

private:
    void read_op(ReadOp* op) {
        while (op->done < op->bytes) {
            const uint64_t want = std::min<uint64_t>(op->bytes - op->done, cfg_.read_bytes);
            if (faults_.delay_us()) ::usleep(faults_.delay_us());
            const ssize_t got = ::pread(fd_, op->dst + op->done, want, static_cast<off_t>(op->offset + op->done));
            ++stats_.pieces;
            const int64_t res = faults_.apply(got < 0 ? -static_cast<int64_t>(errno) : got);
            if (res == -EINTR || res == -EAGAIN) {
                ++stats_.retries;
                continue;
            }
            if (res < 0) {
                op->error = static_cast<int32_t>(-res);
                return;
            }
            if (res == 0) {
                // End of file before the bytes asked for: the file shrank since it was opened.
                op->error = EIO;
                return;
            }
            stats_.bytes_read += static_cast<uint64_t>(res);
            if (static_cast<uint64_t>(res) < want) ++stats_.short_reads;
            op->done += static_cast<uint64_t>(res);
        }
    }

    std::string path_;
    IoConfig cfg_;
    FaultInjector faults_;
    int fd_ = -1;
    uint64_t file_bytes_ = 0;
    OpFifo waiting_;
    uint64_t pending_ = 0;
    ReaderStats stats_;
};

}  // namespace

std::unique_ptr<Reader> make_pread_reader(const std::string& path, const IoConfig& cfg, const FaultPlan& faults) {
    return std::make_unique<PreadReader>(path, cfg, faults);
}

}  // namespace bg::io::detail
