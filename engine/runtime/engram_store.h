// Engram rows straight from disk: the 4 KiB pages holding each row are read with the disk-tier
// reader (O_DIRECT), the row bytes pass through a page-locked staging area of the same size and
// land in a fixed device buffer (2 MiB by default); nothing is cached in host memory. A fetch
// fills one half of the staging area and uploads it on the forward's ops, behind the last fetch's
// dequantisation, so the host need not wait for the device before refilling it (at a decode
// step's second Engram layer it waited for the whole layer before, about 27 us of idle device a
// token on an H100, 2026-12-06); fetches alternate halves, and one waits for the ops only where
// its half's last upload may still be queued (in decode the first fetch of a step, the device
// idle then). A fork-fp8
// row (model/engram_format.h) is two ranges, its values and its scales in another tensor: two
// reads (two pages, as rows are random), packed back to back in the buffer. At most two reads
// per row that fits the buffer are in flight.
//
// Read-ahead: the forward knows a pass's rows once its tokens are embedded (they hash from the
// tokens alone), so it offers them (read_ahead) in the order it will fetch them; their reads
// start at once and land in a host ring of fixed row slots, and the fetch that asks for them
// only waits for what is still in flight. The ring is transit, not a cache: each row read ahead
// is handed to exactly one fetch, then its slot is reused. A fetch whose rows differ from what
// was offered (a caller that changed its mind) drains the ring and reads them itself.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/backend.h"
#include "io/reader.h"
#include "model/moe_model.h"
#include "model/providers.h"
#include "util/timeline.h"

namespace bg {

struct EngramCounters {
    uint64_t rows = 0;
    uint64_t row_bytes = 0;        // exact bytes of the rows used
    uint64_t disk_read_bytes = 0;  // bytes the device read (whole pages)
    // Wall time fetch_rows spent waiting for reads (and for the ops, where a staging half's last
    // upload may still have been queued).
    double disk_ms = 0;
    double busy_ms = 0;            // wall time with an Engram read in flight (the timeline's intervals)
    uint64_t rows_read_ahead = 0;  // rows of `rows` whose reads a read_ahead had started
    uint64_t rows_discarded = 0;   // rows read ahead that no fetch asked for in their turn (read twice)
    EngramCounters operator-(const EngramCounters& o) const;
    nlohmann::json to_json() const;
};

class EngramStore final : public EngramProvider {
public:
    // ahead_bytes: the read-ahead ring (host memory, whole row slots); 0 turns read-ahead off.
    EngramStore(const MoeModel& m, Backend& backend, io::Reader& reader, uint64_t buffer_bytes,
                uint64_t ahead_bytes = 0);
    ~EngramStore() override;
    // Any backend: each buffer's worth of rows fetched, then dequantised by the backend into out.
    void fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, Ops& ops) override;
    int64_t read_ahead(int64_t layer, const uint64_t* rows, int64_t n) override;
    int64_t rows_per_fetch() const { return rows_per_fetch_; }
    // Rows the read-ahead ring holds at most.
    int64_t ahead_capacity() const { return static_cast<int64_t>(ahead_.size()); }
    EngramCounters counters() const;
    // The intervals with an Engram read in flight (read ahead or a fetch's own) since the last
    // clear_timeline(): each from the submission that found none in flight to the poll that saw
    // the last one land (reads are seen landing only when polled, so an interval may end late).
    const Timeline& timeline() const { return timeline_; }
    void clear_timeline() { timeline_.clear(); }
    uint64_t buffer_bytes() const { return buffer_bytes_; }
    // Host memory held: the pinned staging area and the read-ahead ring.
    uint64_t host_bytes() const { return buffer_bytes_ + ring_.size(); }
    bool reads_ahead() const override { return !ahead_.empty(); }

private:
    // One row read ahead: its reads land in its ring slot (values, then a fork-fp8 row's scales).
    struct Ahead {
        int64_t layer = -1;
        uint64_t row = 0;
        uint64_t bytes = 0;        // packed row bytes
        io::ReadOp reads[2];
        uint32_t n_reads = 0, n_done = 0;
        const io::ReadOp* failed = nullptr;  // the first of its reads that failed
    };
    static constexpr uint64_t kAheadTag = 1ull << 63;  // ReadOp::tag of a read-ahead read; else a fetch's

    // rows[0..n) packed back to back in the device buffer (n <= rows_per_fetch()), in the table's
    // type, valid until the next call. Rows at the front of the read-ahead ring are taken from it.
    const uint8_t* fetch_raw(int64_t layer, const uint64_t* rows, int64_t n, Ops& ops);
    // Takes what the reader has finished (waiting for one at least with wait); returns how many
    // of a fetch's own reads (tag < kAheadTag) finished, and keeps the first of them that failed.
    size_t reap(bool wait, const io::ReadOp** failed);
    Ahead& ahead_at(uint64_t i) { return ahead_[i % ahead_.size()]; }
    uint8_t* slot(uint64_t i) { return ring_.data() + (i % ahead_.size()) * slot_bytes_; }
    // Waits for every read-ahead read still in flight, then empties the ring.
    void discard_ahead();
    // Submits batch_[0..n) to the reader at once (with io_uring one system call, where a decode
    // token's 24 rows were 24), and starts a timeline interval when no read was in flight.
    void submit_batch(size_t n);
    // Prepares the reads of one row (values, then a fork-fp8 row's scales right behind them) in
    // ops[0..*n_reads) landing at dst, each tagged tag, and adds them to batch_ from *n_batch on;
    // returns the packed row's bytes.
    uint64_t prepare_row(int64_t layer, uint64_t row, io::ReadOp* ops, uint8_t* dst, uint64_t tag, uint32_t* n_reads,
                         size_t* n_batch);

    const MoeModel& m_;
    Backend& backend_;
    io::Reader& reader_;
    uint64_t buffer_bytes_ = 0;
    uint8_t* buffer_ = nullptr;           // device memory [buffer_bytes], of which a fetch fills half at most
    uint8_t* staging_ = nullptr;          // page-locked host memory [2][buffer_bytes / 2]
    int64_t rows_per_fetch_ = 0;          // rows that fit half the buffer
    std::vector<io::ReadOp> ops_;         // [rows_per_fetch_ x reads per row (1, or 2 with a fork-fp8 table)]
    std::vector<io::ReadOp*> done_;
    std::vector<io::ReadOp*> batch_;      // reads prepared for one submit_batch: as many as done_ holds
    uint64_t slot_bytes_ = 0;             // the largest packed row
    std::vector<uint8_t> ring_;           // host memory, as asked: [ahead_.size()][slot_bytes_] of it used
    std::vector<Ahead> ahead_;            // the ring's rows; entry i (mod size) owns slot i
    uint64_t ahead_head_ = 0, ahead_tail_ = 0;  // rows [head, tail) are in the ring, oldest first
    uint64_t ahead_in_flight_ = 0;        // read-ahead reads submitted and not yet reaped
    uint64_t reads_in_flight_ = 0;        // every read submitted and not yet reaped
    double busy_since_ms_ = 0;            // when reads_in_flight_ last left 0
    uint64_t disk_bytes_at_start_ = 0;    // the reader's bytes_read when this store began
    // Fetches so far (the next takes staging half fetches_ % 2), this store's ops.sync calls, and
    // for each half the count of those syncs when its last upload was queued (-1: none yet): an
    // upload queued since the store last waited may still be reading its half. A forward syncs
    // its ops before it goes, so nothing queued outlives the store.
    uint64_t fetches_ = 0;
    int64_t syncs_ = 0;
    int64_t half_uploaded_at_sync_[2] = {-1, -1};
    EngramCounters c_;
    Timeline timeline_{timeline_capacity(m_.moe_shape().n_layer, m_.moe_shape().n_expert)};
};

}  // namespace bg
