// The simplest providers: each expert and each Engram row read with pread, no overlap.
#pragma once

#include <cstdint>
#include <vector>

#include "model/moe_model.h"
#include "model/providers.h"

namespace bg {

// Reads each expert with pread into one buffer sized at start-up, one at a time, in the
// announced order (no overlap: the simplest correct provider).
class PreadExpertProvider final : public ExpertProvider {
public:
    explicit PreadExpertProvider(const MoeModel& m);
    int64_t begin_layer(int64_t layer, const int32_t* experts, const int32_t* tokens, int64_t n, bool host_compute) override;
    int32_t next_ready(ExpertView* view) override;
    void release(int32_t) override {}
    void end_layer() override {}
    uint64_t bytes_read() const { return bytes_read_; }
    uint64_t fetches() const { return fetches_; }

private:
    const MoeModel& m_;
    std::vector<uint8_t> buf_;  // [largest expert's bytes]
    int64_t layer_ = -1;
    const int32_t* list_ = nullptr;
    int64_t n_ = 0, next_ = 0;
    uint64_t bytes_read_ = 0, fetches_ = 0;
};

// Reads Engram rows with pread, one row at a time (rows are scattered).
class PreadEngramProvider final : public EngramProvider {
public:
    explicit PreadEngramProvider(const MoeModel& m);
    void fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, Ops& ops) override;
    uint64_t bytes_read() const { return bytes_read_; }

private:
    const MoeModel& m_;
    std::vector<uint8_t> row_;  // [one row's bytes]
    uint64_t bytes_read_ = 0;
};

}  // namespace bg
