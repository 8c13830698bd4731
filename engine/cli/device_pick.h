// Resolves --backend (auto | cpu | cuda) to the device a session runs on; writes the choice
// back into the config so every results file says what ran.
#pragma once

#include "runtime/session.h"

namespace bg::cli {

DeviceFactory* pick_device(RunConfig& cfg);

}  // namespace bg::cli
