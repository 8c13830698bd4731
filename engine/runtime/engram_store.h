// Engram rows straight from disk: the 4 KiB pages holding each row are read with the disk-tier
// reader (O_DIRECT), the row bytes pass through a page-locked staging area of the same size and
// land in a fixed device buffer (2 MiB by default); nothing is cached in host memory. A fork-fp8
// row (model/engram_format.h) is two ranges, its values and its scales in another tensor: two
// reads (two pages, as rows are random), packed back to back in the buffer. At most two reads
// per row that fits the buffer are in flight.
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
    double disk_ms = 0;            // wall time spent fetching
    EngramCounters operator-(const EngramCounters& o) const;
    nlohmann::json to_json() const;
};

class EngramStore final : public EngramProvider {
public:
    EngramStore(const MoeModel& m, Backend& backend, io::Reader& reader, uint64_t buffer_bytes);
    ~EngramStore() override;
    // Any backend: each buffer's worth of rows fetched, then dequantised by the backend into out.
    void fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, Ops& ops) override;
    int64_t rows_per_fetch() const { return rows_per_fetch_; }
    EngramCounters counters() const { return c_; }
    // The intervals spent fetching since the last clear_timeline() (reads and the copy behind them).
    const Timeline& timeline() const { return timeline_; }
    void clear_timeline() { timeline_.clear(); }
    uint64_t buffer_bytes() const { return buffer_bytes_; }

private:
    // rows[0..n) packed back to back in the device buffer (n <= rows_per_fetch()), in the table's
    // type, valid until the next call.
    const uint8_t* fetch_raw(int64_t layer, const uint64_t* rows, int64_t n, Ops& ops);

    const MoeModel& m_;
    Backend& backend_;
    io::Reader& reader_;
    uint64_t buffer_bytes_ = 0;
    uint8_t* buffer_ = nullptr;           // device memory [buffer_bytes]
    uint8_t* staging_ = nullptr;          // page-locked host memory [buffer_bytes]
    int64_t rows_per_fetch_ = 0;          // rows that fit the buffer
    std::vector<io::ReadOp> ops_;         // [rows_per_fetch_ x reads per row (1, or 2 with a fork-fp8 table)]
    std::vector<io::ReadOp*> done_;
    // The last fetch's dequantisation is queued on the ops, not waited for: the next fetch waits
    // for it (ops.sync) after its disk reads, before refilling the buffer. A forward syncs its ops
    // before it goes, so nothing queued outlives it.
    bool buffer_read_pending_ = false;
    EngramCounters c_;
    Timeline timeline_{timeline_capacity(m_.moe_shape().n_layer, m_.moe_shape().n_expert)};
};

}  // namespace bg
