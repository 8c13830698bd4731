#include <cstdlib>
#include <cstring>

#include "backend/device.h"
#include "cpu/cpu_ops.h"
#include "util/check.h"

namespace bg {

namespace {

class CpuBackend final : public Backend {
public:
    const char* name() const override { return "cpu"; }
    uint8_t* alloc_device(uint64_t bytes) override { return alloc(bytes, "device arena"); }
    void free_device(uint8_t* p) override { std::free(p); }
    uint8_t* alloc_host(uint64_t bytes) override { return alloc(bytes, "host pool"); }
    void free_host(uint8_t* p) override { std::free(p); }
    void copy(uint8_t* dst, const uint8_t* src, uint64_t bytes, CopyKind) override { std::memcpy(dst, src, bytes); }
    // The arena is host memory: a queued copy is done when it returns.
    uint64_t copy_async(uint8_t* dst, const uint8_t* src, uint64_t bytes, CopyKind kind) override {
        copy(dst, src, bytes, kind);
        return ++tickets_;
    }
    uint64_t copy_rows_async(uint8_t* dst, uint64_t dst_pitch, const uint8_t* src, uint64_t src_pitch, uint64_t width,
                             uint64_t rows, CopyKind) override {
        BG_CHECK(width <= dst_pitch && width <= src_pitch);
        for (uint64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, width);
        return ++tickets_;
    }
    void wait_copy(uint64_t ticket) override { BG_CHECK(ticket <= tickets_); }
    uint64_t device_used_bytes() const override { return 0; }
    bool device_is_host_addressable() const override { return true; }

private:
    uint64_t tickets_ = 0;
    static uint8_t* alloc(uint64_t bytes, const char* what) {
        const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + 4095) / 4096 * 4096;
        void* p = std::aligned_alloc(4096, rounded);
        if (!p) fail("cpu backend: cannot allocate %llu bytes for the %s", (unsigned long long)bytes, what);
        // Touch every page now so the first pass does not pay for page faults.
        std::memset(p, 0, rounded);
        return static_cast<uint8_t*>(p);
    }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace bg

namespace bg::cpu {

namespace {

class CpuDevice final : public DeviceFactory {
public:
    const char* name() const override { return "cpu"; }
    std::unique_ptr<Backend> make_backend(const BackendOptions& opts) override {
        if (opts.sm_limit != 0) fail("--sm-limit %d needs the CUDA backend (this run is on the CPU)", opts.sm_limit);
        return make_cpu_backend();
    }
    std::unique_ptr<Ops> make_ops(ThreadPool& pool) override { return make_cpu_ops(pool); }
};

}  // namespace

DeviceFactory& cpu_device() {
    static CpuDevice d;
    return d;
}

}  // namespace bg::cpu
