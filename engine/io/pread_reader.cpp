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
    PreadReader(const std::vector<std::string>& paths, const IoConfig& cfg, const FaultPlan& faults)
        : cfg_(cfg), faults_(faults) {
        // The page cache does the alignment work here, so there are no bounce buffers.
        cfg_.direct = false;
        files_.reserve(paths.size());
        try {
            for (const std::string& path : paths) {
                OpenFile f;
                f.path = path;
                f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
                if (f.fd < 0) fail("cannot open %s: %s", path.c_str(), std::strerror(errno));
                files_.push_back(f);
                files_.back().bytes = file_bytes_of(f.fd, path);
            }
        } catch (...) {
            close_all();
            throw;
        }
    }
    ~PreadReader() override { close_all(); }
    PreadReader(const PreadReader&) = delete;
    PreadReader& operator=(const PreadReader&) = delete;

    void submit(ReadOp* op) override { submit(&op, 1); }
    void submit(ReadOp* const* ops, size_t n) override {
        for (size_t i = 0; i < n; ++i) check_range(ops[i], files_);
        for (size_t i = 0; i < n; ++i) {
            reset_op(ops[i]);
            ++pending_;
            waiting_.push(ops[i]);
        }
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
    uint32_t file_count() const override { return static_cast<uint32_t>(files_.size()); }
    uint64_t file_size(uint32_t file) const override { return files_.at(file).bytes; }
    const std::string& path(uint32_t file) const override { return files_.at(file).path; }
    const IoConfig& config() const override { return cfg_; }
    const char* engine_name() const override { return "pread (buffered)"; }

private:
    void close_all() {
        for (OpenFile& f : files_)
            if (f.fd >= 0) ::close(f.fd);
        files_.clear();
    }

    void read_op(ReadOp* op) {
        const int fd = files_[op->file].fd;
        while (op->done < op->bytes) {
            const uint64_t want = std::min<uint64_t>(op->bytes - op->done, cfg_.read_bytes);
            if (faults_.delay_us()) ::usleep(faults_.delay_us());
            const ssize_t got = ::pread(fd, op->dst + op->done, want, static_cast<off_t>(op->offset + op->done));
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

    IoConfig cfg_;
    FaultInjector faults_;
    std::vector<OpenFile> files_;
    OpFifo waiting_;
    uint64_t pending_ = 0;
    ReaderStats stats_;
};

}  // namespace

std::unique_ptr<Reader> make_pread_reader(const std::vector<std::string>& paths, const IoConfig& cfg,
                                          const FaultPlan& faults) {
    return std::make_unique<PreadReader>(paths, cfg, faults);
}

}  // namespace bg::io::detail
