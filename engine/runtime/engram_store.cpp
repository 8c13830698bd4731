#include "runtime/engram_store.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "util/check.h"

namespace bg {

EngramCounters EngramCounters::operator-(const EngramCounters& o) const {
    return {rows - o.rows,
            row_bytes - o.row_bytes,
            disk_read_bytes - o.disk_read_bytes,
            disk_ms - o.disk_ms,
            busy_ms - o.busy_ms,
            rows_read_ahead - o.rows_read_ahead,
            rows_discarded - o.rows_discarded};
}

nlohmann::json EngramCounters::to_json() const {
    return {{"rows", rows},
            {"row_bytes", row_bytes},
            {"disk_read_bytes", disk_read_bytes},
            {"disk_ms", disk_ms},
            {"busy_ms", busy_ms},
            {"rows_read_ahead", rows_read_ahead},
            {"rows_discarded", rows_discarded}};
}

EngramStore::EngramStore(const MoeModel& m, Backend& backend, io::Reader& reader, uint64_t buffer_bytes,
                         uint64_t ahead_bytes)
    : m_(m), backend_(backend), reader_(reader), buffer_bytes_(buffer_bytes) {
    uint64_t row_bytes = 0;
    uint64_t reads_per_row = 1;
    for (int64_t l : m.moe_shape().engram_layers) {
        row_bytes = std::max(row_bytes, m.engram_row(l, 0).bytes());
        if (m.engram_format(l).fork()) reads_per_row = 2;
    }
    if (row_bytes > 0 && buffer_bytes / 2 < row_bytes)
        fail("engram: buffer of %llu bytes cannot hold one row of %llu bytes in each half", (unsigned long long)buffer_bytes,
             (unsigned long long)row_bytes);
    const uint64_t cap = row_bytes ? buffer_bytes / 2 / row_bytes : 1;
    rows_per_fetch_ = static_cast<int64_t>(cap);
    ops_.resize(cap * reads_per_row);
    // A poll hands back a fetch's reads and read-ahead reads alike.
    const uint64_t ahead_rows = row_bytes ? ahead_bytes / row_bytes : 0;
    done_.resize(std::max<uint64_t>(cap, ahead_rows) * reads_per_row);
    batch_.resize(done_.size());
    slot_bytes_ = row_bytes;
    ring_.resize(ahead_bytes);
    ahead_.resize(ahead_rows);
    buffer_ = backend.alloc_device(buffer_bytes);
    staging_ = backend.alloc_host(buffer_bytes);
    disk_bytes_at_start_ = reader_.stats().bytes_read;
}

EngramStore::~EngramStore() {
    // Reads still in flight (an error unwound a fetch) must not land in a freed ring: the reader
    // copies a read's bytes out only while it is polled, so they are taken here first.
    try {
        while (ahead_in_flight_ > 0) reap(true, nullptr);
    } catch (...) {
    }
    backend_.free_device(buffer_);
    backend_.free_host(staging_);
}

EngramCounters EngramStore::counters() const {
    EngramCounters c = c_;
    // The reader is this store's alone, and read-ahead reads land between fetches.
    c.disk_read_bytes = reader_.stats().bytes_read - disk_bytes_at_start_;
    return c;
}

uint64_t EngramStore::prepare_row(int64_t layer, uint64_t row, io::ReadOp* ops, uint8_t* dst, uint64_t tag,
                                  uint32_t* n_reads, size_t* n_batch) {
    // Values, then (fork-fp8) the scales right behind them: the packed row.
    const EngramRowRanges r = m_.engram_row(layer, row);
    uint64_t at = 0;
    *n_reads = 0;
    for (const ByteRange* br : {&r.values, &r.scales}) {
        if (!br->bytes) continue;
        io::ReadOp& op = ops[(*n_reads)++];
        op = io::ReadOp{};
        op.file = br->file;
        op.offset = br->offset;
        op.bytes = br->bytes;
        op.dst = dst + at;
        op.tag = tag;
        at += br->bytes;
        BG_CHECK(*n_batch < batch_.size());
        batch_[(*n_batch)++] = &op;
    }
    return at;
}

void EngramStore::submit_batch(size_t n) {
    if (n == 0) return;
    const double t_ms = now_ms();
    reader_.submit(batch_.data(), n);
    if (reads_in_flight_ == 0) busy_since_ms_ = t_ms;
    reads_in_flight_ += n;
}

size_t EngramStore::reap(bool wait, const io::ReadOp** failed) {
    const size_t k = reader_.poll(done_.data(), done_.size(), wait);
    BG_CHECK(k <= reads_in_flight_);
    reads_in_flight_ -= k;
    if (k > 0 && reads_in_flight_ == 0) {
        const double t_ms = now_ms();
        timeline_.add(busy_since_ms_, t_ms);
        c_.busy_ms += t_ms - busy_since_ms_;
    }
    size_t own = 0;
    for (size_t j = 0; j < k; ++j) {
        const io::ReadOp* op = done_[j];
        if (op->tag & kAheadTag) {
            Ahead& a = ahead_[op->tag & ~kAheadTag];
            BG_CHECK(a.n_done < a.n_reads && ahead_in_flight_ > 0);
            ++a.n_done;
            --ahead_in_flight_;
            if (op->error && !a.failed) a.failed = op;
        } else {
            ++own;
            if (op->error && failed && !*failed) *failed = op;
        }
    }
    return own;
}

int64_t EngramStore::read_ahead(int64_t layer, const uint64_t* rows, int64_t n) {
    // Only a fetch submits reads of its own, and it waits for all of them.
    BG_CHECK(reap(false, nullptr) == 0);
    int64_t took = 0;
    size_t n_batch = 0;
    while (took < n && ahead_tail_ - ahead_head_ < ahead_.size()) {
        const uint64_t i = ahead_tail_ % ahead_.size();
        Ahead& a = ahead_[i];
        a.layer = layer;
        a.row = rows[took];
        a.n_done = 0;
        a.failed = nullptr;
        a.bytes = prepare_row(layer, a.row, a.reads, slot(i), kAheadTag | i, &a.n_reads, &n_batch);
        ahead_in_flight_ += a.n_reads;
        ++ahead_tail_;
        ++took;
    }
    submit_batch(n_batch);
    return took;
}

void EngramStore::discard_ahead() {
    while (ahead_in_flight_ > 0) BG_CHECK(reap(true, nullptr) == 0);
    c_.rows_discarded += ahead_tail_ - ahead_head_;
    ahead_head_ = ahead_tail_ = 0;
}

const uint8_t* EngramStore::fetch_raw(int64_t layer, const uint64_t* rows, int64_t n, Ops& ops) {
    BG_CHECK(n <= rows_per_fetch());
    const double t0_ms = now_ms();
    // This fetch's half of the staging area: reads land in it and rows are copied to it below,
    // so an upload still reading it must be done first.
    const int half = static_cast<int>(fetches_++ % 2);
    uint8_t* const staging = staging_ + static_cast<uint64_t>(half) * (buffer_bytes_ / 2);
    if (half_uploaded_at_sync_[half] == syncs_) {
        ops.sync();
        ++syncs_;
    }
    // The rows at the ring's front that match, in order, come from it (they go first in the
    // staging area); the rest are read now. A ring left holding other rows was read for nothing.
    int64_t ahead = 0;
    uint64_t at = 0;
    while (ahead < n && ahead_head_ + ahead < ahead_tail_) {
        const Ahead& a = ahead_at(ahead_head_ + ahead);
        if (a.layer != layer || a.row != rows[ahead]) break;
        at += a.bytes;
        ++ahead;
    }
    const io::ReadOp* failed = nullptr;
    size_t got = 0;
    auto take_ahead = [&] {
        uint64_t to = 0;
        for (int64_t i = 0; i < ahead; ++i, ++ahead_head_) {
            Ahead& a = ahead_at(ahead_head_);
            while (a.n_done < a.n_reads) got += reap(true, &failed);
            if (a.failed && !failed) failed = a.failed;
            std::memcpy(staging + to, slot(ahead_head_), a.bytes);
            to += a.bytes;
        }
        c_.rows_read_ahead += static_cast<uint64_t>(ahead);
        if (ahead_head_ == ahead_tail_) ahead_head_ = ahead_tail_ = 0;
    };
    const bool stale = ahead < n && ahead_head_ + ahead < ahead_tail_;
    if (stale) {
        take_ahead();
        discard_ahead();
    }
    size_t n_ops = 0;
    for (int64_t i = ahead; i < n; ++i) {
        uint32_t k = 0;
        size_t n_batch = n_ops;
        at += prepare_row(layer, rows[i], &ops_[n_ops], staging + at, static_cast<uint64_t>(i), &k, &n_batch);
        n_ops += k;
        BG_CHECK(n_batch == n_ops);
    }
    submit_batch(n_ops);
    if (!stale) take_ahead();
    // Every read must land before an error is raised: they write into the staging area and the ring.
    while (got < n_ops) got += reap(true, &failed);
    if (failed) {
        while (ahead_in_flight_ > 0) reap(true, nullptr);
        fail("engram: read of layer %lld row at offset %llu of %s failed: %s", (long long)layer,
             (unsigned long long)failed->offset, reader_.path(failed->file).c_str(), std::strerror(failed->error));
    }
    // Queued behind the last fetch's dequantisation, which reads the device buffer.
    ops.upload(buffer_, staging, at);
    half_uploaded_at_sync_[half] = syncs_;
    c_.rows += static_cast<uint64_t>(n);
    c_.row_bytes += at;
    c_.disk_ms += now_ms() - t0_ms;
    return buffer_;
}

void EngramStore::fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, Ops& ops) {
    const int64_t dim = m_.moe_shape().engram_dim;
    const EngramFormat f = m_.engram_format(layer);
    for (int64_t i0 = 0; i0 < n; i0 += rows_per_fetch()) {
        const int64_t cnt = std::min<int64_t>(n - i0, rows_per_fetch());
        const uint8_t* raw = fetch_raw(layer, rows + i0, cnt, ops);
        // Queued, not waited for: the next fetch's upload is queued behind it. The device's busy
        // time holds it (the caller's bracket is closed while this waits for reads).
        ops.busy_begin(Ops::BusyKind::kChain);
        dequantize_engram_rows(ops, f, raw, out + i0 * dim, cnt, dim);
        ops.busy_end();
    }
}

}  // namespace bg
