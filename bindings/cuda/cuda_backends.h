// Device backends on real CUDA: thin adapters from DeviceBackend to the
// CUDA runtime. Each call selects the target device first and restores the
// caller's current device afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocator/device_backend.h"

namespace cachealloc {

// Number of CUDA devices; 0 when there is no driver or device.
int cuda_device_count();

// cudaMalloc / cudaFree segments; cudaMemGetInfo for capacity.
std::unique_ptr<DeviceBackend> make_cuda_runtime_backend();
// Segments from each device's default memory pool with cudaMallocAsync on
// the requesting stream, returned with cudaFreeAsync on the segment's
// stream (stream-ordered: reuse after free is ordered by the stream).
std::unique_ptr<DeviceBackend> make_cuda_async_backend();

}  // namespace cachealloc
