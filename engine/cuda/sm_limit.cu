#include "cuda/sm_limit.cuh"

#include <algorithm>
#include <cstdio>
#include <string>

#include "cuda/check.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

// The driver API entry points --sm-limit uses, looked up through the runtime
// (cudaGetDriverEntryPointByVersion, at the ABI of the cuda.h compiled against) instead of
// linking libcuda: a binary linked to libcuda.so.1 would not even start where no NVIDIA driver is
// installed, and this build must run its CPU backend (and skip its GPU tests) there.
struct Driver {
    decltype(&::cuGetErrorName) GetErrorName = nullptr;
    decltype(&::cuGetErrorString) GetErrorString = nullptr;
    decltype(&::cuInit) Init = nullptr;
    decltype(&::cuDriverGetVersion) DriverGetVersion = nullptr;
    decltype(&::cuCtxGetCurrent) CtxGetCurrent = nullptr;
    decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
    decltype(&::cuDeviceGet) DeviceGet = nullptr;
    decltype(&::cuDeviceGetDevResource) DeviceGetDevResource = nullptr;
    decltype(&::cuDevSmResourceSplitByCount) DevSmResourceSplitByCount = nullptr;
    decltype(&::cuDevResourceGenerateDesc) DevResourceGenerateDesc = nullptr;
    decltype(&::cuGreenCtxCreate) GreenCtxCreate = nullptr;
    decltype(&::cuGreenCtxDestroy) GreenCtxDestroy = nullptr;
    decltype(&::cuCtxFromGreenCtx) CtxFromGreenCtx = nullptr;
    decltype(&::cuGreenCtxGetDevResource) GreenCtxGetDevResource = nullptr;
    decltype(&::cuStreamGetGreenCtx) StreamGetGreenCtx = nullptr;
    decltype(&::cuCtxGetDevResource) CtxGetDevResource = nullptr;
    std::string missing;  // entry points the driver does not have, comma-separated
};

template <typename F>
void load(F& fn, const char* name, std::string& missing) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, CUDA_VERSION, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
        cudaGetLastError();
        missing += strf("%s%s", missing.empty() ? "" : ", ", name);
        return;
    }
    fn = reinterpret_cast<F>(p);
}

// Loaded once per process: a table of the driver's functions, no engine state.
const Driver& driver() {
    static const Driver d = [] {
        Driver x;
        load(x.GetErrorName, "cuGetErrorName", x.missing);
        load(x.GetErrorString, "cuGetErrorString", x.missing);
        load(x.Init, "cuInit", x.missing);
        load(x.DriverGetVersion, "cuDriverGetVersion", x.missing);
        load(x.CtxGetCurrent, "cuCtxGetCurrent", x.missing);
        load(x.CtxSetCurrent, "cuCtxSetCurrent", x.missing);
        load(x.DeviceGet, "cuDeviceGet", x.missing);
        load(x.DeviceGetDevResource, "cuDeviceGetDevResource", x.missing);
        load(x.DevSmResourceSplitByCount, "cuDevSmResourceSplitByCount", x.missing);
        load(x.DevResourceGenerateDesc, "cuDevResourceGenerateDesc", x.missing);
        load(x.GreenCtxCreate, "cuGreenCtxCreate", x.missing);
        load(x.GreenCtxDestroy, "cuGreenCtxDestroy", x.missing);
        load(x.CtxFromGreenCtx, "cuCtxFromGreenCtx", x.missing);
        load(x.GreenCtxGetDevResource, "cuGreenCtxGetDevResource", x.missing);
        load(x.StreamGetGreenCtx, "cuStreamGetGreenCtx", x.missing);
        load(x.CtxGetDevResource, "cuCtxGetDevResource", x.missing);
        return x;
    }();
    return d;
}

std::string cu_error(CUresult r) {
    const Driver& d = driver();
    const char* name = nullptr;
    const char* text = nullptr;
    if (!d.GetErrorName || d.GetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "CUresult";
    if (!d.GetErrorString || d.GetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "";
    return strf("%s (%d)%s%s", name, static_cast<int>(r), *text ? ": " : "", text);
}

// Setting up the partition: an operating error (this GPU or driver cannot), thrown as bg::Error.
void cu_setup(CUresult r, int requested, const char* what) {
    if (r != CUDA_SUCCESS) fail("--sm-limit %d: %s failed: %s", requested, what, cu_error(r).c_str());
}

void rt_setup(cudaError_t e, int requested, const char* what) {
    if (e != cudaSuccess) fail("--sm-limit %d: %s failed: %s", requested, what, cudaGetErrorString(e));
}

// On the compute path a failing driver call is a dead device: abort with the call and its error.
#define BG_CU_CHECK(expr)                                                                            \
    do {                                                                                             \
        const CUresult bg_cu_r_ = (expr);                                                            \
        if (__builtin_expect(bg_cu_r_ != CUDA_SUCCESS, 0))                                           \
            ::bg::cuda::call_failed(__FILE__, __LINE__, #expr, "CUDA driver", cu_error(bg_cu_r_).c_str()); \
    } while (0)

// The driver's table, or an abort naming what is missing (only reached once a partition exists,
// which checked the table).
const Driver& loaded() {
    const Driver& d = driver();
    if (!d.missing.empty()) call_failed(__FILE__, __LINE__, "driver()", "CUDA driver", ("no " + d.missing).c_str());
    return d;
}

}  // namespace

SmPartition::SmPartition(int device, int requested) : device_(device) {
    // The primary context first: the green context is made from it (and cuGreenCtxCreate
    // advises it be initialised already); bind_thread() without a partition returns to it.
    rt_setup(cudaSetDevice(device), requested, "cudaSetDevice");
    rt_setup(cudaFree(nullptr), requested, "initialising the primary context (cudaFree(0))");
    int sms = 0, major = 0, minor = 0;
    rt_setup(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), requested, "cudaDeviceGetAttribute(SMs)");
    rt_setup(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), requested,
             "cudaDeviceGetAttribute(compute capability)");
    rt_setup(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), requested,
             "cudaDeviceGetAttribute(compute capability)");
    if (requested <= 0) {
        limit_ = choose_sm_count(0, sms, sm_partition_rule_for(major));
        return;
    }
    const Driver& d = driver();
    if (!d.missing.empty())
        fail("--sm-limit %d: the CUDA driver lacks what green contexts need (%s); they need a driver of CUDA 12.4 or "
             "later",
             requested, d.missing.c_str());
    cu_setup(d.Init(0), requested, "cuInit");
    cu_setup(d.CtxGetCurrent(&primary_), requested, "cuCtxGetCurrent");
    if (!primary_) fail("--sm-limit %d: no CUDA context is current after cudaSetDevice(%d)", requested, device);
    int driver = 0;
    cu_setup(d.DriverGetVersion(&driver), requested, "cuDriverGetVersion");
    if (driver < 12040)
        fail("--sm-limit %d: the CUDA driver (version %d.%d) has no green contexts, which need CUDA 12.4 or later", requested,
             driver / 1000, driver % 1000 / 10);
    CUdevice dev = 0;
    cu_setup(d.DeviceGet(&dev, device), requested, "cuDeviceGet");
    CUdevResource all{};
    const CUresult r = d.DeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS)
        fail("--sm-limit %d: this GPU (sm_%d%d) or its driver cannot partition its SMs: cuDeviceGetDevResource: %s", requested,
             major, minor, cu_error(r).c_str());
    // The device's own partition rule where it reports one, NVIDIA's guideline otherwise.
    SmPartitionRule rule = sm_partition_rule_for(major);
    if (all.sm.minSmPartitionSize > 0) rule.min_count = static_cast<int>(all.sm.minSmPartitionSize);
    if (all.sm.smCoscheduledAlignment > 0) rule.step = static_cast<int>(all.sm.smCoscheduledAlignment);
    const int total = all.sm.smCount > 0 ? static_cast<int>(all.sm.smCount) : sms;
    limit_ = choose_sm_count(requested, total, rule);
    if (!limit_.partitioned()) return;  // the request covers the whole device: the primary context

    // The split rounds minCount up to the device's granularity (28 gave 32 SMs on an H200, seen
    // there), hence the count is chosen below the request first.
    CUdevResource group{}, rest{};
    unsigned int n_groups = 1;
    cu_setup(d.DevSmResourceSplitByCount(&group, &n_groups, &all, &rest, 0, static_cast<unsigned>(limit_.used)), requested,
             strf("cuDevSmResourceSplitByCount(1 group of %d SMs)", limit_.used).c_str());
    if (n_groups != 1)
        fail("--sm-limit %d: the driver made %u groups of %d SMs out of %d, not 1", requested, n_groups, limit_.used, total);
    if (static_cast<int>(group.sm.smCount) != limit_.used) {
        // The driver rounds to its own granularity; what it gave is what runs, and it must not
        // exceed the request.
        if (static_cast<int>(group.sm.smCount) > requested)
            fail("--sm-limit %d: asked the driver for %d SMs and it gave %u, more than requested", requested, limit_.used,
                 group.sm.smCount);
        limit_.note += strf(" (the driver's split gave %u)", group.sm.smCount);
        limit_.used = static_cast<int>(group.sm.smCount);
    }
    CUdevResourceDesc desc = nullptr;
    cu_setup(d.DevResourceGenerateDesc(&desc, &group, 1), requested, "cuDevResourceGenerateDesc");
    // CUDA 13.0 requires CU_GREEN_CTX_DEFAULT_STREAM: the green context's own NULL stream.
    cu_setup(d.GreenCtxCreate(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), requested, "cuGreenCtxCreate");
    const CUresult rc = d.CtxFromGreenCtx(&ctx_, green_);
    if (rc != CUDA_SUCCESS) {
        d.GreenCtxDestroy(green_);
        green_ = nullptr;
        cu_setup(rc, requested, "cuCtxFromGreenCtx");
    }
    CUdevResource got{};
    cu_setup(d.GreenCtxGetDevResource(green_, &got, CU_DEV_RESOURCE_TYPE_SM), requested, "cuGreenCtxGetDevResource");
    if (static_cast<int>(got.sm.smCount) != limit_.used)
        fail("--sm-limit %d: the green context holds %u SMs, not the %d it was made with", requested, got.sm.smCount,
             limit_.used);
}

SmPartition::~SmPartition() {
    if (!green_) return;
    // A thread left bound to a destroyed context would fail its next CUDA call: the calling
    // thread (the one that owns the backend) returns to the primary context.
    const Driver& d = loaded();
    CUcontext cur = nullptr;
    if (d.CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx_) d.CtxSetCurrent(primary_);
    const CUresult r = d.GreenCtxDestroy(green_);
    if (r != CUDA_SUCCESS) std::fprintf(stderr, "cuda: cuGreenCtxDestroy: %s\n", cu_error(r).c_str());
}

void SmPartition::bind_thread() const {
    if (green_) {
        BG_CU_CHECK(loaded().CtxSetCurrent(ctx_));
        return;
    }
    BG_CUDA_CHECK(cudaSetDevice(device_));
}

bool SmPartition::owns(cudaStream_t s) const { return green_context_of(s) == green_; }

CUgreenCtx green_context_of(cudaStream_t s) {
    CUgreenCtx g = nullptr;
    BG_CU_CHECK(loaded().StreamGetGreenCtx(reinterpret_cast<CUstream>(s), &g));
    return g;
}

int current_sm_count() {
    int dev = 0, all = 0;
    BG_CUDA_CHECK(cudaGetDevice(&dev));
    BG_CUDA_CHECK(cudaDeviceGetAttribute(&all, cudaDevAttrMultiProcessorCount, dev));
    const Driver& d = driver();
    CUcontext c = nullptr;
    if (!d.CtxGetCurrent || !d.CtxGetDevResource || d.CtxGetCurrent(&c) != CUDA_SUCCESS || !c) return all;
    CUdevResource r{};
    if (d.CtxGetDevResource(c, &r, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS) return all;
    return std::min(all, static_cast<int>(r.sm.smCount));
}

int sm_count_of(CUgreenCtx g) {
    CUdevResource r{};
    BG_CU_CHECK(loaded().GreenCtxGetDevResource(g, &r, CU_DEV_RESOURCE_TYPE_SM));
    return static_cast<int>(r.sm.smCount);
}

namespace {

__global__ void record_smid_kernel(int* out, unsigned long long spin_ns) {
    unsigned int sm = 0;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    unsigned long long t0 = 0, t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < spin_ns);
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int>(sm);
}

}  // namespace

std::vector<int> sms_seen(cudaStream_t stream, int blocks, int spin_us) {
    BG_CHECK(blocks > 0 && spin_us >= 0);
    int* d = nullptr;
    BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int) * static_cast<size_t>(blocks)));
    // 1024 threads a block: at most two blocks fit on an SM at once, so the blocks spread.
    record_smid_kernel<<<blocks, 1024, 0, stream>>>(d, 1000ull * static_cast<unsigned long long>(spin_us));
    BG_CUDA_CHECK_LAUNCH();
    std::vector<int> ids(static_cast<size_t>(blocks));
    BG_CUDA_CHECK(cudaMemcpyAsync(ids.data(), d, sizeof(int) * ids.size(), cudaMemcpyDeviceToHost, stream));
    BG_CUDA_CHECK(cudaStreamSynchronize(stream));
    BG_CUDA_CHECK(cudaFree(d));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

}  // namespace bg::cuda
