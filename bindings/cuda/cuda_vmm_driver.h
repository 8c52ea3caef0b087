// VmmDriver on the CUDA driver API (driver_api.h), for the cudaMalloc
// backend's expandable segments.
#pragma once

#include <memory>

#include "bindings/cuda/vmm_driver.h"

namespace cachealloc {

// The driver functions are resolved at the first call that needs them, so
// constructing one needs no driver.
std::unique_ptr<VmmDriver> make_cuda_vmm_driver();

// TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC, as native reads it: pages request a
// shareable handle type unless it is set to 0 (default on outside fbcode).
bool expandable_ipc_handles_from_environment();

}  // namespace cachealloc
