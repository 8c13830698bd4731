// A GPU activity tracer for machines without Nsight Systems: loaded into any CUDA process through
// CUDA_INJECTION64_PATH=libbg_cupti_trace.so, it records every kernel and copy the process runs
// (CUPTI activity records: start and end on the GPU's clock, stream, grid, name) and writes them at
// exit as CSV with the column names of `nsys stats --report cuda_gpu_trace`, so
// scripts/gpu-timeline.py reads either. Output: $BG_CUPTI_TRACE_OUT (default gpu-trace.csv).
// With BG_CUPTI_API=1 it also records the host's CUDA runtime calls (which thread, when each began
// and returned, on the same clock as the GPU's records) into $BG_CUPTI_TRACE_OUT.api.csv: where a
// GPU gap is host time, which thread spent it (a synchronisation's return, a launch, a copy issued
// late). Each GPU record's CorrId names the call that queued it. Tracing the calls costs about a
// microsecond each, so their own timings come out a little long.
// Records go through CUPTI's own buffers, handed back and kept in memory until exit: a measurement
// tool, not part of the engine.
#include <cupti.h>

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
    uint64_t start_ns, end_ns;
    uint32_t stream;
    int32_t grid_x;     // 0 for copies
    uint64_t bytes;     // copies only
    uint32_t corr;      // the runtime call that queued it
    std::string name;
};

// One CUDA runtime call on the host.
struct ApiRecord {
    uint64_t start_ns, end_ns;
    uint32_t thread;  // the OS thread id, cut to 32 bits
    uint32_t corr;
    uint32_t cbid;
};

constexpr size_t kBufferBytes = 8u << 20;
std::mutex g_mu;
std::vector<Record>* g_records = nullptr;  // owned for the process's life: written at exit
std::vector<ApiRecord>* g_api = nullptr;    // likewise, when BG_CUPTI_API=1

std::string demangle(const char* n) {
    int status = 0;
    char* d = abi::__cxa_demangle(n, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : n;
    std::free(d);
    return s;
}

const char* copy_kind(uint8_t k) {
    switch (k) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[CUDA memcpy Host-to-Device]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[CUDA memcpy Device-to-Host]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[CUDA memcpy Device-to-Device]";
        default: return "[CUDA memcpy other]";
    }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = kBufferBytes;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lock(g_mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
            g_records->push_back({k->start, k->end, k->streamId, k->gridX, 0, k->correlationId, demangle(k->name)});
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
            g_records->push_back({c->start, c->end, c->streamId, 0, c->bytes, c->correlationId, copy_kind(c->copyKind)});
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME && g_api) {
            const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
            g_api->push_back({a->start, a->end, a->threadId, a->correlationId, a->cbid});
        }
    }
    std::free(buffer);
}

std::string csv_quoted(const std::string& s) {
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
}

void write_at_exit() {
    cuptiActivityFlushAll(1);
    const char* path = std::getenv("BG_CUPTI_TRACE_OUT");
    FILE* f = std::fopen(path && *path ? path : "gpu-trace.csv", "w");
    if (!f) {
        std::perror("cupti_trace: cannot write the trace");
        return;
    }
    std::lock_guard<std::mutex> lock(g_mu);
    std::fprintf(f, "Start (ns),Duration (ns),GrdX,Bytes (B),Strm,Name,CorrId\n");
    for (const Record& r : *g_records)
        std::fprintf(f, "%llu,%llu,%d,%llu,%u,%s,%u\n", static_cast<unsigned long long>(r.start_ns),
                     static_cast<unsigned long long>(r.end_ns - r.start_ns), r.grid_x,
                     static_cast<unsigned long long>(r.bytes), r.stream, csv_quoted(r.name).c_str(), r.corr);
    std::fclose(f);
    std::fprintf(stderr, "cupti_trace: %zu GPU activities written\n", g_records->size());
    if (!g_api) return;
    const std::string api_path = std::string(path && *path ? path : "gpu-trace.csv") + ".api.csv";
    FILE* a = std::fopen(api_path.c_str(), "w");
    if (!a) {
        std::perror("cupti_trace: cannot write the runtime calls");
        return;
    }
    std::fprintf(a, "Start (ns),Duration (ns),Thread,CorrId,Name\n");
    for (const ApiRecord& r : *g_api) {
        const char* name = nullptr;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, r.cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
        std::fprintf(a, "%llu,%llu,%u,%u,%s\n", static_cast<unsigned long long>(r.start_ns),
                     static_cast<unsigned long long>(r.end_ns - r.start_ns), r.thread, r.corr, name);
    }
    std::fclose(a);
    std::fprintf(stderr, "cupti_trace: %zu runtime calls written to %s\n", g_api->size(), api_path.c_str());
}

}  // namespace

// Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH).
extern "C" int InitializeInjection(void) {
    g_records = new std::vector<Record>();
    g_records->reserve(1 << 20);
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
        std::fprintf(stderr, "cupti_trace: CUPTI activity tracing could not be enabled\n");
        return 0;
    }
    const char* api = std::getenv("BG_CUPTI_API");
    if (api && std::strcmp(api, "1") == 0) {
        g_api = new std::vector<ApiRecord>();
        g_api->reserve(1 << 21);
        if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS) {
            std::fprintf(stderr, "cupti_trace: runtime call tracing could not be enabled\n");
            delete g_api;
            g_api = nullptr;
        }
    }
    std::atexit(write_at_exit);
    return 1;
}
