// The device's processes and their memory, for the OOM message.
#pragma once

#include <string>

namespace cachealloc_torch {

// Native's NVML report of the device's processes (reportProcessMemoryInfo
// in torch 2.11): "Including non-PyTorch memory, this process has X memory
// in use. " for this process, "Process P has X memory in use. " for each
// other one, in NVML's order; "" where NVML cannot be loaded or answers an
// error (native's build without NVML reports nothing either). NVML is
// opened once, by its soname, as native's DriverAPI does.
// Never throws but std::bad_alloc.
std::string process_memory_report(int device);

}  // namespace cachealloc_torch
