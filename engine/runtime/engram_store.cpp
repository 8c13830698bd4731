#include "runtime/engram_store.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "util/check.h"

namespace bg {

EngramCounters EngramCounters::operator-(const EngramCounters& o) const {
    return {rows - o.rows, row_bytes - o.row_bytes, disk_read_bytes - o.disk_read_bytes, disk_ms - o.disk_ms};
}

nlohmann::json EngramCounters::to_json() const {
    return {{"rows", rows}, {"row_bytes", row_bytes}, {"disk_read_bytes", disk_read_bytes}, {"disk_ms", disk_ms}};
}

EngramStore::EngramStore(const MoeModel& m, Backend& backend, io::Reader& reader, uint64_t buffer_bytes)
    : m_(m), backend_(backend), reader_(reader), buffer_bytes_(buffer_bytes) {
    uint64_t row_bytes = 0;
    uint64_t reads_per_row = 1;
    for (int64_t l : m.moe_shape().engram_layers) {
        row_bytes = std::max(row_bytes, m.engram_row(l, 0).bytes());
        if (m.engram_format(l).fork()) reads_per_row = 2;
    }
    if (row_bytes > 0 && buffer_bytes < row_bytes)
        fail("engram: buffer of %llu bytes cannot hold one row of %llu bytes", (unsigned long long)buffer_bytes,
             (unsigned long long)row_bytes);
    const uint64_t cap = row_bytes ? buffer_bytes / row_bytes : 1;
    rows_per_fetch_ = static_cast<int64_t>(cap);
    ops_.resize(cap * reads_per_row);
    done_.resize(cap * reads_per_row);
    buffer_ = backend.alloc_device(buffer_bytes);
    staging_ = backend.alloc_host(buffer_bytes);
}

EngramStore::~EngramStore() {
    backend_.free_device(buffer_);
    backend_.free_host(staging_);
}

const uint8_t* EngramStore::fetch_raw(int64_t layer, const uint64_t* rows, int64_t n, Ops& ops) {
    BG_CHECK(n <= rows_per_fetch());
    const double t0_ms = now_ms();
    const uint64_t before = reader_.stats().bytes_read;
    uint64_t at = 0;
    size_t n_ops = 0;
    auto submit = [&](const ByteRange& r, int64_t i) {
        io::ReadOp& op = ops_[n_ops++];
        op = io::ReadOp{};
        op.file = r.file;
        op.offset = r.offset;
        op.bytes = r.bytes;
        op.dst = staging_ + at;
        op.tag = static_cast<uint64_t>(i);
        at += r.bytes;
        reader_.submit(&op);
    };
    for (int64_t i = 0; i < n; ++i) {
        // Values, then (fork-fp8) the scales right behind them: the packed row.
        const EngramRowRanges r = m_.engram_row(layer, rows[i]);
        submit(r.values, i);
        if (r.scales.bytes) submit(r.scales, i);
    }
    // Every read must land before an error is raised: they write into staging_.
    const io::ReadOp* failed = nullptr;
    for (size_t got = 0; got < n_ops;) {
        const size_t k = reader_.poll(done_.data(), done_.size(), true);
        for (size_t j = 0; j < k; ++j)
            if (done_[j]->error && !failed) failed = done_[j];
        got += k;
    }
    if (failed)
        fail("engram: read of layer %lld row at offset %llu of %s failed: %s", (long long)layer,
             (unsigned long long)failed->offset, reader_.path(failed->file).c_str(), std::strerror(failed->error));
    // The device buffer is refilled only once the ops reading it have run; the host waited for
    // the disk meanwhile, and the device worked through what was queued before.
    if (buffer_read_pending_) {
        ops.sync();
        buffer_read_pending_ = false;
    }
    backend_.copy(buffer_, staging_, at, CopyKind::kHostToDevice);
    c_.rows += static_cast<uint64_t>(n);
    c_.row_bytes += at;
    c_.disk_read_bytes += reader_.stats().bytes_read - before;
    const double t1_ms = now_ms();
    c_.disk_ms += t1_ms - t0_ms;
    timeline_.add(t0_ms, t1_ms);
    return buffer_;
}

void EngramStore::fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, Ops& ops) {
    const int64_t dim = m_.moe_shape().engram_dim;
    const EngramFormat f = m_.engram_format(layer);
    for (int64_t i0 = 0; i0 < n; i0 += rows_per_fetch()) {
        const int64_t cnt = std::min<int64_t>(n - i0, rows_per_fetch());
        const uint8_t* raw = fetch_raw(layer, rows + i0, cnt, ops);
        // Queued, not waited for: the next fetch waits for it, after its disk reads.
        dequantize_engram_rows(ops, f, raw, out + i0 * dim, cnt, dim);
        buffer_read_pending_ = true;
    }
}

}  // namespace bg
