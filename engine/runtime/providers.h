// Where the forward pass gets the weights that are not resident: routed experts and Engram
// rows. The forward pass asks for what it needs; a provider decides where the bytes come from
// (plain pread here; the tiered store with io_uring, host and device slots later).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/ops.h"
#include "model/dsv41_model.h"

namespace bg {

struct ExpertView {
    cpu::MatView gate;  // n_embd -> n_ff
    cpu::MatView up;    // n_embd -> n_ff
    cpu::MatView down;  // n_ff -> n_embd
};

class ExpertProvider {
public:
    virtual ~ExpertProvider() = default;
    // Announces the distinct experts one unit of work needs in a layer (ascending ids) and how
    // many tokens each serves. Each is then returned exactly once by next_ready, in whatever
    // order its bytes become present.
    virtual void begin_layer(int64_t layer, const int32_t* experts, const int32_t* tokens, int64_t n) = 0;
    // Blocks until an announced expert not yet returned is present; its view stays valid until
    // release(expert).
    virtual int32_t next_ready(ExpertView* view) = 0;
    virtual void release(int32_t expert) = 0;
    virtual void end_layer() = 0;
    // How many returned experts a caller may keep unreleased (their compute still queued on a
    // device) while it asks for the next one, without the provider stalling for want of a slot.
    virtual int64_t max_unreleased() const { return 0; }
};

class EngramProvider {
public:
    virtual ~EngramProvider() = default;
    // Dequantised rows: out[i*dim .. (i+1)*dim) = row rows[i] of the layer's table.
    virtual void fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out) = 0;
};

// Reads each expert with pread into one buffer sized at start-up, one at a time, in the
// announced order (no overlap: the simplest correct provider).
class PreadExpertProvider final : public ExpertProvider {
public:
    explicit PreadExpertProvider(const dsv41::Model& m);
    void begin_layer(int64_t layer, const int32_t* experts, const int32_t* tokens, int64_t n) override;
    int32_t next_ready(ExpertView* view) override;
    void release(int32_t) override {}
    void end_layer() override {}
    uint64_t bytes_read() const { return bytes_read_; }
    uint64_t fetches() const { return fetches_; }

private:
    const dsv41::Model& m_;
    std::vector<uint8_t> buf_;  // [largest expert's bytes]
    int64_t layer_ = -1;
    const int32_t* list_ = nullptr;
    int64_t n_ = 0, next_ = 0;
    uint64_t bytes_read_ = 0, fetches_ = 0;
};

// Reads Engram rows with pread, one row at a time (rows are scattered).
class PreadEngramProvider final : public EngramProvider {
public:
    explicit PreadEngramProvider(const dsv41::Model& m);
    void fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out) override;
    uint64_t bytes_read() const { return bytes_read_; }

private:
    const dsv41::Model& m_;
    std::vector<uint8_t> row_;  // [one row's bytes]
    uint64_t bytes_read_ = 0;
};

}  // namespace bg
