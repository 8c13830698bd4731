// Pieces shared by the reader engines; not part of the public interface.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/reader.h"

namespace bg::io::detail {

constexpr uint64_t kAlign = 4096;

inline uint64_t align_down(uint64_t x) { return x & ~(kAlign - 1); }
inline uint64_t align_up(uint64_t x) { return (x + kAlign - 1) & ~(kAlign - 1); }

// Caller-owned ops chained through ReadOp::link, so queueing never allocates.
class OpFifo {
public:
    bool empty() const { return head_ == nullptr; }
    ReadOp* front() const { return head_; }
    void push(ReadOp* op) {
        op->link = nullptr;
        if (tail_) tail_->link = op;
        else head_ = op;
        tail_ = op;
    }
    ReadOp* pop() {
        ReadOp* op = head_;
        head_ = op->link;
        if (!head_) tail_ = nullptr;
        op->link = nullptr;
        return op;
    }

private:
    ReadOp* head_ = nullptr;
    ReadOp* tail_ = nullptr;
};

// Rewrites device results as the FaultPlan says. Both engines route every result through
// this before their normal handling, so injected faults take the same recovery path as real ones.
class FaultInjector {
public:
    explicit FaultInjector(const FaultPlan& plan) : plan_(plan) {}

    int64_t apply(int64_t res) {
        const uint64_t n = completions_++;
        const uint64_t nth = n + 1;
        if (plan_.eio_at >= 0 && n == static_cast<uint64_t>(plan_.eio_at)) return -EIO;
        if (plan_.eintr_every && nth % plan_.eintr_every == 0) return -EINTR;
        if (plan_.eagain_every && nth % plan_.eagain_every == 0) return -EAGAIN;
        if (plan_.short_read_every && nth % plan_.short_read_every == 0 && res > 0) {
            // A short count must leave the resubmission aligned and must make progress, so
            // it is a positive multiple of 4096; a read too small to halve that way is
            // interrupted instead.
            if (res <= static_cast<int64_t>(kAlign)) return -EINTR;
            const int64_t half = static_cast<int64_t>(align_down(static_cast<uint64_t>(res) / 2));
            return half < static_cast<int64_t>(kAlign) ? static_cast<int64_t>(kAlign) : half;
        }
        return res;
    }
    uint32_t delay_us() const { return plan_.delay_us; }

private:
    FaultPlan plan_;
    uint64_t completions_ = 0;
};

// One file a reader opened.
struct OpenFile {
    std::string path;
    int fd = -1;
    uint64_t bytes = 0;
    bool direct = false;  // opened with O_DIRECT (uring engine)
};

// Throws bg::Error unless op's file is one of `files` and [offset, offset + bytes) lies inside it.
void check_range(const ReadOp* op, const std::vector<OpenFile>& files);

// The size of an open file; throws bg::Error naming it.
uint64_t file_bytes_of(int fd, const std::string& path);

// Resets the reader-private and output fields before an op enters a reader.
inline void reset_op(ReadOp* op) {
    op->error = 0;
    op->next_piece = 0;
    op->done = 0;
    op->pieces_in_flight = 0;
    op->link = nullptr;
}

std::unique_ptr<Reader> make_uring_reader(const std::vector<std::string>& paths, const IoConfig& cfg,
                                          const FaultPlan& faults);
std::unique_ptr<Reader> make_pread_reader(const std::vector<std::string>& paths, const IoConfig& cfg,
                                          const FaultPlan& faults);

}  // namespace bg::io::detail
