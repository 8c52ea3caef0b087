// Device backends on real CUDA: thin adapters from DeviceBackend to the
// CUDA runtime. Each call selects the target device first and restores the
// caller's current device afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "allocator/base/device_backend.h"

namespace cachealloc {

// Number of CUDA devices; 0 when there is no driver or device.
int cuda_device_count();

// cudaMalloc / cudaFree segments; cudaMemGetInfo for capacity; expandable
// segments through the driver's virtual memory management (cuMemCreate,
// cuMemMap, ...; the driver is looked up at run time, see driver_api.h).
std::unique_ptr<DeviceBackend> make_cuda_runtime_backend();
// Segments from each device's default memory pool with cudaMallocAsync on
// the requesting stream, returned with cudaFreeAsync on the segment's
// stream (stream-ordered: reuse after free is ordered by the stream).
// Expandable segments are not offered (the base class's functions throw):
// native's cudaMallocAsync allocator ignores expandable_segments, and the
// runtime keeps the engine's setting off with this backend.
std::unique_ptr<DeviceBackend> make_cuda_async_backend();

// Native's enablePeerAccess(dev, dev_to_access): `dev` may then access the
// memory of `dev_to_access`. Enables runtime peer access (already enabled
// is fine) and, with the cudaMalloc backend, maps every expandable page of
// `dev_to_access`, present and future, for `dev` too. Throws BackendError.
void cuda_enable_peer_access(DeviceBackend& backend, int dev, int dev_to_access);

// CUDA IPC of expandable segments, as native 2.11 (cudaMalloc backend
// only; BackendError otherwise; sharing is DeviceBackend::share_pages, with
// native's description, VmmPages::share). Open: maps a description from
// another process on `device` and returns its base (shared_pages.h).
// Close: unmaps what open returned; false when `backend` did not open it.
uintptr_t cuda_open_shared_expandable(DeviceBackend& backend, int device, std::string_view bytes);
bool cuda_close_shared_expandable(DeviceBackend& backend, uintptr_t base);

}  // namespace cachealloc
