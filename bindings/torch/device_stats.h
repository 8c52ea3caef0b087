// torch.cuda.memory_stats under the glue: cachealloc's counters, by name
// (the C API's stat names, native's keys), converted into PyTorch's
// DeviceStats, which PyTorch flattens into native's dict unchanged.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <utility>

namespace cachealloc_torch {

// By decltype: the type's namespace differs between torch releases.
using DeviceStats = decltype(std::declval<c10::cuda::CUDACachingAllocator::CUDAAllocator&>()
                                 .getDeviceStats(0));

// The statistics of `device`. Throws c10::Error with the library's message
// (a device out of range); std::out_of_range if a counter native has is
// missing from the library's list.
DeviceStats device_stats(c10::DeviceIndex device);

}  // namespace cachealloc_torch
