#include "runtime/providers.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/check.h"
#include "util/file_io.h"

namespace bg {

PreadExpertProvider::PreadExpertProvider(const MoeModel& m) : m_(m) {
    uint64_t most = 0;
    for (int64_t l = 0; l < m.moe_shape().n_layer; ++l) most = std::max(most, m.expert_bytes_each(l));
    buf_.resize(most);
}

int64_t PreadExpertProvider::begin_layer(int64_t layer, const int32_t* experts, const int32_t*, int64_t n, bool) {
    layer_ = layer;
    list_ = experts;
    n_ = n;
    next_ = 0;
    return n;
}

int32_t PreadExpertProvider::next_ready(ExpertView* v) {
    BG_CHECK(next_ < n_);
    const int32_t expert = list_[next_++];
    const ExpertRanges r = m_.expert_ranges(layer_, expert);
    // gate, up and down are in three tensors: three reads into one buffer, back to back.
    pread_exact(m_.fd(r.gate.file), buf_.data(), r.gate.bytes, r.gate.offset, "expert read");
    pread_exact(m_.fd(r.up.file), buf_.data() + r.gate.bytes, r.up.bytes, r.up.offset, "expert read");
    pread_exact(m_.fd(r.down.file), buf_.data() + r.gate.bytes + r.up.bytes, r.down.bytes, r.down.offset, "expert read");
    bytes_read_ += r.total();
    ++fetches_;
    m_.expert_views(layer_, buf_.data(), &v->gate, &v->up, &v->down);
    return expert;
}

PreadEngramProvider::PreadEngramProvider(const MoeModel& m) : m_(m) {
    uint64_t most = 0;
    for (int64_t l : m.moe_shape().engram_layers) most = std::max(most, m.engram_row(l, 0).bytes());
    row_.resize(most);
}

void PreadEngramProvider::fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, Ops& ops) {
    BG_CHECK(ops.memory_is_host());
    const int64_t dim = m_.moe_shape().engram_dim;
    const EngramFormat f = m_.engram_format(layer);
    for (int64_t i = 0; i < n; ++i) {
        const EngramRowRanges r = m_.engram_row(layer, rows[i]);
        // A fork-fp8 row is two reads (each from its tensor's shard): its values, then its scales
        // right behind them.
        pread_exact(m_.fd(r.values.file), row_.data(), r.values.bytes, r.values.offset, "engram read");
        if (r.scales.bytes)
            pread_exact(m_.fd(r.scales.file), row_.data() + r.values.bytes, r.scales.bytes, r.scales.offset, "engram read");
        dequantize_engram_rows(f, row_.data(), out + i * dim, 1, dim);
        bytes_read_ += r.bytes();
    }
}

}  // namespace bg
