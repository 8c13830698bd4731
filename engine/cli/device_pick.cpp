#include "cli/device_pick.h"

#include "util/check.h"
#ifdef BG_HAVE_CUDA
#include "cuda/cuda_device.cuh"
#include "cuda/dequant.cuh"
#endif

namespace bg::cli {

DeviceFactory* pick_device(RunConfig& cfg) {
    const BackendChoice want = cfg.backend;
#ifdef BG_HAVE_CUDA
    const bool gpu = cuda::device_count() > 0;
    if (want == BackendChoice::kCuda && !gpu) fail("--backend cuda: no CUDA device is visible");
    if (want == BackendChoice::kCuda || (want == BackendChoice::kAuto && gpu)) {
        cfg.backend = BackendChoice::kCuda;
        return &cuda::cuda_device();
    }
#else
    if (want == BackendChoice::kCuda) fail("--backend cuda: this build has no CUDA backend (configure with nvcc present)");
#endif
    cfg.backend = BackendChoice::kCpu;
    return nullptr;
}

}  // namespace bg::cli
