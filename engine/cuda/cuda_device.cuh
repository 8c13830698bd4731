// The CUDA device for a session: the CUDA backend (VRAM pools, page-locked host pools, a copy
// stream) and the GPU forward pass.
#pragma once

#include "backend/device.h"

namespace bg::cuda {

DeviceFactory& cuda_device();

}  // namespace bg::cuda
