// Where the forward pass gets the weights that are not resident: routed experts and Engram
// rows. The forward pass asks for what it needs; a provider decides where the bytes come from
// (plain pread: runtime/providers.h; the tiered stores: runtime/expert_store.h, engram_store.h).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace bg {

struct ExpertView {
    MatView gate;  // n_embd -> n_ff
    MatView up;    // n_embd -> n_ff
    MatView down;  // n_ff -> n_embd
    // The matrices are in host memory, to be computed by the CPU where they lie (a host-resident
    // expert of a decode step, --decode-experts); otherwise in the backend's memory.
    bool on_host = false;
    // Part of an expert split between the paths (ExpertMats::hidden_rows: these matrices are some
    // of its hidden rows). Its host part's output is added to the device part's (Ops::
    // moe_scatter_join); the device part's is written as any expert's.
    bool part = false;
    // Not empty: the bytes are still landing (a copy in flight). Compute queued on a device
    // waits for it first (Ops::wait_event); the host need not.
    DeviceEvent ready;
};

class ExpertProvider {
public:
    virtual ~ExpertProvider() = default;
    // A hint, before a layer's routing is known, that it will route n_slots (token, rank) slots
    // among the experts the provider holds resident: it may start moving those toward the device
    // while the attention half computes. begin_layer follows for the same layer. Moves results
    // of nothing: which experts are used is still what begin_layer announces.
    virtual void prepare_layer(int64_t /*layer*/, int64_t /*n_slots*/) {}
    // Whether prepare_layer would move anything for n_slots: only then must the last layer have
    // ended (end_layer) before it is called; a caller may leave that layer open until the next
    // begin_layer otherwise.
    virtual bool speculates(int64_t /*n_slots*/) const { return false; }
    // A hint that begin_layer comes within `us` microseconds: a provider whose own thread starts
    // the copies keeps that thread awake until then, so the layer's first copy starts without a
    // wake from sleep (tens of microseconds). Results of nothing.
    virtual void expect_layer(int64_t /*us*/) {}
    // Announces the distinct experts one unit of work needs in a layer (ascending ids) and how
    // many tokens each serves. Each is then returned exactly once by next_ready, in whatever
    // order its bytes become present, or, split between the CPU and the device (host_compute),
    // as two parts (ExpertView::part), each returned once and released once; returns how many
    // returns to expect (n plus the split experts). With host_compute the caller can compute an expert on the
    // CPU from host memory (it holds the tokens' activations there), and the provider may return
    // host-resident experts so (ExpertView::on_host) instead of copying them. The caller computes
    // those on a thread of its own (those handed out together in one job) and releases each from
    // there as its job ends (release_computed): a provider that returns them takes release from
    // that thread too.
    virtual int64_t begin_layer(int64_t layer, const int32_t* experts, const int32_t* tokens, int64_t n,
                                bool host_compute) = 0;
    // Blocks until an announced expert not yet returned is present, or on its way with an event
    // that passes when it lands (ExpertView::ready); its view stays valid until release(expert).
    virtual int32_t next_ready(ExpertView* view) = 0;
    // next_ready for several at once: blocks until an announced expert not yet returned is
    // present, then returns it and the others present now, up to max (experts[i], views[i]), or
    // one on its way alone;
    // returns how many. A caller computes experts in device memory together (Ops::
    // expert_ffn_batch): a decode layer's experts in VRAM are all present at once. Here one.
    virtual int64_t next_ready_batch(int32_t* experts, ExpertView* views, int64_t max) {
        (void)max;
        experts[0] = next_ready(&views[0]);
        return 1;
    }
    // next_ready_batch without blocking: the experts present now, up to max, or none (0). A
    // caller takes those before queueing work of its own (a decode step's CPU experts start
    // sooner). Here none.
    virtual int64_t ready_batch_now(int32_t* /*experts*/, ExpertView* /*views*/, int64_t /*max*/) { return 0; }
    // After begin_layer with host_compute: a provider whose own thread queues copies lets the
    // caller queue the layer's first ones here, on its thread, once it has started the CPU's
    // experts (ready_batch_now) and before its own launches. Results of nothing; a provider that
    // is not called so queues them itself by the caller's first next_ready_batch. Here nothing.
    virtual void start_copies() {}
    virtual void release(int32_t expert) = 0;
    // release for an expert returned on_host, with how long the caller's CPU took to compute it
    // (a provider that splits by rates learns the CPU's from it; for a part, the part's time).
    // Here only the release.
    virtual void release_computed(int32_t expert, double cpu_ms) {
        (void)cpu_ms;
        release(expert);
    }
    virtual void end_layer() = 0;
    // How many returned experts a caller may keep unreleased (their compute still queued on a
    // device) while it asks for the next one, without the provider stalling for want of a slot.
    virtual int64_t max_unreleased() const { return 0; }
};

class EngramProvider {
public:
    virtual ~EngramProvider() = default;
    // Dequantised rows: out[i*dim .. (i+1)*dim) = row rows[i] of the layer's table, where out is
    // memory of `ops`' backend; the rows are in place when the call returns.
    virtual void fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, Ops& ops) = 0;
    // Rows later fetch_rows calls will ask for, offered in the order they will ask: a provider
    // may start reading them now, so the disk works while the caller computes. Returns how many
    // of rows[0..n) it took from the front (0 where it does not read ahead or has no room now);
    // the rest may be offered again after the next fetch_rows. n = 0 only lets reads already
    // started move on. Results never depend on what was taken: a fetch returns the same rows.
    virtual int64_t read_ahead(int64_t /*layer*/, const uint64_t* /*rows*/, int64_t /*n*/) { return 0; }
    // Whether read_ahead may take anything at all: a caller need not hash rows to offer otherwise.
    virtual bool reads_ahead() const { return false; }
};

}  // namespace bg
