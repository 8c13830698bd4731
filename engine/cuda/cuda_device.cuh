// The CUDA device for a session: the CUDA backend (VRAM pools, page-locked host pools, a copy
// stream) and the CUDA ops the forward pass runs on.
#pragma once

#include "backend/device.h"

namespace bg::cuda {

DeviceFactory& cuda_device();

}  // namespace bg::cuda
