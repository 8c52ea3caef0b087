// The CUDA driver functions expandable segments need, looked up at run time
// through the runtime's cudaGetDriverEntryPointByVersion, as PyTorch's
// c10/cuda/driver_api does. libcachealloc.so links only the CUDA runtime,
// never libcuda: a machine without a driver still loads it (and gets a
// BackendError naming the missing driver at the first expandable growth).
#pragma once

#include <cuda.h>

#include <string>

namespace cachealloc {

// One entry per function: name and the driver API version to resolve it at.
// Versions are the lowest that have the function with the signature cuda.h
// declares (12000, as PyTorch pins them), so a newer driver cannot bind a
// newer variant with other behaviour.
#define CACHEALLOC_DRIVER_FUNCTIONS(_) \
  _(cuDeviceGetAttribute, 12000)       \
  _(cuMemAddressReserve, 12000)        \
  _(cuMemAddressFree, 12000)           \
  _(cuMemCreate, 12000)                \
  _(cuMemRelease, 12000)               \
  _(cuMemMap, 12000)                   \
  _(cuMemUnmap, 12000)                 \
  _(cuMemSetAccess, 12000)             \
  _(cuMemExportToShareableHandle, 12000) \
  _(cuMemImportFromShareableHandle, 12000) \
  _(cuGetErrorName, 12000)             \
  _(cuGetErrorString, 12000)

struct DriverApi {
#define CACHEALLOC_DRIVER_MEMBER(name, version) decltype(&::name) name = nullptr;
  CACHEALLOC_DRIVER_FUNCTIONS(CACHEALLOC_DRIVER_MEMBER)
#undef CACHEALLOC_DRIVER_MEMBER

  // The process's table, resolved once (thread-safe). Throws BackendError
  // naming the first function the driver does not provide (no driver, or
  // one older than CUDA 12); the next call tries again.
  static const DriverApi& get();
};

// "cuMemMap: CUDA_ERROR_INVALID_VALUE: invalid argument".
std::string driver_error_text(const char* what, CUresult status);
// Throws BackendError with driver_error_text unless status is CUDA_SUCCESS.
void check_driver(CUresult status, const char* what);

}  // namespace cachealloc
