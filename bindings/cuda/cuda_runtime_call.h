// What every CUDA-runtime call in the backends needs: an error turned into
// a BackendError naming the call, and the target device made current for a
// scope (restored afterwards; calls carry their device, the caller's
// current device is left as it was).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "allocator/base/errors.h"

namespace cachealloc {

// Throws BackendError "CUDA error in WHAT: NAME: TEXT" unless err is cudaSuccess.
inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw BackendError(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) +
                       ": " + cudaGetErrorString(err));
}

// Makes `device` current for the scope (the driver's primary context of
// that device is then current too); restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
    switched_ = previous_ != device;
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace cachealloc
