#include "cli/device_pick.h"

#include "util/check.h"
#ifdef BG_HAVE_CUDA
#include "cuda/cuda_device.cuh"
#include "cuda/dequant.cuh"
#endif

namespace bg::cli {

DeviceFactory* pick_device(RunConfig& cfg) {
    const std::string want = cfg.backend;
    if (want != "auto" && want != "cpu" && want != "cuda") fail("--backend must be auto, cpu or cuda, got '%s'", want.c_str());
#ifdef BG_HAVE_CUDA
    const bool gpu = cuda::device_count() > 0;
    if (want == "cuda" && !gpu) fail("--backend cuda: no CUDA device is visible");
    if (want == "cuda" || (want == "auto" && gpu)) {
        cfg.backend = "cuda";
        return &cuda::cuda_device();
    }
#else
    if (want == "cuda") fail("--backend cuda: this build has no CUDA backend (configure with nvcc present)");
#endif
    cfg.backend = "cpu";
    return nullptr;
}

}  // namespace bg::cli
