#include "bindings/cuda/driver_api.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "allocator/base/errors.h"

namespace cachealloc {
namespace {

// Resolves every function; throws naming the first one missing.
std::unique_ptr<DriverApi> resolve() {
  auto api = std::make_unique<DriverApi>();
  auto lookup = [](const char* name, unsigned version, void** out) {
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion(name, out, version, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || *out == nullptr) {
      const std::string why =
          err != cudaSuccess ? std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err)
          : found == cudaDriverEntryPointVersionNotSufficent ? "the driver is older than CUDA " +
                                                                   std::to_string(version / 1000) + "." +
                                                                   std::to_string(version % 1000 / 10)
                                                             : "the driver does not provide it";
      (void)cudaGetLastError();  // not sticky: leave the runtime's error state clean
      throw BackendError("cachealloc: CUDA driver function " + std::string(name) +
                         " is unavailable (" + why + "); expandable segments need the CUDA driver");
    }
  };
#define CACHEALLOC_DRIVER_LOOKUP(name, version) \
  lookup(#name, version, reinterpret_cast<void**>(&api->name));
  CACHEALLOC_DRIVER_FUNCTIONS(CACHEALLOC_DRIVER_LOOKUP)
#undef CACHEALLOC_DRIVER_LOOKUP
  return api;
}

}  // namespace

const DriverApi& DriverApi::get() {
  // Not a function-local static initialised by resolve(): a failed lookup
  // must not be cached for the process (a later call may find the driver
  // once CUDA is initialised), and a successful one must be seen by all.
  static std::mutex mutex;
  static std::unique_ptr<DriverApi> api;
  static std::atomic<const DriverApi*> ready{nullptr};
  if (const DriverApi* p = ready.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(mutex);
  if (!api) api = resolve();
  ready.store(api.get(), std::memory_order_release);
  return *api;
}

std::string driver_error_text(const char* what, CUresult status) {
  const char* name = nullptr;
  const char* text = nullptr;
  std::string out = std::string(what) + ": ";
  const DriverApi* api = nullptr;
  try {
    api = &DriverApi::get();
  } catch (const BackendError&) {
  }
  if (api && api->cuGetErrorName(status, &name) == CUDA_SUCCESS && name) out += name;
  else out += "CUresult " + std::to_string(static_cast<int>(status));
  if (api && api->cuGetErrorString(status, &text) == CUDA_SUCCESS && text) out += std::string(": ") + text;
  return out;
}

void check_driver(CUresult status, const char* what) {
  if (status != CUDA_SUCCESS) throw BackendError("CUDA driver error in " + driver_error_text(what, status));
}

}  // namespace cachealloc
